"""A job's float32 fields reach the worker as their sender wrote them: rounded to the digits a
float32 keeps, never to a fixed number of decimal places, which turned a strength of 1e-7
(accepted, as above 0) into 0.0 and failed the job on its worker."""

from __future__ import annotations

import pytest

from mediamesh.common.api.worker_wire import job_params
from mediamesh.common.generated.v1 import worker_pb2


@pytest.mark.parametrize("sent", [1e-7, 2.5e-6, 0.6, 0.123456, 1.0])
def test_strength_and_adapter_scales_arrive_as_sent(sent: float) -> None:
    spec = worker_pb2.JobSpec(job_id="j", strength=sent)
    spec.adapters.add(name="style", scale=-sent)
    params = job_params(spec).generation
    assert params.strength == sent
    assert params.adapters[0].scale == -sent
