"""A sticky accelerator error under a batch (flux-tiny on the CPU; a call hook raises what
CUDA raises): the worker faults and hands the jobs back, rather than fail them INTERNAL and
keep drawing work it can only fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from wm_helpers import job_for, of, run

from mediamesh.common.work import JobFailed, JobParams
from mediamesh.worker.core import call_hooks
from mediamesh.worker.core.batch import DeviceGroupLost
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models import device_loss
from mediamesh.worker.models.host import ModelHost
from mediamesh.worker.runtime import WorkerRuntime

MODEL = "flux-tiny"
ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"


def raise_accelerator_error(jobs: list[JobParams]) -> None:
    raise torch.AcceleratorError(ILLEGAL_ACCESS)


@pytest.fixture
def own_flux(models_dir: Path, registry_spec, tmp_path: Path) -> Iterator[ModelHost]:
    """A host of its own: the runtime closes the hosts it was given."""
    host = load_host(
        registry_spec(MODEL), models_dir=models_dir, device="cpu", checkpoint_dir=tmp_path
    )
    call_hooks.install(MODEL, raise_accelerator_error)
    yield host
    call_hooks.remove(MODEL)
    host.close()


async def test_a_sticky_accelerator_error_faults_the_worker_and_fails_no_job(own_flux) -> None:
    runtime = WorkerRuntime("w", "on-demand", {MODEL: own_flux})
    events: list = []
    jobs = [job_for(own_flux.spec, "a", steps=2), job_for(own_flux.spec, "b", steps=2)]
    try:
        with pytest.raises(DeviceGroupLost):
            async for event in runtime.run_batch("b1", MODEL, jobs):
                events.append(event)
        assert runtime.fault is not None and "illegal memory access" in runtime.fault
        assert runtime.faulted.is_set() and runtime.draining
        # Unreported, the jobs go back in line at the scheduler (UNAVAILABLE).
        assert not [e for e in events if isinstance(e, JobFailed)]
    finally:
        runtime.close()


def test_an_accelerator_error_on_a_device_that_still_answers_fails_only_the_jobs(
    own_flux, monkeypatch
) -> None:
    # An invalid launch configuration at one shape: the context still runs kernels.
    monkeypatch.setattr(own_flux, "device_ids", ["cuda:0"])
    monkeypatch.setattr(device_loss, "_answers", lambda device: True)
    events = run(own_flux, [job_for(own_flux.spec, "a", steps=2)])
    (failed,) = of(events, "a", JobFailed)
    assert failed.code == "INTERNAL" and "illegal memory access" in failed.message

    monkeypatch.setattr(device_loss, "_answers", lambda device: False)
    with pytest.raises(DeviceGroupLost, match=r"device cuda:0 of model 'flux-tiny'"):
        run(own_flux, [job_for(own_flux.spec, "b", steps=2)])
