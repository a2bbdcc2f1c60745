"""Identical frames encode to identical bytes, however the worker process got there.

x264's macroblock tree made the bundled encoder give several bitstreams for one set of
frames within one process (depending on what ran before), so this runs a mix of batches
on one host, the way a worker does, and checks each set of frames against its bytes.
"""

from __future__ import annotations

import hashlib

import numpy as np
from wm_helpers import job_for, run

from mediamesh.common.work import JobParams


def test_the_same_frames_always_give_the_same_mp4(host_for) -> None:
    host = host_for("cogvideox-tiny")
    original = host.encode
    bytes_of: dict[str, set[str]] = {}

    def recording(output: object, index: int, job: JobParams) -> tuple[bytes, str]:
        data, mime = original(output, index, job)
        frames = hashlib.sha256(np.ascontiguousarray(output[index]).tobytes()).hexdigest()  # type: ignore[index]
        bytes_of.setdefault(frames, set()).add(hashlib.sha256(data).hexdigest())
        return data, mime

    host.encode = recording  # type: ignore[method-assign]
    try:
        for seeds in ((5,), (4, 5), (5, 6)) * 3:
            run(host, [job_for(host.spec, f"j{s}", seed=s, steps=40) for s in seeds])
    finally:
        host.encode = original  # type: ignore[method-assign]
    assert len(bytes_of) >= 3
    assert all(len(encodings) == 1 for encodings in bytes_of.values()), bytes_of


def test_a_frame_count_cogvideox_would_round_is_refused_by_the_worker(host_for) -> None:
    # Its VAE decodes N frames only from an odd number of latent frames: 5 comes back as 8.
    host = host_for("cogvideox-tiny")
    refusal = host.validate([job_for(host.spec, "f", num_frames=5)])
    assert refusal == "cogvideox-tiny needs (num_frames - 1) % 8 == 0, got 5"
    assert host.validate([job_for(host.spec, "f", num_frames=9)]) is None
    wan = host_for("wan-tiny")
    assert wan.validate([job_for(wan.spec, "f", num_frames=5)]) is None
