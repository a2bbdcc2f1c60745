"""Residency past its limits: the batch that kept a model loaded past them brings the worker
back within them when it ends, and a cold load that cannot work is refused before it
evicts anything, as FAILED_PRECONDITION (no retry changes a config)."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.common.work import JobFailed, JobParams, WorkerEvent
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.residency import LoadRefused, Residency, ResidencyLimits, ResidentHost

SIZES = {"flux-tiny": 40, "sdxl-tiny": 30, "sd3-tiny": 20}
UNLOADABLE = "model 'sd3-tiny' field dtype: float16 lacks CPU kernels"


class FakeHost:
    """Stands in for a loaded pipeline: records whether it was closed."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.device_ids = ["cpu"]
        self.closed = False

    def run_batch(self, jobs: object, control: object, emit: object) -> None:
        raise AssertionError("not run here")

    def close(self) -> None:
        self.closed = True


def refuse_sd3(spec: ModelSpec) -> None:
    if spec.name == "sd3-tiny":
        raise ModelLoadError(UNLOADABLE)


def residency(limits: ResidencyLimits) -> tuple[Residency, dict[str, list[FakeHost]]]:
    built: dict[str, list[FakeHost]] = {}

    def load(spec: ModelSpec) -> FakeHost:
        host = FakeHost(spec)
        built.setdefault(spec.name, []).append(host)
        return host

    r = Residency(limits, load, lambda s: SIZES[s.name], lambda m, s: None, check=refuse_sd3)
    for name in SIZES:
        r.manage(name)
    return r, built


def spec(name: str) -> ModelSpec:
    found = load_registry().get(name)
    assert found is not None
    return found


def resident(r: Residency) -> set[str]:
    return {name for name, (loaded, _) in r.snapshot().items() if loaded}


def test_the_paused_batchs_end_evicts_down_to_the_count_limit() -> None:
    r, built = residency(ResidencyLimits(max_models=1))
    r.acquire(spec("flux-tiny"))  # a batch of it is paused at a step boundary
    r.acquire(spec("sdxl-tiny"))
    r.release("sdxl-tiny")
    # flux-tiny's batch still holds it, so sdxl-tiny's end brings the worker back to one.
    assert resident(r) == {"flux-tiny"} and built["sdxl-tiny"][0].closed
    r.acquire(spec("sdxl-tiny"))  # loads again past the limit beside the paused batch
    r.release("flux-tiny")
    assert len(resident(r)) == 1 and built["flux-tiny"][0].closed


def test_the_paused_batchs_end_evicts_down_to_the_byte_limit() -> None:
    r, _ = residency(ResidencyLimits(max_bytes=60))
    r.acquire(spec("flux-tiny"))  # 40, paused
    r.acquire(spec("sdxl-tiny"))  # 70 with it: over the cap while both are in use
    assert resident(r) == {"flux-tiny", "sdxl-tiny"}
    r.release("flux-tiny")
    assert resident(r) == {"sdxl-tiny"}
    r.release("sdxl-tiny")
    assert resident(r) == {"sdxl-tiny"}


def test_a_load_the_check_refuses_evicts_nothing() -> None:
    r, built = residency(ResidencyLimits(max_models=1))
    r.acquire(spec("flux-tiny"))
    r.release("flux-tiny")
    with pytest.raises(LoadRefused) as refused:
        r.acquire(spec("sd3-tiny"))
    assert str(refused.value) == UNLOADABLE
    assert resident(r) == {"flux-tiny"} and not built["flux-tiny"][0].closed
    assert "sd3-tiny" not in built


def test_a_model_past_the_byte_limit_alone_is_refused_before_evicting() -> None:
    r, built = residency(ResidencyLimits(max_bytes=35))
    r.acquire(spec("sdxl-tiny"))
    r.release("sdxl-tiny")
    with pytest.raises(LoadRefused) as refused:
        r.acquire(spec("flux-tiny"))
    assert "max_resident_bytes (35)" in str(refused.value) and "'flux-tiny'" in str(refused.value)
    assert resident(r) == {"sdxl-tiny"} and "flux-tiny" not in built


def test_a_refused_load_fails_its_jobs_as_a_failed_precondition() -> None:
    r, _ = residency(ResidencyLimits(max_models=1))
    host = ResidentHost(spec("sd3-tiny"), "cpu", r)
    jobs = [JobParams("j1", GenerationParams("x", steps=1, seed=1, width=16, height=16))]
    events: list[WorkerEvent] = []
    host.run_batch(jobs, BatchControl(["j1"]), events.append)
    assert events == [JobFailed("j1", StatusCode.FAILED_PRECONDITION, UNLOADABLE)]
