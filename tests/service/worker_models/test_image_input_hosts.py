"""The generic host with input images: batching, stored inputs read and checked by SHA-256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.generation import InputImage
from mediamesh.common.input_refs import inline_ref
from mediamesh.common.work import JobFailed, JobFinished, StepDone
from tests.input_media import image_bytes

MODEL = "flux-img2img-tiny"


def input_image(data: bytes, ref: str | None = None, sha256: str | None = None) -> InputImage:
    digest = sha256 or hashlib.sha256(data).hexdigest()
    return InputImage(digest, 64, 64, "image/png", ref or inline_ref(data))


def test_img2img_alone_equals_batched_and_counts_its_steps(host_for) -> None:
    host = host_for(MODEL)
    red, blue = image_bytes(color=(220, 10, 10)), image_bytes(color=(10, 10, 220))
    alone = run(host, [job_for(host.spec, "a", 1, image=input_image(red), strength=0.6)])
    batch = run(
        host,
        [
            job_for(host.spec, "b", 1, image=input_image(red), strength=0.6),
            job_for(host.spec, "c", 2, image=input_image(blue), strength=0.6),
        ],
    )
    # Flux runs the last int-rounded 3 of 4 steps at strength 0.6.
    assert [(e.step, e.total_steps) for e in of(alone, "a", StepDone)] == [(1, 3), (2, 3), (3, 3)]
    (first,) = of(alone, "a", JobFinished)
    (second,) = of(batch, "b", JobFinished)
    (third,) = of(batch, "c", JobFinished)
    difference = np.abs(png_pixels(first.data) - png_pixels(second.data))
    assert difference.max() <= 2
    assert np.abs(png_pixels(second.data) - png_pixels(third.data)).mean() > 5


def test_stored_inputs_are_read_from_the_artifact_store_and_checked(
    host_for, tmp_path: Path
) -> None:
    host = host_for(MODEL)
    data = image_bytes(color=(30, 160, 30))
    path = tmp_path / "job.image.png"
    path.write_bytes(data)
    stored = run(
        host, [job_for(host.spec, "s", 3, image=input_image(data, str(path)), strength=0.6)]
    )
    inline = run(host, [job_for(host.spec, "i", 3, image=input_image(data), strength=0.6)])
    assert of(stored, "s", JobFinished)[0].data == of(inline, "i", JobFinished)[0].data

    changed = input_image(data, str(path), sha256="0" * 64)
    (failed,) = of(
        run(host, [job_for(host.spec, "x", 3, image=changed, strength=0.6)]), "x", JobFailed
    )
    assert "hashes to" in failed.message and "it changed" in failed.message
    missing = input_image(data, str(tmp_path / "gone.png"))
    (gone,) = of(
        run(host, [job_for(host.spec, "y", 3, image=missing, strength=0.6)]), "y", JobFailed
    )
    assert "cannot read the job's input" in gone.message
