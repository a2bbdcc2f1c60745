"""A real Prometheus server on loopback for e2e tests: scrapes given targets every second.

`prometheus_server(tmp, targets)` writes a prometheus.yml, starts `/usr/bin/prometheus` (or
whichever `prometheus` is on PATH) listening only on 127.0.0.1:<free port> with its TSDB under
`tmp`, waits for `/-/ready`, and always terminates it on exit. A missing binary is an error,
not a skip: `make test` installs Debian's `prometheus` package first (`make system-deps`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.launcher import free_port

PROMETHEUS_PATHS = ("/usr/bin/prometheus",)
READY_TIMEOUT_S = 30.0
SCRAPE_INTERVAL = "1s"


def prometheus_binary() -> str:
    """The prometheus executable; fails (never skips) with a clear message when it is missing."""
    for candidate in PROMETHEUS_PATHS:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("prometheus")
    if found:
        return found
    raise AssertionError(
        "prometheus is not installed (looked for /usr/bin/prometheus and on PATH); "
        "install Debian's package: `apt-get install prometheus` (`make test` does this as root)"
    )


class PrometheusError(AssertionError):
    pass


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen
    log_path: Path

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def api(self, path: str, params: dict[str, str] | None = None, timeout: float = 10) -> Any:
        """GET /api/v1/<path>; returns `data`, raises PrometheusError on an error status."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.url}/api/v1/{path}{query}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422: a bad expression, with a message
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """Instant query; the result vector (a scalar result becomes one unlabelled element)."""
        data = self.api("query", {"query": expr})
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: unexpected result type {data['resultType']}")
        return data["result"]

    def alerting_rules(self) -> list[dict]:
        """Every loaded alerting rule as the rules API reports it (state, health, lastError)."""
        groups = self.api("rules", {"type": "alert"})["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def targets_up(self) -> dict[str, bool]:
        """scrapeUrl -> whether its last scrape succeeded, for every active target."""
        return {t["scrapeUrl"]: t["health"] == "up" for t in self.api("targets")["activeTargets"]}


def write_config(
    path: Path, targets: dict[str, list[str]], rule_files: Sequence[Path] = ()
) -> None:
    """One scrape job per name (its `component` label), each with its host:port targets,
    and the rule files to evaluate (every second, as the scrapes)."""
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "scrape_configs": [
            {
                "job_name": f"mediamesh-{name}",
                "static_configs": [{"targets": addresses, "labels": {"component": name}}],
            }
            for name, addresses in targets.items()
        ],
    }
    if rule_files:
        config["rule_files"] = [str(rule_file) for rule_file in rule_files]
    path.write_text(yaml.safe_dump(config, sort_keys=False))


@contextmanager
def prometheus_server(
    tmp: Path,
    targets: dict[str, list[str]],
    ready_timeout_s: float = READY_TIMEOUT_S,
    rule_files: Sequence[Path] = (),
) -> Iterator[PrometheusServer]:
    """Runs Prometheus scraping `targets` ({component: ["127.0.0.1:port", ...]}), with the
    alerting rules of `rule_files`."""
    binary = prometheus_binary()
    root = tmp / "prometheus"
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "prometheus.yml"
    write_config(config_path, targets, rule_files)
    port = free_port()
    log_path = root / "prometheus.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--storage.tsdb.path={root / 'data'}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        _wait_ready(server, ready_timeout_s)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _wait_ready(server: PrometheusServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise PrometheusError(f"prometheus not ready within {timeout_s:.0f} s:\n{server.log_tail()}")
