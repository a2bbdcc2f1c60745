"""Parallel-mode entries that must not share state or start on what they cannot run: offload
folders, helper ranks, devices, quantization, head splits."""

from __future__ import annotations

import queue
import signal
from pathlib import Path
from typing import Any

import diffusers
import pytest
import torch

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.preflight import refuse_unloadable
from mediamesh.worker.parallel import pipeline_mode, rank

MODELS_DIR = Path(__file__).resolve().parents[3] / ".mediamesh" / "models"


def flux(name: str = "flux-tiny", **parallelism: Any) -> ModelSpec:
    spec = load_registry().get("flux-tiny")
    assert spec is not None
    options = spec.parallelism.model_copy(update=parallelism)
    return spec.model_copy(update={"name": name, "parallelism": options, "adapters": ()})


def test_entries_sharing_an_offload_folder_offload_into_folders_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folders: list[str] = []

    def from_pretrained(*args: Any, offload_folder: str, **kwargs: Any) -> Any:
        folders.append(offload_folder)
        (Path(offload_folder) / "index.json").write_text("{}")
        return object()

    monkeypatch.setattr(diffusers.FluxTransformer2DModel, "from_pretrained", from_pretrained)
    shared = tmp_path / "offload"
    for name in ("flux-a", "flux-b", "flux-a"):  # the second flux-a: another worker's load
        spec = flux(name, mode="pipeline", device_map="sequential", offload_folder=str(shared))
        pipeline_mode._load_split_denoiser(spec, MODELS_DIR, None, str(shared))
    assert len(set(folders)) == 3
    parents = [shared / "flux-a", shared / "flux-b", shared / "flux-a"]
    assert [Path(f).parent for f in folders] == parents


def refusal(spec: ModelSpec) -> str:
    with pytest.raises(ModelLoadError) as refused:
        refuse_unloadable(spec, models_dir=MODELS_DIR, device="cpu")
    return str(refused.value)


def test_a_tensor_size_that_does_not_divide_the_heads_is_refused_before_any_rank_starts() -> None:
    # flux-tiny has 4 heads: one line naming the field, at the weightless start checks.
    message = refusal(flux(mode="tensor", size=3))
    assert message.startswith("model 'flux-tiny' field parallelism.size: 4 attention heads")
    assert "(1, 2, 4)" in message and "\n" not in message
    refuse_unloadable(flux(mode="tensor", size=2), models_dir=MODELS_DIR, device="cpu")


def test_tensor_mode_on_another_family_names_the_mode_field() -> None:
    spec = load_registry().get("sdxl-tiny")
    assert spec is not None
    options = spec.parallelism.model_copy(update={"mode": "tensor", "size": 2})
    message = refusal(spec.model_copy(update={"parallelism": options, "adapters": ()}))
    assert "'sdxl-tiny' field parallelism.mode: tensor parallelism is implemented for" in message


@pytest.mark.parametrize(
    "parallelism",
    [
        {"mode": "context", "ulysses": 2},
        {"mode": "pipeline", "device_map": "balanced"},
        {"mode": "pipeline", "device_map": "sequential"},
        {"mode": "tensor", "size": 2},
    ],
)
def test_quantization_is_refused_in_every_mode_but_data(parallelism: dict[str, Any]) -> None:
    spec = flux(**parallelism).model_copy(update={"quantization": "int8-dynamic"})
    message = refusal(spec)
    mode = parallelism["mode"]
    assert (
        f"'flux-tiny' field quantization: int8-dynamic needs parallelism mode data, not {mode}"
        in message
    )


@pytest.mark.parametrize(
    ("parallelism", "field"),
    [
        ({"mode": "pipeline", "devices": ["mps"]}, "parallelism.devices"),
        (
            {"mode": "pipeline", "max_memory": {"mps": "1GB", "cpu": "1GB"}},
            "parallelism.max_memory",
        ),
        ({"mode": "context", "ulysses": 2, "devices": ["mps", "mps"]}, "parallelism.devices"),
    ],
)
def test_mps_on_a_host_without_it_is_refused_at_start(
    parallelism: dict[str, Any], field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert f"'flux-tiny' field {field}: mps is not available" in refusal(flux(**parallelism))


def test_helper_ranks_ignore_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker stops its helpers on Ctrl-C; a helper interrupted itself printed a traceback.
    def load_pipeline(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("stop here")

    monkeypatch.setattr(rank, "load_pipeline", load_pipeline)
    replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
    before = signal.getsignal(signal.SIGINT)
    try:
        rank.helper_main(
            rank=1,
            size=2,
            init_method="tcp://127.0.0.1:27601",
            backend="gloo",
            spec_data=flux(mode="tensor", size=2).model_dump(),
            models_dir=str(MODELS_DIR),
            device="cpu",
            checkpoint_dir=".",
            commands=None,
            replies=replies,
            timeout_s=1.0,
            test_hooks={},
        )
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert replies.get_nowait() == ("error", 1, "RuntimeError: stop here")
