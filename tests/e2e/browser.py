"""A real headless Chromium for e2e tests, driven by selenium through Debian's chromedriver.

`make test` installs Debian's `chromium` and `chromium-driver` first (`make system-deps`), as
it does `prometheus`. A missing binary fails the test when running as root (the packages
should have been installed), and skips it, naming the packages, only for a user who cannot
install them. Selenium Manager never runs: both paths are given, so nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_PATHS = ("/usr/bin/chromium",)
CHROMEDRIVER_PATHS = ("/usr/bin/chromedriver",)
PACKAGES = "chromium chromium-driver"
# Seconds a page load or a script may take before the driver gives up on it.
PAGE_LOAD_TIMEOUT_S = 60
SCRIPT_TIMEOUT_S = 30


def _find(paths: tuple[str, ...], program: str) -> str | None:
    for candidate in paths:
        if Path(candidate).is_file():
            return candidate
    return shutil.which(program)


def browser_binaries() -> tuple[str, str]:
    """Chromium and chromedriver; fails as root and skips otherwise when one is missing."""
    chromium = _find(CHROMIUM_PATHS, "chromium")
    driver = _find(CHROMEDRIVER_PATHS, "chromedriver")
    if chromium is not None and driver is not None:
        return chromium, driver
    missing = [
        name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path
    ]
    message = (
        f"{' and '.join(missing)} not installed; install Debian's packages: "
        f"`apt-get install {PACKAGES}` (`make test` does this as root)"
    )
    if os.geteuid() == 0:
        raise AssertionError(message)
    pytest.skip(message)


@contextmanager
def headless_chromium(profile_dir: Path, log_path: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a fresh profile under `profile_dir`; chromedriver logs to
    `log_path`. On exit the browser quits and no process of it is left running."""
    chromium, chromedriver = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        # Chromium's sandbox cannot start as root (containers, CI).
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--window-size=1500,1100",
        f"--user-data-dir={profile_dir}",
    ):
        options.add_argument(argument)
    service = Service(chromedriver, log_output=str(log_path))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
        driver.set_script_timeout(SCRIPT_TIMEOUT_S)
        yield driver
    finally:
        # Renderers come and go with pages: collect the processes just before quitting.
        started = _processes_of(service)
        driver.quit()
        _gone, alive = psutil.wait_procs(started, timeout=10)
        for process in alive:
            process.kill()
        assert not alive, f"browser processes left after quit: {[p.pid for p in alive]}"


def _processes_of(service: Service) -> list[psutil.Process]:
    """chromedriver and every browser process under it."""
    try:
        root = psutil.Process(service.process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
