"""A model whose jobs take an input image and a strength (img2img, inpainting) runs only the
tail of its schedule, which the worker cannot resume a checkpoint into: ListModels and
`mediamesh models list` say `restart` for it whatever its scheduler, while image-to-video
(an input image, no strength) resumes like text-to-video."""

from __future__ import annotations

import json
from pathlib import Path

from mediamesh.common.preemption import preemption_of, preemption_table
from mediamesh.common.registry import load_registry
from mediamesh.scheduler.api.convert import list_models


def _with_scheduler(models_dir: Path, folder: str, scheduler: str) -> None:
    (models_dir / folder / "scheduler").mkdir(parents=True)
    (models_dir / folder / "scheduler" / "scheduler_config.json").write_text(
        json.dumps({"_class_name": scheduler})
    )


def test_img2img_and_inpainting_models_restart_even_on_a_resuming_scheduler(
    tmp_path: Path,
) -> None:
    registry = load_registry()
    # The img2img and inpainting entries load the text-to-image folders, whose schedulers
    # resume a text-to-image job.
    _with_scheduler(tmp_path, "sdxl-tiny", "EulerDiscreteScheduler")
    _with_scheduler(tmp_path, "flux-tiny", "FlowMatchEulerDiscreteScheduler")
    _with_scheduler(tmp_path, "cogvideox-i2v-tiny", "CogVideoXDDIMScheduler")
    table = preemption_table(registry.models, tmp_path)
    assert table["sdxl-tiny"] == "resume" and table["flux-tiny"] == "resume"
    for name in ("sdxl-img2img-tiny", "sdxl-inpaint-tiny", "flux-img2img-tiny"):
        assert table[name] == "restart", name
    assert table["cogvideox-i2v-tiny"] == "resume"
    reply = list_models(registry.models, {}, preemption=dict(table))
    by_name = {m.name: m.preemption for m in reply.models}
    assert by_name["flux-img2img-tiny"] == "restart"


def test_a_strength_model_restarts_even_before_its_files_are_there(tmp_path: Path) -> None:
    spec = load_registry().get("sdxl-img2img-tiny")
    assert spec is not None
    # Its scheduler is unknown, but the strength alone decides.
    assert preemption_of(spec, tmp_path / "nothing-built") == "restart"
