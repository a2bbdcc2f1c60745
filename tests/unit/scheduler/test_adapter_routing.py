"""LoRA adapters in the scheduler core: batches never mix adapter sets, and a batch goes to
a unit that has its adapters loaded unless that unit is loaded beyond the margin plus the
adapters' (learned) load time."""

from __future__ import annotations

from mediamesh.common.generation import AdapterScale
from mediamesh.scheduler.core.affinity import AffinityPolicy

from .fakes import FakeClock, make_core, roomy, worker
from .fakes import submit_with_adapters as submit

STYLE = (AdapterScale("style", 1.0),)


def test_two_adapter_sets_in_flight_never_share_a_batch() -> None:
    clock = FakeClock()
    core = make_core(clock)
    for name in ("w0", "w1", "w2", "w3"):
        core.register_worker(worker(name))
    sets = {
        "style@1": STYLE,
        "style@0.5": (AdapterScale("style", 0.5),),
        "both": (AdapterScale("style", 1.0), AdapterScale("style2", 0.8)),
        "none": (),
    }
    submitted = {
        label: [submit(core, adapters) for _ in range(2)] for label, adapters in sets.items()
    }
    clock.advance(1)
    dispatches = core.schedule()
    assert len(dispatches) == 4
    batches = sorted(sorted(j.job_id for j in d.jobs) for d in dispatches)
    expected = sorted(sorted(j.job_id for j in jobs) for jobs in submitted.values())
    assert batches == expected
    for dispatch in dispatches:
        assert len({j.params.adapters for j in dispatch.jobs}) == 1


def test_batch_goes_to_the_unit_with_its_adapter_loaded() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.register_worker(worker("w1"))
    core.adapters_loaded("w1", {"flux-tiny": {"style": 0.2}})
    submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    # w0 sorts first at equal load; w1 has the adapter.
    assert dispatch.worker_id == "w1"
    assert core.affinity.warm_choices == 1


def test_without_adapters_the_least_loaded_unit_is_taken() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.register_worker(worker("w1"))
    core.adapters_loaded("w1", {"flux-tiny": {"style": 0.2}})
    submit(core)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"


def _busy_warm_unit_and_cold_unit(margin_s: float, style_load_s: float = 0.2):
    """w1 has `style` loaded and about 3.3 device-seconds of work; w0 is idle and cold."""
    clock = FakeClock()
    core = make_core(clock, adapter_affinity=AffinityPolicy(margin_s, load_prior_s=0.5))
    core.register_worker(roomy("w1"))
    heavy = submit(core, steps=50, width=512)
    clock.advance(1)
    [first] = core.schedule()
    assert first.worker_id == "w1" and core.units["w1"].load_s > 3
    core.register_worker(worker("w0"))
    core.adapters_loaded("w1", {"flux-tiny": {"style": style_load_s}})
    return clock, core, heavy


def test_a_warm_unit_loaded_beyond_the_margin_loses_to_a_cold_one() -> None:
    clock, core, _ = _busy_warm_unit_and_cold_unit(margin_s=1.0)
    submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w0"
    # The cold unit counts as holding the adapter from now on.
    assert core.units["w0"].adapters["flux-tiny"] == frozenset({"style"})


def test_a_wide_margin_keeps_the_batch_on_the_warm_unit() -> None:
    clock, core, _ = _busy_warm_unit_and_cold_unit(margin_s=10.0)
    submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w1"


def test_a_slow_measured_load_makes_the_cold_unit_pay_for_it() -> None:
    # With a quick load (above) the idle cold unit wins, but here the worker measured this
    # adapter taking 30 s to load: waiting behind ~3.3 s of work is cheaper.
    clock, core, _ = _busy_warm_unit_and_cold_unit(margin_s=1.0, style_load_s=30.0)
    assert core.affinity.load_s("flux-tiny", ["style"]) == 30.0
    # A heartbeat repeating the same measurement is not a new load.
    core.adapters_loaded("w1", {"flux-tiny": {"style": 30.0}})
    assert core.affinity.load_s("flux-tiny", ["style"]) == 30.0
    submit(core, STYLE)
    clock.advance(1)
    [dispatch] = core.schedule()
    assert dispatch.worker_id == "w1"


def test_reports_replace_the_loaded_set() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.adapters_loaded("w0", {"flux-tiny": {"style": 0.1, "style2": 0.1}})
    core.adapters_loaded("w0", {"flux-tiny": {"style2": 0.1}})
    assert core.units["w0"].adapters == {"flux-tiny": frozenset({"style2"})}
    core.adapters_loaded("w0", {})
    assert core.units["w0"].adapters == {}


def test_reports_keep_only_offered_adapters_of_hosted_models() -> None:
    clock = FakeClock()
    core = make_core(clock)
    core.register_worker(worker("w0"))
    core.adapters_loaded(
        "w0",
        {"flux-tiny": {"style": 0.1, "made-up": 0.1}, "wan-tiny": {"style": 0.1}},
    )
    assert core.units["w0"].adapters == {"flux-tiny": frozenset({"style"})}
    core.adapters_loaded("w0", {"flux-tiny": {"style": float("nan")}})
    assert core.affinity.load_s("flux-tiny", ["style"]) == 0.1
