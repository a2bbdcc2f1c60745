"""An offline docs page for the OpenAPI document.

FastAPI's Swagger UI and ReDoc pages load their scripts from a CDN, which a mesh on a closed
network cannot reach, and vendoring them would ship megabytes of someone else's code. This
page is a few lines of HTML and script of our own: it reads `/openapi.json` and lists each
path and method with its summary, description, parameters and body and answer schemas.

Its one style sheet and one script are inline, so its Content-Security-Policy names them by
hash: nothing else runs or styles the page, even text of the OpenAPI document that got
into it as markup (it is only ever set as text), and it connects to this gateway alone. The
policy is in the page itself (a `<meta>` ahead of both), so the route serves it as it is;
`frame-ancestors`, which a `<meta>` cannot set, comes with every answer's headers
(security_headers.py).
"""

from __future__ import annotations

import base64
import hashlib

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
h2{font-family:monospace;font-size:1.05rem;border-top:1px solid #ccc;padding-top:1rem}
.method{display:inline-block;min-width:4.5rem;font-weight:bold}
pre{background:#f5f5f5;padding:.5rem;overflow:auto;font-size:.8rem;white-space:pre-wrap}
details{margin:.3rem 0}
"""
_SCRIPT = """
"use strict";
function el(tag, text) {
  const e = document.createElement(tag); if (text) e.textContent = text; return e;
}
function block(title, value) {
  const d = el("details"); d.appendChild(el("summary", title));
  d.appendChild(el("pre", JSON.stringify(value, null, 2))); return d;
}
fetch("/openapi.json").then(r => r.json()).then(doc => {
  const root = document.getElementById("paths"); root.textContent = "";
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const h = el("h2"); const m = el("span", method.toUpperCase()); m.className = "method";
      h.appendChild(m); h.appendChild(document.createTextNode(" " + path)); root.appendChild(h);
      if (op.summary) root.appendChild(el("strong", op.summary));
      if (op.description) root.appendChild(el("pre", op.description));
      if (op.parameters) root.appendChild(block("parameters", op.parameters));
      if (op.requestBody) root.appendChild(block("request body", op.requestBody));
      root.appendChild(block("responses", op.responses));
    }
  }
  root.appendChild(block("schemas", (doc.components || {}).schemas || {}));
}).catch(e => { document.getElementById("paths").textContent = "Failed: " + e; });
"""


def _hash(text: str) -> str:
    """A CSP source naming an inline element by the SHA-256 of its text."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_hash(_SCRIPT)}; style-src {_hash(_STYLE)}; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'"
)
DOCS_HTML = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">
<title>mediamesh HTTP API</title>
<style>{_STYLE}</style></head>
<body><h1>mediamesh HTTP API</h1>
<p>The machine-readable document is <a href="/openapi.json">/openapi.json</a>.
Send API keys as <code>Authorization: Bearer &lt;key&gt;</code>.</p>
<div id="paths">Loading /openapi.json ...</div>
<script>{_SCRIPT}</script></body></html>
"""
