"""ListModels' "resume"/"restart" column, decided without torch from the model's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediamesh.common.preemption import preemption_of, preemption_table, scheduler_resumes
from mediamesh.common.registry import load_registry
from mediamesh.scheduler.api.convert import list_models
from mediamesh.sdk.api.convert import model_info as sdk_model_info


@pytest.mark.parametrize(
    ("scheduler", "resumes"),
    [
        ("FlowMatchEulerDiscreteScheduler", True),
        ("EulerDiscreteScheduler", True),
        ("EulerAncestralDiscreteScheduler", True),
        ("DPMSolverMultistepScheduler", True),
        ("UniPCMultistepScheduler", True),
        ("DDIMScheduler", True),
        ("CogVideoXDDIMScheduler", True),
        # No step counter at all.
        ("PNDMScheduler", False),
        ("CogVideoXDPMScheduler", False),
        # A step counter that counts model calls, two per step.
        ("HeunDiscreteScheduler", False),
        ("KDPM2DiscreteScheduler", False),
        ("NoSuchScheduler", False),
    ],
)
def test_scheduler_classes_match_what_the_worker_does(scheduler: str, resumes: bool) -> None:
    # The same classes resume or restart in tests/service/worker_models/test_generic_families.
    assert scheduler_resumes(scheduler) is resumes


def _model_folder(root: Path, scheduler: str) -> Path:
    (root / "scheduler").mkdir(parents=True)
    (root / "scheduler" / "scheduler_config.json").write_text(
        json.dumps({"_class_name": scheduler})
    )
    return root


def test_the_scheduler_class_comes_from_the_model_folder(tmp_path: Path) -> None:
    spec = load_registry().get("sdxl-tiny")
    assert spec is not None
    _model_folder(tmp_path / "sdxl-tiny", "EulerDiscreteScheduler")
    assert preemption_of(spec, tmp_path) == "resume"
    swapped = tmp_path / "swapped"
    _model_folder(swapped / "sdxl-tiny", "PNDMScheduler")
    assert preemption_of(spec, swapped) == "restart"
    # Not built yet, or builtin: unknown, and ListModels leaves the field empty.
    assert preemption_of(spec, tmp_path / "empty") == ""


def test_list_models_carries_the_column(tmp_path: Path) -> None:
    registry = load_registry()
    _model_folder(tmp_path / "sdxl-tiny", "PNDMScheduler")
    _model_folder(tmp_path / "flux-tiny", "FlowMatchEulerDiscreteScheduler")
    table = preemption_table(registry.models, tmp_path)
    reply = list_models(registry.models, {}, preemption=dict(table))
    by_name = {m.name: m for m in reply.models}
    assert by_name["sdxl-tiny"].preemption == "restart"
    assert by_name["flux-tiny"].preemption == "resume"
    assert by_name["echo"].preemption == ""
    assert by_name["sdxl-tiny"].pipeline == "StableDiffusionXLPipeline"
    # The SDK's ModelInfo carries it too.
    assert sdk_model_info(by_name["sdxl-tiny"]).preemption == "restart"


def test_models_list_shows_pipeline_fields_formats_and_preemption(tmp_path: Path) -> None:
    from mediamesh.cli.models_commands import model_rows

    _model_folder(tmp_path / "sdxl-tiny", "PNDMScheduler")
    rows = {row[0]: row for row in model_rows(load_registry(), tmp_path)}
    _name, pipeline, fields, _inputs, formats, preemption, _previews, _adapters = rows["sdxl-tiny"]
    assert pipeline == "StableDiffusionXLPipeline" and "negative_prompt" in fields.split(",")
    assert formats.split(",")[0] == "png" and preemption == "restart"
    assert rows["flux-tiny"][5] == "?"  # not built in tmp_path: unknown, not "none"
    assert rows["echo"][5] == "-"  # built in: nothing to preempt
