"""/docs: its Content-Security-Policy runs its own inline script and style sheet, by hash,
and nothing else."""

from __future__ import annotations

import base64
import hashlib
import re

from mediamesh.gateway.http import docs_page


def _source(text: str) -> str:
    return f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"


def test_the_policy_names_the_pages_own_script_and_style_by_hash_and_nothing_more() -> None:
    html = docs_page.DOCS_HTML
    meta = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert meta, "no policy in the page"
    policy = dict(d.strip().split(" ", 1) for d in meta[1].split(";"))
    assert policy["default-src"] == "'none'" and policy["connect-src"] == "'self'"
    assert "'unsafe-inline'" not in meta[1] and "nonce-" not in meta[1]
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(scripts) == 1 and len(styles) == 1
    assert policy["script-src"] == _source(scripts[0])
    assert policy["style-src"] == _source(styles[0])
    # The policy must come before what it governs.
    assert html.index(meta[0]) < html.index("<style>") < html.index("<script>")
    assert "on" not in {a[:2] for a in re.findall(r"\s(\w+)=", html)}  # no inline handlers
