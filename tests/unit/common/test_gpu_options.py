"""`gpu:` load options: combinations that cannot work are refused, naming entry and field."""

from __future__ import annotations

from typing import Any

import pytest

from mediamesh.common.gpu_options import check_on_device
from mediamesh.common.registry import ModelSpec, RegistryError, parse_registry
from mediamesh.common.step_cache import CACHE_KINDS

BASE: dict[str, Any] = {
    "name": "big",
    "modality": "image",
    "pipeline": "FluxPipeline",
    "source": "x",
    "defaults": {"width": 64, "height": 64},
    "limits": {"max_width": 64, "max_height": 64},
}


def spec(**fields: Any) -> ModelSpec:
    return parse_registry({"models": [{**BASE, **fields}]}).models[0]


def test_defaults_change_nothing() -> None:
    options = spec().gpu
    assert options.offload == "none" and options.compile.mode == "none"
    assert options.attention_backend is None and not options.vae.tiling


def test_every_option_parses() -> None:
    options = spec(
        gpu={
            "compile": {"mode": "regional", "dynamic": True},
            "attention_backend": "flash",
            "vae": {"tiling": True, "slicing": True},
            "offload": "model",
        }
    ).gpu
    assert options.compile.dynamic and options.vae.slicing and options.offload == "model"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"gpu": {"offload": "model"}, "parallelism": {"mode": "tensor", "size": 2}},
            "gpu.offload: model offload .* parallelism.mode tensor",
        ),
        (
            {"gpu": {"offload": "sequential"}, "parallelism": {"mode": "pipeline"}},
            "gpu.offload: sequential",
        ),
        (
            {"gpu": {"compile": {"mode": "regional"}}, "quantization": "int8-dynamic"},
            "gpu.compile: int8-dynamic",
        ),
        (
            {"gpu": {"compile": {"mode": "full"}, "offload": "sequential"}},
            "gpu.compile: sequential offload",
        ),
        (
            {"gpu": {"compile": {"mode": "full"}}, "parallelism": {"mode": "tensor", "size": 2}},
            "gpu.compile: .*data mode only",
        ),
        ({"gpu": {"attention_backend": "warp-speed"}}, "gpu.attention_backend: unknown backend"),
        ({"gpu": {"attention_backend": "flash_hub"}}, "downloads kernels"),
        ({"gpu": {"compile": {"mode": "partial"}}}, "gpu.compile.mode: "),
        ({"gpu": {"offload": "disk"}}, "gpu.offload: Input"),
        ({"gpu": {"vae": {"tiles": True}}}, "gpu.vae.tiles: Extra"),
    ],
)
def test_impossible_combinations_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=f"model 'big' field .*{message}"):
        spec(**fields)


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"cache": {"kind": "first-block"}}, "cache"), ({"gpu": {"offload": "model"}}, "gpu")],
)
def test_echo_takes_no_torch_options(fields: dict[str, Any], field: str) -> None:
    echo = {
        **BASE,
        "pipeline": "Echo",
        "source": "builtin",
        "defaults": {"width": 16, "height": 16, "steps": 1},
    }
    with pytest.raises(RegistryError, match=f"model 'big' field .*{field}: the builtin Echo"):
        parse_registry({"models": [{**echo, **fields}]})


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"dtype": "float16"}, "dtype: float16"),
        ({"gpu": {"offload": "model"}}, "gpu.offload: model offload needs an accelerator"),
        ({"gpu": {"attention_backend": "flash"}}, "gpu.attention_backend: flash needs CUDA"),
    ],
)
def test_device_dependent_options_are_refused_on_cpu(fields: dict[str, Any], problem: str):
    entry = spec(**fields)
    reason = check_on_device(entry, "cpu")
    assert reason is not None and reason.startswith(problem)
    assert check_on_device(entry, "cuda:0") is None


def test_cpu_friendly_options_pass_on_cpu() -> None:
    entry = spec(dtype="bfloat16", gpu={"attention_backend": "native", "vae": {"tiling": True}})
    assert check_on_device(entry, "cpu") is None


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_a_step_cache_is_refused_in_context_mode(kind: str) -> None:
    # Ranks of a context group each see a slice of the sequence; a skip decided per slice
    # could differ between ranks and hang the group in its collectives.
    with pytest.raises(RegistryError, match=f"model 'big' field .*cache: a {kind} step cache"):
        spec(cache={"kind": kind}, parallelism={"mode": "context", "ulysses": 2})


@pytest.mark.parametrize(
    "parallelism",
    [{"mode": "data"}, {"mode": "tensor", "size": 2}, {"mode": "pipeline"}],
)
def test_a_step_cache_is_accepted_outside_context_mode(parallelism: dict[str, Any]) -> None:
    # Tensor ranks hold the whole sequence, replicated after each block's all-reduce, so
    # they reach the same skip decision; pipeline mode is one process.
    entry = spec(cache={"kind": "first-block"}, parallelism=parallelism)
    assert entry.cache is not None and entry.parallelism.mode == parallelism["mode"]
