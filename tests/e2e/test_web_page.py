"""The web page at `/`, in a real headless Chromium against a mesh started with `mediamesh up`:
a job with live previews and its rendered image, a long job cancelled from the page, a bad
input whose error the page shows, an image uploaded through the page's file field, and a
video result played and offered for download.

One mesh (one worker serving flux-tiny, flux-img2img-tiny and wan-tiny) and one browser for
the module. The mesh has API keys, so the
page's key field, and its event stream and result download with `Authorization`, are used.
Jobs are sized so the page sees them run: 512x512 takes a tiny model a few seconds, so
previews arrive while it watches.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.e2e.browser import browser_binaries, headless_chromium
from tests.e2e.conftest import MeshProcess, mesh_config, start, stop

# Mesh start-up (up to READY_TIMEOUT_S under load) is part of the first test's time.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]
MODEL = "flux-tiny"
IMAGE_MODEL = "flux-img2img-tiny"  # ListModels `inputs` has "image": the page shows a file field
VIDEO_MODEL = "wan-tiny"
KEY = "web-page-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GATEWAY = {
    "api_keys": [{"sha256": hashlib.sha256(KEY.encode()).hexdigest(), "tenant": "web"}],
    "tenants": {"web": {"requests_per_second": 50, "burst": 100}},
}
# Seconds the page may take to show a finished job; a cancelled one; an error.
JOB_TIMEOUT_S = 180
CANCEL_TIMEOUT_S = 120
ERROR_TIMEOUT_S = 30
# Seconds a rendered video may take to load its metadata in the page.
MEDIA_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[MeshProcess]:
    browser_binaries()  # skip or fail before starting a mesh for nothing
    tmp = tmp_path_factory.mktemp("web-page")
    config = mesh_config(
        tmp, models_dir, [{"models": [MODEL, IMAGE_MODEL, VIDEO_MODEL]}], gateway=GATEWAY
    )
    process = start(tmp, config, ("--no-restart",))
    yield process
    stop(process)


@pytest.fixture(scope="module")
def base_url(mesh: MeshProcess) -> str:
    return f"http://127.0.0.1:{mesh.config['gateway']['http_port']}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    tmp = tmp_path_factory.mktemp("chromium")
    with headless_chromium(tmp / "profile", tmp / "chromedriver.log") as driver:
        yield driver


def wait_until(driver: webdriver.Chrome, script: str, timeout: float, what: str) -> object:
    """Polls a JavaScript expression until it is truthy; on time-out, fails with the page's
    state and error texts."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
            lambda d: d.execute_script(f"return {script}")
        )
    except TimeoutException:
        seen = driver.execute_script(
            "const t = (id) => (document.getElementById(id) || {}).textContent;"
            "return {state: t('job-state'), progress: t('progress-text'),"
            " job_error: t('job-error'), form_error: t('form-error')}"
        )
        raise AssertionError(f"{what}: not within {timeout} s; the page shows {seen}") from None


def open_page(driver: webdriver.Chrome, base_url: str, model: str = MODEL) -> None:
    """The page with the model picked; the key is entered once per browser session."""
    driver.get(f"{base_url}/")
    if not driver.find_element(By.ID, "api-key").get_attribute("value"):
        wait_until(
            driver,
            "document.getElementById('key-status').textContent.includes('needs an API key')",
            30,
            "the page asking for a key",
        )
        driver.find_element(By.ID, "api-key").send_keys(KEY)
        driver.find_element(By.CSS_SELECTOR, "#key-form button[type=submit]").click()
    wait_until(
        driver, f"document.querySelector('#model option[value=\"{model}\"]')", 30, "models listed"
    )
    Select(driver.find_element(By.ID, "model")).select_by_value(model)


def fill(driver: webdriver.Chrome, **values: str) -> None:
    for name, value in values.items():
        field = driver.find_element(By.ID, f"f-{name}")
        field.clear()
        field.send_keys(value)


def shown_job(driver: webdriver.Chrome, base_url: str) -> dict:
    """The job the page shows, as the HTTP API answers it."""
    job_id = driver.find_element(By.ID, "job-id").text
    answer = httpx.get(f"{base_url}/v1/jobs/{job_id}", headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_job_shows_previews_then_its_image(browser: webdriver.Chrome, base_url: str) -> None:
    open_page(browser, base_url)
    assert browser.find_element(By.ID, "f-preview_every_steps").get_attribute("value") == "1"
    fill(browser, prompt="a red fox", steps="12", width="512", height="512", seed="7")
    browser.find_element(By.ID, "submit").click()

    wait_until(
        browser,
        "(document.getElementById('result-element') || {}).naturalWidth > 0",
        JOB_TIMEOUT_S,
        "the final image rendered",
    )
    previews = int(browser.find_element(By.ID, "preview-figure").get_attribute("data-count") or 0)
    assert previews >= 1, "no latent preview reached the page"
    assert browser.execute_script("return document.getElementById('preview').naturalWidth") > 0
    assert browser.find_element(By.ID, "job-state").text == "SUCCEEDED"
    assert browser.execute_script("return document.getElementById('progress').value") == 12
    download = browser.find_element(By.ID, "download")
    assert download.get_attribute("download").endswith(".png")
    assert (download.get_attribute("href") or "").startswith("blob:")
    job = shown_job(browser, base_url)
    assert job["state"] == "SUCCEEDED" and job["seed"] == "7"
    listed = browser.find_element(By.CSS_SELECTOR, f"#jobs [data-job-id='{job['job_id']}']")
    assert listed.find_element(By.XPATH, "following-sibling::span").text == "SUCCEEDED"


def test_a_long_job_is_cancelled_from_the_page(browser: webdriver.Chrome, base_url: str) -> None:
    open_page(browser, base_url)
    fill(browser, prompt="a slow fox", steps="50", width="512", height="512")
    browser.find_element(By.ID, "submit").click()
    # Two progress events give the page a rate, and so an ETA.
    wait_until(
        browser,
        "/^Step \\d+ of 50 · about \\d+ s left$/.test("
        "document.getElementById('progress-text').textContent)",
        120,
        "progress with an ETA",
    )

    browser.find_element(By.ID, "cancel").click()
    wait_until(
        browser,
        "document.getElementById('job-state').textContent === 'CANCELLED'",
        CANCEL_TIMEOUT_S,
        "the job cancelled",
    )
    assert browser.find_element(By.ID, "job-error").text == "Cancelled."
    assert browser.execute_script("return document.getElementById('progress').value") < 50
    # No time left is counted down for a job that stopped.
    progress = browser.find_element(By.ID, "progress-text").text
    assert progress.startswith("Stopped at step ") and "left" not in progress, progress
    assert not browser.find_element(By.ID, "cancel").is_enabled()
    assert shown_job(browser, base_url)["state"] == "CANCELLED"


def refused_on_the_page(browser: webdriver.Chrome, base_url: str, **fields: str) -> str:
    """The form's error for `fields`, which must point at steps and make no job."""
    open_page(browser, base_url)
    jobs_before = len(browser.find_elements(By.CSS_SELECTOR, "#jobs li"))
    fill(browser, **fields)
    browser.find_element(By.ID, "submit").click()
    wait_until(
        browser, "!document.getElementById('form-error').hidden", ERROR_TIMEOUT_S, "the error"
    )
    error = browser.find_element(By.ID, "form-error")
    assert error.get_attribute("role") == "alert"
    assert browser.find_element(By.ID, "f-steps").get_attribute("aria-invalid") == "true"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs li")) == jobs_before
    return error.text


def test_a_bad_input_shows_its_error(browser: webdriver.Chrome, base_url: str) -> None:
    text = refused_on_the_page(browser, base_url, prompt="a red fox", steps="500")
    assert text.startswith("INVALID_ARGUMENT: steps"), text


def test_a_number_the_box_cannot_read_is_named_not_dropped(
    browser: webdriver.Chrome, base_url: str
) -> None:
    # "1e" reads as an empty value: dropped, the model's default steps would have run.
    text = refused_on_the_page(browser, base_url, prompt="a red fox", steps="1e")
    assert text == "INVALID_ARGUMENT: steps: not a number; type one", text


def test_an_uploaded_image_is_transformed(
    browser: webdriver.Chrome, base_url: str, tmp_path: Path
) -> None:
    picture = tmp_path / "input.png"
    Image.new("RGB", (64, 64), (200, 40, 40)).save(picture)
    open_page(browser, base_url, IMAGE_MODEL)
    upload = browser.find_element(By.ID, "f-image")
    assert upload.get_attribute("type") == "file"
    assert upload.get_attribute("accept") == "image/*"
    upload.send_keys(str(picture))
    assert browser.execute_script("return document.getElementById('f-image').files[0].name") == (
        "input.png"
    )
    fill(browser, prompt="a red square, painted", steps="4", seed="11")
    browser.find_element(By.ID, "submit").click()

    wait_until(
        browser,
        "(document.getElementById('result-element') || {}).naturalWidth > 0",
        JOB_TIMEOUT_S,
        "the transformed image rendered",
    )
    assert browser.find_element(By.ID, "job-state").text == "SUCCEEDED"
    assert browser.find_element(By.ID, "form-error").get_attribute("hidden") is not None
    job = shown_job(browser, base_url)
    assert job["state"] == "SUCCEEDED" and job["model"] == IMAGE_MODEL, job


def test_a_video_result_plays_and_downloads(
    browser: webdriver.Chrome, base_url: str, tmp_path: Path
) -> None:
    open_page(browser, base_url, VIDEO_MODEL)
    assert browser.find_elements(By.ID, "f-num_frames"), "no frames field for a video model"
    fill(browser, prompt="a fox running", steps="2", num_frames="5", seed="3")
    browser.find_element(By.ID, "submit").click()

    wait_until(
        browser,
        "document.getElementById('job-state').textContent === 'SUCCEEDED'"
        " && document.querySelector('#result-media video')",
        JOB_TIMEOUT_S,
        "the video result shown",
    )
    wait_until(
        browser,
        "(v => v.readyState >= 1 && v.videoWidth > 0)(document.getElementById('result-element'))",
        MEDIA_TIMEOUT_S,
        "the video's metadata loaded",
    )
    video = browser.find_element(By.ID, "result-element")
    assert video.tag_name == "video"
    assert browser.execute_script("return document.getElementById('result-element').controls")
    job = shown_job(browser, base_url)
    assert job["state"] == "SUCCEEDED" and job["model"] == VIDEO_MODEL, job
    download = browser.find_element(By.ID, "download")
    source = video.get_attribute("src") or ""
    assert source.startswith("blob:")
    assert download.get_attribute("href") == source
    # The name the gateway gives the result (Content-Disposition), not one of the page's.
    assert download.get_attribute("download") == f"{job['job_id']}.mp4"
    assert not download.get_attribute("target")  # its own bytes: saved in place
    # Clicking the link saves the result's bytes, as the API serves them, under that name.
    saved = tmp_path / "downloads"
    saved.mkdir()
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(saved)}
    )
    download.click()
    target = saved / f"{job['job_id']}.mp4"
    deadline = time.monotonic() + MEDIA_TIMEOUT_S
    while not (target.is_file() and not list(saved.glob("*.crdownload"))):
        assert time.monotonic() < deadline, f"no download within {MEDIA_TIMEOUT_S} s"
        time.sleep(0.1)
    served = httpx.get(httpx.URL(base_url).join(job["result"]["url"]), headers=AUTH, timeout=30)
    assert served.status_code == 200, served.text
    assert target.read_bytes() == served.content
    assert served.content[4:8] == b"ftyp"  # an mp4 container


def test_the_list_shows_jobs_other_clients_made_under_the_key(
    browser: webdriver.Chrome, base_url: str
) -> None:
    made = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model": MODEL, "prompt": "made by another client", "steps": 1},
        headers=AUTH,
        timeout=30,
    )
    assert made.status_code == 202, made.text
    job_id = made.json()["job_id"]
    open_page(browser, base_url)  # a reload: the list comes from GET /v1/jobs, not the tab
    wait_until(
        browser,
        f"document.querySelector(\"#jobs [data-job-id='{job_id}']\")",
        30,
        "the other client's job listed",
    )
    listed = browser.find_element(By.CSS_SELECTOR, f"#jobs [data-job-id='{job_id}']")
    assert listed.text == f"{MODEL}: made by another client"
    listed.click()
    wait_until(browser, "!document.getElementById('job').hidden", 30, "the listed job shown")
    browser.find_element(By.ID, "forget-key").click()
    assert browser.find_elements(By.CSS_SELECTOR, "#jobs li") == []
    # Nothing of the forgotten key's tenant stays: its models, its job on screen.
    assert browser.find_elements(By.CSS_SELECTOR, "#model option") == []
    assert not browser.find_element(By.ID, "job").is_displayed()


def test_a_narrow_screen_never_scrolls_sideways(browser: webdriver.Chrome, base_url: str) -> None:
    long_prompt = "fox" * 100  # one word (no hyphen or space to break at), wider than the screen
    made = httpx.post(
        f"{base_url}/v1/jobs",
        json={"model": MODEL, "prompt": long_prompt, "steps": 1},
        headers=AUTH,
        timeout=30,
    )
    assert made.status_code == 202, made.text
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 360, "height": 780, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        open_page(browser, base_url)
        job_id = made.json()["job_id"]
        wait_until(
            browser, f"document.querySelector(\"#jobs [data-job-id='{job_id}']\")", 30, "listed"
        )
        # A job id longer than any the mesh makes, as a link or a typo may name one.
        browser.execute_script(f"showJob('{job_id * 4}')")
        wait_until(browser, "!document.getElementById('job-error').hidden", 30, "the 404 shown")
        widths = browser.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert widths[0] <= widths[1], f"the page is {widths[0]} px wide on a {widths[1]} px screen"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
