"""Placement failures and model size multiples, on stand-in pipelines (no weights)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mediamesh.common.registry import ModelSpec, load_registry
from mediamesh.worker.models.gpu_setup import place
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.model_multiple import check_size_multiple, model_size_multiple


def flux_spec(**changes: object) -> ModelSpec:
    spec = load_registry().get("flux-tiny")
    assert spec is not None
    return spec.model_copy(update=changes)


class RefusingPipeline:
    def to(self, device: str) -> None:
        raise NotImplementedError("Cannot copy out of meta tensor;\nno data!")

    def enable_model_cpu_offload(self, device: str) -> None:
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")


def test_a_failed_move_names_the_entry_and_device_in_one_line() -> None:
    with pytest.raises(ModelLoadError) as caught:
        place(flux_spec(), RefusingPipeline(), "cuda:0")
    assert str(caught.value).startswith(
        "model 'flux-tiny': cannot move FluxPipeline to cuda:0: NotImplementedError: "
        "Cannot copy out of meta tensor; no data!"
    )
    assert "\n" not in str(caught.value)


def test_a_failed_offload_of_any_kind_names_the_field() -> None:
    spec = flux_spec()
    offload = spec.gpu.model_copy(update={"offload": "model"})
    with pytest.raises(ModelLoadError) as caught:
        place(spec.model_copy(update={"gpu": offload}), RefusingPipeline(), "cuda:0")
    assert str(caught.value).startswith(
        "model 'flux-tiny' field gpu.offload: NotImplementedError: Cannot copy"
    )


def stand_in(scale: object, patch: object, **scale_name: object) -> SimpleNamespace:
    transformer = SimpleNamespace(config=SimpleNamespace(patch_size=patch))
    return SimpleNamespace(vae_scale_factor=scale, transformer=transformer, **scale_name)


@pytest.mark.parametrize(
    ("pipeline", "needed"),
    [
        (stand_in(8, 2), 16),  # PixArt, SD3
        (stand_in(8, None), 8),  # a transformer without patches
        (stand_in(None, (1, 2, 2), vae_scale_factor_spatial=8), 16),  # Wan: (t, h, w)
        (SimpleNamespace(vae_scale_factor=8, unet=SimpleNamespace(config={})), 8),  # a UNet
        (SimpleNamespace(), None),  # no scale factor: not judged
    ],
)
def test_the_models_multiple_is_vae_scale_times_spatial_patch(
    pipeline: SimpleNamespace, needed: int | None
) -> None:
    assert model_size_multiple(pipeline) == needed


def test_a_coarser_or_equal_entry_multiple_passes() -> None:
    limits = flux_spec().limits
    for multiple in (16, 32):
        spec = flux_spec(limits=limits.model_copy(update={"size_multiple": multiple}))
        check_size_multiple(spec, stand_in(8, 2))
    with pytest.raises(ModelLoadError, match=r"field limits\.size_multiple: 8 .* set it to 16"):
        check_size_multiple(
            flux_spec(limits=limits.model_copy(update={"size_multiple": 8})), stand_in(8, 2)
        )
