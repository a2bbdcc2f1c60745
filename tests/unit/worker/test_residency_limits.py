"""The worker's residency bookkeeping with hand-written hosts: LRU eviction by count and by
bytes, and a model a batch is using is never evicted under it."""

from __future__ import annotations

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.residency import Residency, ResidencyLimits


class FakeHost:
    """Stands in for a loaded pipeline: records whether it was closed."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.device_ids = ["cpu"]
        self.closed = False

    def run_batch(self, jobs, control, emit) -> None:
        raise AssertionError("not run here")

    def close(self) -> None:
        self.closed = True


SIZES = {"flux-tiny": 40, "sdxl-tiny": 30, "sd3-tiny": 20}


def residency(limits: ResidencyLimits) -> tuple[Residency, dict[str, list[FakeHost]]]:
    built: dict[str, list[FakeHost]] = {}

    def load(spec: ModelSpec) -> FakeHost:
        host = FakeHost(spec)
        built.setdefault(spec.name, []).append(host)
        return host

    observed: list[str] = []
    return Residency(limits, load, lambda s: SIZES[s.name], lambda m, _: observed.append(m)), built


def spec(name: str) -> ModelSpec:
    found = load_registry().get(name)
    assert found is not None
    return found


def use(r: Residency, name: str) -> None:
    r.acquire(spec(name))
    r.release(name)


def resident(r: Residency) -> set[str]:
    return {name for name, (loaded, _) in r.snapshot().items() if loaded}


def test_count_limit_evicts_the_least_recently_used() -> None:
    r, built = residency(ResidencyLimits(max_models=2))
    for name in SIZES:
        r.manage(name)
    use(r, "flux-tiny")
    use(r, "sdxl-tiny")
    use(r, "flux-tiny")  # now sdxl-tiny is the least recently used
    use(r, "sd3-tiny")
    assert resident(r) == {"flux-tiny", "sd3-tiny"}
    assert built["sdxl-tiny"][0].closed and not built["flux-tiny"][0].closed
    assert dict(r.loads) == {"flux-tiny": 1, "sdxl-tiny": 1, "sd3-tiny": 1}


def test_byte_limit_evicts_until_the_incoming_model_fits() -> None:
    r, _ = residency(ResidencyLimits(max_bytes=60))
    for name in SIZES:
        r.manage(name)
    use(r, "sd3-tiny")  # 20
    use(r, "sdxl-tiny")  # 50
    use(r, "flux-tiny")  # 40 more: both others must go
    assert resident(r) == {"flux-tiny"}
    use(r, "sd3-tiny")  # 60 fits with flux-tiny
    assert resident(r) == {"flux-tiny", "sd3-tiny"}


def test_a_model_in_use_is_not_evicted() -> None:
    r, built = residency(ResidencyLimits(max_models=1))
    for name in SIZES:
        r.manage(name)
    r.acquire(spec("flux-tiny"))  # a batch of it is paused at a step boundary
    r.acquire(spec("sd3-tiny"))
    assert resident(r) == {"flux-tiny", "sd3-tiny"}
    assert not built["flux-tiny"][0].closed
    # sd3-tiny's batch ends first: the worker goes back within its limit around the paused one.
    r.release("sd3-tiny")
    assert resident(r) == {"flux-tiny"}
    r.release("flux-tiny")
    use(r, "sdxl-tiny")
    assert resident(r) == {"sdxl-tiny"}
