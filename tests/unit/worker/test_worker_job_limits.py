"""A worker checks each job it is sent against its model's limits before running it: a job
past them fails with INVALID_ARGUMENT naming the field, and the rest of the batch runs.

Found by the fuzz tier (tests/fuzz): a RunBatch with 2**32 - 1 steps held the worker's one
device thread for good, and a seed past int64, a 2**32 - 1 pixel wide image or an output
format of no modality failed the job with INTERNAL.
"""

from __future__ import annotations

import dataclasses

import pytest

from mediamesh.common.errors import InvalidArgument, StatusCode
from mediamesh.common.generation import GenerationParams
from mediamesh.common.params import RequestFields, check_generation, check_output, resolve
from mediamesh.common.registry import load_registry
from mediamesh.common.work import JobFailed, JobFinished, JobParams
from mediamesh.worker.hosting import load_host
from mediamesh.worker.runtime import WorkerRuntime

ECHO = load_registry().get("echo")
VALID = GenerationParams("a fox", steps=2, seed=5, width=16, height=16)

PAST_LIMITS = [
    ("steps", {"steps": 2**32 - 1}),
    ("steps", {"steps": 0}),
    ("seed", {"seed": 2**64 - 1}),
    ("width", {"width": 2**32 - 1}),
    ("height", {"height": 12}),
    ("guidance_scale", {"guidance_scale": float("nan")}),
    ("prompt", {"prompt": " "}),
    ("output_format", {"output_format": "0"}),
    ("output_format", {"output_format": "mp4"}),
    ("output_quality", {"output_quality": 101}),
]


@pytest.mark.parametrize(("field", "change"), PAST_LIMITS, ids=[f for f, _ in PAST_LIMITS])
def test_params_past_a_limit_are_refused_naming_the_field(field, change) -> None:
    params = dataclasses.replace(VALID, **change)
    with pytest.raises(InvalidArgument, match=f"^{field}: "):
        check_generation(ECHO, params)
        check_output(ECHO, params)


def test_what_resolve_makes_passes_both_checks() -> None:
    params = resolve(ECHO, RequestFields(model="echo", prompt="a fox"))
    check_generation(ECHO, params)
    check_output(ECHO, params)
    # 0 quality and fps mean "the model's own", as the encoder reads them.
    check_output(ECHO, dataclasses.replace(params, output_quality=0, fps=0))


async def test_a_job_past_the_limits_fails_and_the_rest_of_its_batch_runs(tmp_path) -> None:
    host = load_host(ECHO, models_dir=tmp_path, device="cpu", checkpoint_dir=tmp_path)
    runtime = WorkerRuntime("w", "on-demand", {"echo": host})
    jobs = [
        JobParams("endless", dataclasses.replace(VALID, steps=2**32 - 1)),
        JobParams("fine", VALID),
    ]
    try:
        events = [e async for e in runtime.run_batch("b1", "echo", jobs)]
    finally:
        runtime.close()
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert [(e.job_id, e.code) for e in failed] == [("endless", StatusCode.INVALID_ARGUMENT)]
    assert failed[0].message.startswith("steps: 4294967295 is out of range")
    assert [e.job_id for e in events if isinstance(e, JobFinished)] == ["fine"]
