"""The web page's routes and files: served from package data, nothing fetched from elsewhere,
and every element the script looks up exists in the page."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mediamesh.gateway.http import errors
from mediamesh.gateway.web import page

FILES = ("index.html", "app.js", "style.css")


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    errors.install(app)
    page.install(app)
    return TestClient(app)


def test_the_page_and_its_assets_are_served_with_a_strict_policy(client: TestClient) -> None:
    index = client.get("/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    policy = index.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    # Relative to the page, so that a proxy's path prefix stays in front of them.
    referenced = re.findall(r'(?:src|href)="(web/[^"]+)"', index.text)
    assert sorted(referenced) == ["web/app.js", "web/style.css"]
    kinds = {"/web/app.js": "text/javascript", "/web/style.css": "text/css"}
    for path, kind in kinds.items():
        asset = client.get(path)
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert asset.content == page.read_static(path.removeprefix("/web/"))


@pytest.mark.parametrize("path", ["/web/nope.js", "/web/index.html", "/web/..%2Fpage.py"])
def test_only_the_listed_assets_are_served(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert answer.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize("name", FILES)
def test_nothing_comes_from_another_origin(name: str) -> None:
    text = page.read_static(name).decode()
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", text), name


def test_every_element_the_script_looks_up_is_in_the_page() -> None:
    html = page.read_static("index.html").decode()
    script = page.read_static("app.js").decode()
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    looked_up = set(re.findall(r'\$\("([^"]+)"\)', script))
    looked_up = {i for i in looked_up if not i.startswith("f-")}  # fields made per model
    assert looked_up and not looked_up - ids, sorted(looked_up - ids)


@pytest.mark.parametrize("sink", ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"])
def test_the_script_never_writes_markup(sink: str) -> None:
    # Prompts, job ids and error messages are the caller's text: the page sets them as text
    # (textContent, attributes), never parses them as HTML.
    assert sink not in page.read_static("app.js").decode()


def test_long_words_wrap_instead_of_scrolling_a_narrow_screen_sideways() -> None:
    css = page.read_static("style.css").decode()
    rule = re.search(r"(?m)^([^{}\n]*)\{[^}]*overflow-wrap:\s*anywhere", css)
    assert rule and {"main", ".bar"} <= {s.strip() for s in rule[1].split(",")}, rule


def test_the_progress_bar_is_named_and_only_state_changes_are_announced() -> None:
    html = page.read_static("index.html").decode()
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    bar = re.search(r"<progress [^>]*>", html)[0]  # type: ignore[index]
    label = re.search(r'aria-labelledby="([^"]+)"', bar)
    assert label and label[1] in ids, bar
    live = re.findall(
        r'<[^>]*\bid="([^"]+)"[^>]*aria-live=|<[^>]*aria-live=[^>]*\bid="([^"]+)"', html
    )
    announced = {a or b for a, b in live}
    assert "progress-text" not in announced and "job-state" not in announced
    assert "job-announce" in announced
