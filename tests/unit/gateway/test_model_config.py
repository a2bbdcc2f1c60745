"""Triton's model configuration and repository index of registry models (pure), and the
REST body of an index request."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument, NotFound
from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.inference_call import model_metadata
from mediamesh.gateway.core.model_config import (
    check_repository,
    model_config,
    repository_index,
    unready_reason,
)
from mediamesh.gateway.core.oip_rest import parse_index_request

REGISTRY = load_registry()


def _inputs(model: str) -> list[tuple[str, str, bool]]:
    return [
        (t["name"], t["data_type"], t["optional"])
        for t in model_config(REGISTRY.get(model))["input"]
    ]


def test_the_configuration_lists_the_metadata_tensors_with_no_batch_dimension() -> None:
    for name in REGISTRY.names:
        spec = REGISTRY.get(name)
        config, metadata = model_config(spec), model_metadata(spec)
        assert config["name"] == name and config["platform"] == metadata["platform"]
        assert config["max_batch_size"] == 0 and config["backend"] == "diffusers"
        assert [t["name"] for t in config["input"]] == [t["name"] for t in metadata["inputs"]]
        assert [t["dims"] for t in config["output"]] == [t["shape"] for t in metadata["outputs"]]


def test_only_the_negative_prompt_is_optional_and_input_images_are_required() -> None:
    assert _inputs("flux-tiny") == [("prompt", "TYPE_STRING", False)]
    assert _inputs("sdxl-inpaint-tiny") == [
        ("prompt", "TYPE_STRING", False),
        ("negative_prompt", "TYPE_STRING", True),
        ("image", "TYPE_STRING", False),
        ("mask_image", "TYPE_STRING", False),
    ]
    outputs = model_config(REGISTRY.get("echo"))["output"]
    assert [(t["name"], t["data_type"]) for t in outputs] == [
        ("output", "TYPE_STRING"),
        ("seed", "TYPE_INT64"),
    ]


def test_the_index_names_every_model_in_order_with_its_state_and_reason() -> None:
    unready = {"wan-tiny": unready_reason("pending"), "sdxl-tiny": unready_reason("warming")}
    index = repository_index(["wan-tiny", "flux-tiny", "sdxl-tiny"], unready)
    assert index == [
        {"name": "flux-tiny", "version": "1", "state": "READY", "reason": ""},
        {
            "name": "sdxl-tiny",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": "warming up: a worker is running the entry's listed shapes",
        },
        {
            "name": "wan-tiny",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": "no live worker hosts it",
        },
    ]
    ready = repository_index(["wan-tiny", "flux-tiny"], unready, ready_only=True)
    assert [m["name"] for m in ready] == ["flux-tiny"]


def test_the_one_repository_is_named_by_the_empty_string() -> None:
    check_repository("")
    with pytest.raises(NotFound, match=r"^repository_name: no repository 'models'"):
        check_repository("models")


@pytest.mark.parametrize(
    ("body", "ready_only"),
    [
        (b"", False),
        (b"  ", False),
        (b"{}", False),
        (b'{"ready": true}', True),
        (b'{"ready": false}', False),
    ],
)
def test_an_index_request_body_asks_for_ready_models_or_all(body: bytes, ready_only: bool) -> None:
    assert parse_index_request(body) is ready_only


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"ready": "yes"}', "ready: expected true or false"),
        (b'{"repository": "x"}', "repository: not a field of the protocol"),
        (b"[1]", "the request body: expected a JSON object"),
        (b"{", "the request body: not valid JSON"),
    ],
)
def test_a_bad_index_request_body_names_its_fault(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_index_request(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"ready":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested more than 64 levels"),
        (b'{"ready": true, "ready": false}', "ready: given twice in one JSON object"),
    ],
)
def test_an_index_body_the_parser_alone_would_fail_on_is_refused(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_index_request(body)
