"""Flux true CFG through the generic host: an entry with `true_cfg_scale` > 1 in its
`call_kwargs` passes a request's negative prompt, and the transformer then runs twice a
step (conditional and negative) for those jobs only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.registry import ModelSpec, parse_registry
from mediamesh.common.work import JobFinished, StepDone
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.host import ModelHost


@pytest.fixture(scope="module")
def true_cfg_flux(registry_spec, models_dir: Path, tmp_path_factory):
    entry = registry_spec("flux-tiny").model_dump(mode="json", exclude={"accepted_fields"})
    entry["call_kwargs"] = {"true_cfg_scale": 4.0}
    spec: ModelSpec = parse_registry({"models": [entry]}).models[0]
    host = load_host(
        spec,
        models_dir=models_dir,
        device="cpu",
        checkpoint_dir=tmp_path_factory.mktemp("checkpoints"),
    )
    yield host
    host.close()


def _transformer_calls(host: ModelHost, jobs) -> tuple[list, int]:
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    hook = host.pipeline.transformer.register_forward_pre_hook(count)
    try:
        events = run(host, jobs)
    finally:
        hook.remove()
    return events, calls[0]


def test_negative_prompt_runs_true_cfg(true_cfg_flux) -> None:
    host = true_cfg_flux
    plain = job_for(host.spec, "plain", seed=4)
    negative = job_for(host.spec, "negative", seed=4, negative_prompt="blurry, low quality")
    arguments = host.call_arguments([negative], [])
    assert arguments["true_cfg_scale"] == 4.0
    assert arguments["negative_prompt"] == ["blurry, low quality"]

    plain_events, plain_calls = _transformer_calls(host, [plain])
    negative_events, negative_calls = _transformer_calls(host, [negative])
    # Four steps: one pass each without a negative prompt, two with one.
    assert (plain_calls, negative_calls) == (4, 8)
    for events, job_id in ((plain_events, "plain"), (negative_events, "negative")):
        assert [e.step for e in of(events, job_id, StepDone)] == [1, 2, 3, 4]
    (without,) = of(plain_events, "plain", JobFinished)
    (with_negative,) = of(negative_events, "negative", JobFinished)
    difference = np.abs(png_pixels(without.data) - png_pixels(with_negative.data))
    assert difference.max() > 2, "the negative prompt changed nothing"
