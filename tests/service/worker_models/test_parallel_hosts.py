"""Pipeline (accelerate offload) and tensor (2 gloo ranks) modes against data mode."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from wm_helpers import job_for, of, png_pixels, run, run_grouped

from mediamesh.common.work import JobFinished, JobNotice, JobPreempted, StepDone
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.memory import ModelLoadError

# Two ranks sum partial products in another order than one device: measured max abs
# difference of the 8-bit images is 1 level on CPU float32 (flux-tiny, 64x64, 4 steps).
TENSOR_TOLERANCE = 1


def _with_parallelism(spec, **changes):
    # Adapters need the data mode: parallel copies leave the entry's out.
    parallelism = spec.parallelism.model_copy(update=changes)
    return spec.model_copy(update={"parallelism": parallelism, "adapters": ()})


@pytest.fixture(scope="module")
def data_results(host_for):
    host = host_for("flux-tiny")
    jobs = [job_for(host.spec, "t", seed=3), job_for(host.spec, "u", seed=4, prompt="a dog")]
    sink = run_grouped(host, jobs)
    # Each step of the batch is emitted together, so the worker sends it as one message.
    assert sink.steps_in_one_group_each(["t", "u"]), sink.groups
    return jobs, {e.job_id: e.data for e in sink.events() if isinstance(e, JobFinished)}


@pytest.mark.parametrize(
    ("device_map", "max_memory"),
    [("auto", {"cpu": "600KB"}), ("sequential", {"cpu": "100KB"}), ("balanced", {})],
)
def test_pipeline_mode_matches_data_mode(
    models_dir, registry_spec, tmp_path, data_results, device_map, max_memory
) -> None:
    jobs, expected = data_results
    spec = _with_parallelism(
        registry_spec("flux-tiny"),
        mode="pipeline",
        device_map=device_map,
        max_memory=max_memory,
        offload_folder=str(tmp_path / "offload"),
    )
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    placement = set(getattr(host.pipeline.transformer, "hf_device_map", {}).values())
    if max_memory:
        assert "disk" in placement  # the small cap really forced layers out to disk
    events = run(host, jobs)
    assert {e.job_id: e.data for e in events if isinstance(e, JobFinished)} == expected
    host.close()


def test_tensor_mode_two_ranks_matches_data_mode(
    models_dir, registry_spec, tmp_path, data_results
) -> None:
    jobs, expected = data_results
    spec = _with_parallelism(registry_spec("flux-tiny"), mode="tensor", size=2)
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    helpers = list(host._helpers)
    try:
        assert len(helpers) == 1 and helpers[0].is_alive()
        sink = run_grouped(host, jobs)
        # Holding back failures keeps the steps together, as in data mode.
        assert sink.steps_in_one_group_each(["t", "u"]), sink.groups
        events = sink.events()
        for job in jobs:
            (finished,) = of(events, job.job_id, JobFinished)
            difference = np.abs(png_pixels(finished.data) - png_pixels(expected[job.job_id]))
            assert difference.max() <= TENSOR_TOLERANCE

        # Flags are agreed at the start of the next boundary, so a preempt asked for
        # while step 1 is reported lands at step 2 on every rank.
        def preempt(event, control) -> None:
            if isinstance(event, StepDone) and event.step == 1:
                control.preempt()

        (preempted,) = of(run(host, jobs[:1], preempt), "t", JobPreempted)
        assert preempted.step == 2
        resumed = job_for(spec, "t", seed=3, resume_checkpoint=preempted.checkpoint)
        events = run(host, [resumed])
        assert isinstance(events[0], JobNotice)
        assert [e.step for e in of(events, "t", StepDone)] == [3, 4]
        (finished,) = of(events, "t", JobFinished)
        assert np.abs(png_pixels(finished.data) - png_pixels(expected["t"])).max() <= 1
    finally:
        host.close()
    assert not any(process.is_alive() for process in helpers)


def test_tensor_mode_refuses_families_without_a_plan(models_dir, registry_spec, tmp_path) -> None:
    spec = _with_parallelism(registry_spec("wan-tiny"), mode="tensor", size=2)
    with pytest.raises(ModelLoadError, match="FluxPipeline only"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)


def test_deepspeed_backend_reports_the_missing_extra(
    models_dir, registry_spec, tmp_path, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as if the extra were not installed
    spec = _with_parallelism(registry_spec("flux-tiny"), mode="tensor", size=2, backend="deepspeed")
    with pytest.raises(ModelLoadError, match="optional 'deepspeed' package"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)


def test_pipeline_mode_splits_a_unet_denoiser(host_for, models_dir, registry_spec, tmp_path):
    # SDXL's denoiser is its `unet` component, not a `transformer`.
    data_host = host_for("sdxl-tiny")
    job = job_for(data_host.spec, "s", seed=5)
    (expected,) = [e.data for e in run(data_host, [job]) if isinstance(e, JobFinished)]
    spec = _with_parallelism(
        registry_spec("sdxl-tiny"),
        mode="pipeline",
        device_map="sequential",
        max_memory={"cpu": 200_000},
        offload_folder=str(tmp_path / "offload"),
    )
    host = load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
    try:
        assert "disk" in set(host.pipeline.unet.hf_device_map.values())
        events = run(host, [job_for(spec, "s", seed=5)])
        assert [e.data for e in events if isinstance(e, JobFinished)] == [expected]
    finally:
        host.close()


def test_pipeline_mode_on_a_folder_without_a_model_index_is_one_line(
    models_dir, registry_spec, tmp_path
):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    spec = _with_parallelism(registry_spec("flux-tiny"), mode="pipeline", device_map="auto")
    spec = spec.model_copy(update={"source": str(empty)})
    with pytest.raises(ModelLoadError, match=r"model 'flux-tiny' .*cannot read model_index\.json"):
        load_host(spec, models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path)
