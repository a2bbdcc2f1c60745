"""Credentials carried in URLs are kept out of spans.

A signed result link's `signature` opens the result without an API key until it expires,
so a span that recorded it would hand the result to anyone who reads the traces. FastAPI's
own request spans redact only the query keys OpenTelemetry's conventions name (`sig`,
`X-Amz-Signature`, ...), so this processor, first on the tracer provider, redacts the mesh's
own before any exporter sees the span.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span, SpanProcessor

# Query keys whose values are credentials (result_links.py signs with `signature`).
SECRET_QUERY_KEYS = frozenset({"signature"})
REDACTED = "REDACTED"


def redacted_query(query: str) -> str:
    """`query` with the value of each SECRET_QUERY_KEYS key replaced; as it was when none is
    there (so that an unparsed query is not rewritten for nothing)."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(key in SECRET_QUERY_KEYS for key, _ in pairs):
        return query
    return urlencode([(k, REDACTED if k in SECRET_QUERY_KEYS else v) for k, v in pairs])


class QueryRedaction(SpanProcessor):
    """Rewrites `url.query` and `url.full` as each span starts, while it still records."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attributes = span.attributes or {}
        query = attributes.get("url.query")
        if isinstance(query, str):
            span.set_attribute("url.query", redacted_query(query))
        full = attributes.get("url.full")
        if isinstance(full, str):
            parts = urlsplit(full)
            span.set_attribute(
                "url.full", urlunsplit(parts._replace(query=redacted_query(parts.query)))
            )
