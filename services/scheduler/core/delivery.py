"""How a job's outcome reaches its caller besides Watch: a result URL, a webhook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The events a webhook may ask for; "failed" covers every end without a result.
WEBHOOK_EVENTS = ("completed", "failed", "progress")
DEFAULT_WEBHOOK_EVENTS = ("completed", "failed")


@dataclass(frozen=True)
class WebhookTarget:
    """Where to POST the job's events, and which ones (a subset of WEBHOOK_EVENTS)."""

    url: str
    events: tuple[str, ...] = DEFAULT_WEBHOOK_EVENTS

    def wants(self, event: str) -> bool:
        """Whether `event` is to be delivered."""
        return event in self.events


@dataclass(frozen=True)
class ResultDelivery:
    """The request's delivery options, kept with the job (and in the store) for its life."""

    # Answer with a presigned URL even when the result would fit inline.
    result_as_url: bool = False
    webhook: WebhookTarget | None = None

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict, read back by `from_record`."""
        record: dict[str, Any] = {"result_as_url": self.result_as_url}
        if self.webhook is not None:
            record["webhook"] = {"url": self.webhook.url, "events": list(self.webhook.events)}
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ResultDelivery:
        """The options `to_record` wrote; an empty record is the defaults."""
        hook = record.get("webhook")
        webhook = WebhookTarget(hook["url"], tuple(hook["events"])) if hook else None
        return cls(bool(record.get("result_as_url", False)), webhook)
