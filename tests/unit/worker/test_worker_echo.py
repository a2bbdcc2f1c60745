from __future__ import annotations

import io

import numpy as np
from PIL import Image

from mediamesh.common.generation import GenerationParams
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFailed, JobFinished, JobParams, StepDone
from mediamesh.worker.core.batch import BatchControl
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.echo import seed_colour


def _echo(tmp_path):
    spec = load_registry().get("echo")
    return load_host(spec, models_dir=tmp_path, device="cpu", checkpoint_dir=tmp_path)


def test_echo_steps_then_solid_png_of_the_seed(tmp_path) -> None:
    host = _echo(tmp_path)
    jobs = [
        JobParams("a", GenerationParams("x", steps=3, seed=5, width=24, height=8)),
        JobParams("b", GenerationParams("y", steps=3, seed=6, width=16, height=16)),
    ]
    events = []
    host.run_batch(jobs, BatchControl(["a", "b"]), events.append)
    assert [e.step for e in events if isinstance(e, StepDone) and e.job_id == "a"] == [1, 2, 3]
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    pixels = np.asarray(Image.open(io.BytesIO(finished["a"].data)).convert("RGB"))
    assert pixels.shape == (8, 24, 3)
    assert (pixels == np.array(seed_colour(5), dtype=np.uint8)).all()
    assert seed_colour(5) != seed_colour(6)
    assert host.device_ids == ["cpu"]


def test_echo_cancel_is_a_terminal_event(tmp_path) -> None:
    host = _echo(tmp_path)
    control = BatchControl(["a"])
    control.cancel(["a"])
    events = []
    host.run_batch(
        [JobParams("a", GenerationParams("x", steps=2, width=8, height=8))], control, events.append
    )
    assert len(events) == 1 and isinstance(events[0], JobFailed)
    assert events[0].code == "CANCELLED"
