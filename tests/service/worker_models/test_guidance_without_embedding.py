"""A Flux checkpoint without a guidance embedding (`guidance_embeds: false`, FLUX.1-schnell
style) ignores guidance_scale: its worker refuses a job that asks for a guidance other
than the entry's default, naming guidance_scale, and runs the rest of that job's batch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.errors import StatusCode
from mediamesh.common.work import JobFailed, JobFinished
from mediamesh.worker.hosting import load_host


def test_a_guidance_on_a_transformer_without_embedding_is_refused(
    models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    spec = registry_spec("flux-tiny")
    copy = tmp_path / "models" / spec.name
    shutil.copytree(models_dir / spec.name, copy)
    config_path = copy / "transformer" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "guidance_embeds": False}))
    host = load_host(
        spec, models_dir=tmp_path / "models", device="cpu", checkpoint_dir=tmp_path / "ckpt"
    )
    try:
        default = job_for(spec, "default", steps=1)
        asked = job_for(spec, "asked", steps=1, guidance_scale=7.0)
        events = run(host, [default, asked])
        [failed] = of(events, "asked", JobFailed)
        assert failed.code == StatusCode.INVALID_ARGUMENT
        assert failed.message == (
            "guidance_scale: flux-tiny's transformer has no guidance embedding "
            "(guidance_embeds is false, a FLUX.1-schnell-style checkpoint), so FluxPipeline "
            "would ignore guidance_scale 7.0; leave guidance_scale unset"
        )
        assert len(of(events, "default", JobFinished)) == 1
    finally:
        host.close()


def test_the_shipped_flux_still_takes_a_guidance(host_for, registry_spec) -> None:
    spec = registry_spec("flux-tiny")
    host = host_for("flux-tiny")
    # One guidance per batch: the two run apart.
    [asked] = of(
        run(host, [job_for(spec, "asked", steps=1, guidance_scale=7.0)]), "asked", JobFinished
    )
    [default] = of(run(host, [job_for(spec, "default", steps=1)]), "default", JobFinished)
    # Its embedding takes the guidance, so the two differ.
    assert (png_pixels(asked.data) != png_pixels(default.data)).any()
