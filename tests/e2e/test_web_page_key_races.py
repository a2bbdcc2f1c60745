"""The web page in a real headless Chromium when answers come late: an answer asked for under
a key that was since forgotten or changed must not bring that key's tenant back on the page.

The page's files are served as the gateway serves them, next to a stand-in of the few /v1
calls it makes, whose answers for one key can be held (a slow network) and let through after
the key changed. No mesh is started.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from mediamesh.gateway.web.page import ASSETS, INDEX, read_static
from tests.e2e.browser import browser_binaries, headless_chromium
from tests.e2e.test_web_page import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
ALPHA = "key-alpha"
BETA = "key-beta"
# Seconds a held answer waits for the test to let it through; the page's wait for a change.
HOLD_TIMEOUT_S = 30
PAGE_TIMEOUT_S = 15
# Seconds the page is watched after a late answer reached it: it acts on one within ms.
SETTLE_S = 1.0


def tenant_of(key: str) -> str:
    return key.removeprefix("key-")


def models_of(key: str) -> list[dict]:
    return [
        {
            "name": f"{tenant_of(key)}-model-{n}",
            "ready": True,
            "modality": "image",
            "accepted_fields": ["prompt"],
            "inputs": [],
            "limits": {},
            "output_formats": ["png"],
        }
        for n in range(3)
    ]


def jobs_of(key: str) -> list[dict]:
    return [
        {
            "job_id": f"{tenant_of(key)}-job-{n}",
            "model": f"{tenant_of(key)}-model-0",
            "prompt": f"{tenant_of(key)}'s prompt {n}",
            "state": "SUCCEEDED",
        }
        for n in range(4)
    ]


class StandIn(ThreadingHTTPServer):
    """The page and a stand-in API; `hold` keeps one key's answers back until `release`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.held_key: str | None = None
        self.gate = threading.Event()
        self.waiting = 0
        self.answered_late = 0

    def hold(self, key: str) -> None:
        with self.lock:
            self.held_key, self.waiting, self.answered_late = key, 0, 0
            self.gate = threading.Event()

    def release(self) -> None:
        self.gate.set()

    def count(self, name: str) -> int:
        with self.lock:
            return int(getattr(self, name))

    def wait_for(self, name: str, at_least: int) -> None:
        deadline = time.monotonic() + HOLD_TIMEOUT_S
        while self.count(name) < at_least:
            assert time.monotonic() < deadline, f"{name}: {self.count(name)} < {at_least}"
            time.sleep(0.02)


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reports what went wrong."""

    def do_GET(self) -> None:
        if self.path == "/":
            self.send(200, read_static(INDEX), "text/html; charset=utf-8")
        elif self.path.startswith("/web/") and self.path[5:] in ASSETS:
            self.send(200, read_static(self.path[5:]), ASSETS[self.path[5:]])
        else:
            self.api()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.api()

    def api(self) -> None:
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        body: dict[str, object]
        if key not in (ALPHA, BETA):
            body = {"code": "UNAUTHENTICATED", "message": "an API key is required"}
            self.send(401, json.dumps(body).encode(), "application/json")
            return
        late = key == self.server.held_key
        if late:
            with self.server.lock:
                self.server.waiting += 1
            self.server.gate.wait(HOLD_TIMEOUT_S)
        if self.command == "POST":
            body = {"job_id": f"{tenant_of(key)}-new-job", "model": "m", "state": "QUEUED"}
        elif self.path.startswith("/v1/models"):
            body = {"data": models_of(key)}
        elif self.path.startswith("/v1/jobs?"):
            body = {"data": jobs_of(key), "has_more": False}
        else:
            body = {"job_id": self.path.rsplit("/", 1)[-1], "state": "SUCCEEDED"}
        self.send(
            202 if self.command == "POST" else 200, json.dumps(body).encode(), "application/json"
        )
        if late:
            with self.server.lock:
                self.server.answered_late += 1

    def send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    browser_binaries()
    server = StandIn()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release()
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    tmp = tmp_path_factory.mktemp("chromium")
    with headless_chromium(tmp / "profile", tmp / "chromedriver.log") as driver:
        # Chromium's cache holds a request back while one for the same URL is on its way: the
        # new key's GET /v1/models would wait for the held one.
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        yield driver


@pytest.fixture
def page(stand_in: StandIn, browser: webdriver.Chrome) -> Iterator[webdriver.Chrome]:
    """The page, fresh, with no key: it asks for one."""
    stand_in.hold("")
    base = f"http://127.0.0.1:{stand_in.server_address[1]}"
    browser.get(f"{base}/")
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{base}/")
    wait_until(
        browser,
        "document.getElementById('key-status').textContent.includes('needs an API key')",
        PAGE_TIMEOUT_S,
        "the page asking for a key",
    )
    yield browser
    stand_in.release()


def use_key(browser: webdriver.Chrome, key: str) -> None:
    field = browser.find_element(By.ID, "api-key")
    field.clear()
    field.send_keys(key)
    browser.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()


def tenant_shown(browser: webdriver.Chrome) -> dict:
    """What of any tenant the page shows and keeps: model names, listed jobs, stored jobs."""
    return browser.execute_script(
        "return {models: [...document.querySelectorAll('#model option')].map((o) => o.value),"
        " jobs: [...document.querySelectorAll('#jobs [data-job-id]')].map((b) => b.dataset.jobId),"
        " stored: sessionStorage.getItem('mediamesh.jobs') || '',"
        " job_shown: !document.getElementById('job').hidden}"
    )


def watch(browser: webdriver.Chrome, expected: dict) -> None:
    """The page shows `expected` for SETTLE_S, late answers arriving or not."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        shown = tenant_shown(browser)
        assert {name: shown[name] for name in expected} == expected
        time.sleep(0.05)


def test_a_late_answer_for_a_forgotten_key_stays_off_the_page(
    stand_in: StandIn, page: webdriver.Chrome
) -> None:
    stand_in.hold(ALPHA)
    use_key(page, ALPHA)
    stand_in.wait_for("waiting", 2)  # its models and its jobs asked for
    page.find_element(By.ID, "forget-key").click()
    stand_in.release()
    stand_in.wait_for("answered_late", 2)
    watch(page, {"models": [], "jobs": [], "job_shown": False})
    assert "alpha" not in tenant_shown(page)["stored"]


def test_a_late_answer_for_the_previous_key_does_not_replace_the_new_ones(
    stand_in: StandIn, page: webdriver.Chrome
) -> None:
    stand_in.hold(ALPHA)
    use_key(page, ALPHA)
    stand_in.wait_for("waiting", 2)
    use_key(page, BETA)
    wait_until(page, "document.querySelector('#jobs [data-job-id]')", PAGE_TIMEOUT_S, "beta's")
    stand_in.release()
    stand_in.wait_for("answered_late", 2)
    beta_models = [model["name"] for model in models_of(BETA)]
    beta_jobs = [job["job_id"] for job in jobs_of(BETA)]
    watch(page, {"models": beta_models, "jobs": beta_jobs})
    assert "alpha" not in tenant_shown(page)["stored"]


def test_a_job_made_under_a_forgotten_key_is_not_listed_when_its_answer_comes(
    stand_in: StandIn, page: webdriver.Chrome, tmp_path: Path
) -> None:
    use_key(page, ALPHA)
    wait_until(page, "document.querySelector('#f-prompt')", PAGE_TIMEOUT_S, "alpha's model")
    Select(page.find_element(By.ID, "model")).select_by_value("alpha-model-1")
    page.find_element(By.ID, "f-prompt").send_keys("a secret of alpha's")
    stand_in.hold(ALPHA)
    page.find_element(By.ID, "submit").click()
    stand_in.wait_for("waiting", 1)
    page.find_element(By.ID, "forget-key").click()
    stand_in.release()
    stand_in.wait_for("answered_late", 1)
    watch(page, {"models": [], "jobs": [], "job_shown": False})
    assert "alpha" not in tenant_shown(page)["stored"]
