"""GenerationParams as the job store writes it: `to_record` is `asdict`, without the copies."""

from __future__ import annotations

import dataclasses
import json

from mediamesh.common.generation import AdapterScale, GenerationParams, InputImage


def test_to_record_is_asdict_key_for_key_and_reads_back() -> None:
    image = InputImage(sha256="ab" * 32, width=64, height=48, mime_type="image/png", ref="r1")
    params = GenerationParams(
        prompt="a fox",
        negative_prompt="blur",
        steps=7,
        seed=3,
        width=64,
        height=48,
        guidance_scale=3.5,
        preview_every_steps=2,
        image=image,
        strength=0.6,
        adapters=(AdapterScale("style", 0.8), AdapterScale("style2", 1.0)),
        use_cache=False,
    )
    for value in (params, GenerationParams(prompt="plain")):
        record = value.to_record()
        assert json.dumps(record) == json.dumps(dataclasses.asdict(value))
        assert GenerationParams.from_record(json.loads(json.dumps(record))) == value
