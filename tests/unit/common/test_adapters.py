"""LoRA adapters in requests: resolved against the registry entry, refused by name and limit."""

from __future__ import annotations

import pytest

from mediamesh.cli.status_table import render
from mediamesh.common.adapters import AdapterRequest, parse_adapter_list
from mediamesh.common.errors import InvalidArgument, NotFound
from mediamesh.common.generated.v1 import scheduler_pb2
from mediamesh.common.generation import AdapterScale, GenerationParams
from mediamesh.common.params import RequestFields, check_generation, resolve
from mediamesh.common.registry import RegistryError, load_registry, parse_registry
from mediamesh.gateway.core.inference_call import InputTensor, parse_call
from mediamesh.sdk.options import parse_adapter

REGISTRY = load_registry()
FLUX = REGISTRY.get("flux-tiny")


def fields(*adapters: AdapterRequest) -> RequestFields:
    return RequestFields("flux-tiny", "a fox", adapters=adapters)


def test_scales_resolve_in_request_order_with_the_entry_default() -> None:
    params = resolve(FLUX, fields(AdapterRequest("style2"), AdapterRequest("style", -1.5)))
    assert params.adapters == (AdapterScale("style2", 0.8), AdapterScale("style", -1.5))
    assert resolve(FLUX, fields()).adapters == ()


def test_a_float32_scale_off_the_wire_equals_the_typed_one() -> None:
    import numpy as np

    wire = float(np.float32(0.8))
    assert wire != 0.8
    params = resolve(FLUX, fields(AdapterRequest("style", wire)))
    assert params.adapters == (AdapterScale("style", 0.8),)


def test_unknown_adapter_is_not_found_naming_it_and_the_known_ones() -> None:
    with pytest.raises(NotFound) as caught:
        resolve(FLUX, fields(AdapterRequest("style"), AdapterRequest("sepia")))
    assert caught.value.message == (
        "adapters[1].name: adapter 'sepia' is not offered by model 'flux-tiny'; "
        "known: style, style2"
    )
    with pytest.raises(NotFound, match="known: none"):
        resolve(
            REGISTRY.get("wan-tiny"),
            RequestFields("wan-tiny", "x", adapters=(AdapterRequest("style"),)),
        )


@pytest.mark.parametrize("scale", [-4.01, 4.5, float("nan"), float("inf")])
def test_scale_out_of_range_is_invalid_argument(scale: float) -> None:
    with pytest.raises(InvalidArgument, match=r"adapters\[0\]\.scale: .* allowed -4.0..4.0"):
        resolve(FLUX, fields(AdapterRequest("style", scale)))


def test_limits_on_count_and_repeats() -> None:
    two = (AdapterRequest("style"), AdapterRequest("style2"))
    with pytest.raises(InvalidArgument, match="adapters: 2 given; at most 1 per request"):
        resolve(FLUX, fields(*two), max_adapters=1)
    with pytest.raises(InvalidArgument, match=r"adapters\[1\]\.name: 'style' is named twice"):
        resolve(FLUX, fields(AdapterRequest("style"), AdapterRequest("style", 0.5)))


def test_an_unnamed_adapter_is_invalid_argument_not_an_unknown_one() -> None:
    with pytest.raises(InvalidArgument) as caught:
        resolve(FLUX, fields(AdapterRequest("style"), AdapterRequest("", 0.5)))
    assert caught.value.message == (
        "adapters[1].name: required; name an adapter of model 'flux-tiny' (known: style, style2)"
    )


def test_a_worker_rechecks_resolved_adapters() -> None:
    params = GenerationParams(
        prompt="p", width=64, height=64, adapters=(AdapterScale("ghost", 1.0),)
    )
    with pytest.raises(InvalidArgument, match="adapter 'ghost' is not offered"):
        check_generation(FLUX, params)


def test_adapter_list_syntax() -> None:
    assert parse_adapter_list("style:0.8, style2") == (
        AdapterRequest("style", 0.8),
        AdapterRequest("style2", None),
    )
    assert parse_adapter_list("") == ()
    for text in (",,,", "style,", "style,,style2"):
        with pytest.raises(InvalidArgument, match="has an empty entry"):
            parse_adapter_list(text)
    with pytest.raises(InvalidArgument, match="scale 'x' of 'style' is not a number"):
        parse_adapter_list("style:x")
    with pytest.raises(InvalidArgument, match="has no adapter name"):
        parse_adapter_list(":1")
    assert parse_adapter("style:0.8") == ("style", 0.8)
    assert parse_adapter("style") == ("style", None)
    with pytest.raises(ValueError, match="not a number"):
        parse_adapter("style:big")


def test_kserve_adapters_parameter_maps_and_keeps_not_found() -> None:
    prompt = InputTensor("prompt", "BYTES", (1,), (b"a fox",))
    call = parse_call(FLUX, [prompt], {"adapters": "style:0.5"}, [])
    assert call.elements[0].adapters == (AdapterRequest("style", 0.5),)
    with pytest.raises(NotFound, match="'oil'"):
        parse_call(FLUX, [prompt], {"adapters": "oil"}, [])
    with pytest.raises(InvalidArgument, match="adapters: expected a string"):
        parse_call(FLUX, [prompt], {"adapters": 3}, [])
    with pytest.raises(InvalidArgument, match="at most 1 per request"):
        parse_call(FLUX, [prompt], {"adapters": "style,style2"}, [], max_adapters=1)


def test_registry_refuses_a_repeated_adapter_name() -> None:
    entry = FLUX.model_dump(mode="json")
    entry["adapters"] = [{"name": "a", "source": "x"}, {"name": "a", "source": "y"}]
    with pytest.raises(RegistryError, match="adapters: a named more than once"):
        parse_registry({"models": [entry]})
    entry["adapters"] = [{"name": "a", "source": "x", "default_scale": 9}]
    with pytest.raises(RegistryError, match="default_scale"):
        parse_registry({"models": [entry]})


def test_registry_refuses_adapters_on_a_parallel_entry() -> None:
    entry = FLUX.model_dump(mode="json")
    entry["adapters"] = [{"name": "a", "source": "x"}]
    entry["parallelism"] = {"mode": "tensor", "size": 2, "devices": ["cpu", "cpu"]}
    with pytest.raises(RegistryError, match=r"adapters: LoRA adapters need parallelism\.mode data"):
        parse_registry({"models": [entry]})


def test_status_table_lists_loaded_adapters_per_worker() -> None:
    status = scheduler_pb2.MeshStatus(
        workers=[
            scheduler_pb2.WorkerSummary(
                worker_id="w0",
                models=["flux-tiny"],
                adapters=[
                    scheduler_pb2.ModelAdapters(
                        model="flux-tiny",
                        adapters=[
                            scheduler_pb2.LoadedAdapter(name="style"),
                            scheduler_pb2.LoadedAdapter(name="style2"),
                        ],
                    )
                ],
            ),
            scheduler_pb2.WorkerSummary(worker_id="w1", models=["flux-tiny"]),
        ]
    )
    lines = render(status).splitlines()
    header = next(line for line in lines if line.startswith("worker"))
    assert header.split()[-1] == "adapters"
    assert next(line for line in lines if line.startswith("w0")).endswith("flux-tiny:style,style2")
    assert next(line for line in lines if line.startswith("w1")).split()[-1] == "-"
