"""Every string and bytes field of every request message has a declared limit, and it holds.

An api-tier test: it walks the generated descriptors, so a field added to a proto without a
limit in `mediamesh.common.limits` fails here.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.inference import grpc_service_pb2
from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    scheduler_pb2,
    worker_pb2,
)
from mediamesh.common.limits import DEFAULT_LIMIT, REQUEST_LIMITS
from mediamesh.common.registry import RegistryError, load_registry, parse_registry

SERVICES = [
    gateway_pb2.DESCRIPTOR.services_by_name["Gateway"],
    scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"],
    worker_pb2.DESCRIPTOR.services_by_name["Worker"],
    grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"],
]
_TEXT = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)


def text_fields(message: Descriptor, seen: set[str] | None = None) -> set[tuple[str, str]]:
    """(message, field) of every string and bytes field reachable from `message`."""
    seen = set() if seen is None else seen
    if message.full_name in seen:
        return set()
    seen.add(message.full_name)
    found = set()
    for field in message.fields:
        if field.type in _TEXT:
            found.add((message.full_name, field.name))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            found |= text_fields(field.message_type, seen)
    return found


def undeclared(message: Descriptor) -> list[str]:
    return sorted(
        f"{owner}.{field}"
        for owner, field in text_fields(message)
        if field not in REQUEST_LIMITS.get(owner, {})
    )


def request_messages() -> list[Descriptor]:
    return [method.input_type for service in SERVICES for method in service.methods]


def test_every_string_and_bytes_field_of_generate_request_has_a_declared_limit():
    fields = text_fields(common_pb2.GenerateRequest.DESCRIPTOR)
    assert ("mediamesh.v1.GenerateRequest", "idempotency_key") in fields
    assert undeclared(common_pb2.GenerateRequest.DESCRIPTOR) == []


@pytest.mark.parametrize("message", request_messages(), ids=lambda m: m.full_name)
def test_every_request_message_of_every_service_has_declared_limits(message):
    assert undeclared(message) == []


def test_the_walk_finds_a_field_without_a_limit():
    # Not a request message, so nothing is declared for it: the check must notice.
    assert "mediamesh.v1.Error.code" in undeclared(common_pb2.Error.DESCRIPTOR)


def test_no_declared_limit_names_a_field_that_does_not_exist():
    reachable = set()
    for message in request_messages():
        reachable |= text_fields(message)
    declared = {(owner, field) for owner, fields in REQUEST_LIMITS.items() for field in fields}
    assert declared - reachable == set()


def rejected(message) -> str:
    with pytest.raises(InvalidArgument) as caught:
        check_bounds(message)
    return caught.value.message


def test_an_idempotency_key_is_at_most_256_bytes():
    check_bounds(common_pb2.GenerateRequest(model="echo", prompt="x", idempotency_key="k" * 256))
    message = rejected(common_pb2.GenerateRequest(idempotency_key="k" * 257))
    assert message == "idempotency_key: 257 bytes; the limit is 256 bytes"
    # Counted in UTF-8 bytes, not characters.
    assert "idempotency_key: 258 bytes" in rejected(
        common_pb2.GenerateRequest(idempotency_key="é" * 129)
    )


def test_nested_fields_are_named_by_their_path():
    submit = scheduler_pb2.SubmitRequest(
        request=common_pb2.GenerateRequest(idempotency_key="k" * 300), tenant="a"
    )
    assert rejected(submit).startswith("request.idempotency_key: 300 bytes")
    register = scheduler_pb2.WorkerMessage(
        register=scheduler_pb2.WorkerRegistration(
            worker_id="w0", devices=[scheduler_pb2.Device(id="c" * 65)]
        )
    )
    assert rejected(register).startswith("register.devices[0].id: 65 bytes")


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (scheduler_pb2.ScopedJobRequest(job_id="j", tenant="Not A Tenant"), "tenant: 'Not A"),
        (gateway_pb2.GetJobRequest(job_id="../etc/passwd"), "job_id: '../etc/passwd'"),
        (common_pb2.GenerateRequest(model="flux tiny"), "model: 'flux tiny'"),
        (worker_pb2.CancelJobsRequest(job_ids=["ok", "not ok"]), "job_ids[1]: 'not ok'"),
    ],
)
def test_ids_and_names_must_match_their_pattern(message, words):
    message_text = rejected(message)
    assert message_text.startswith(words) and "does not match the pattern" in message_text


def test_kserve_parameter_names_and_string_values_are_bounded():
    request = grpc_service_pb2.ModelInferRequest(model_name="echo")
    request.parameters["p" * 65].string_param = "x"
    assert "parameters key: 65 bytes; the limit is 64 bytes" in rejected(request)
    request = grpc_service_pb2.ModelInferRequest(model_name="echo")
    request.parameters["priority"].string_param = "x" * 257
    assert rejected(request).startswith("parameters['priority'].string_param: 257 bytes")


def test_a_field_without_its_own_limit_still_has_the_default():
    assert rejected(common_pb2.Error(message="x" * (DEFAULT_LIMIT.max_bytes + 1))).startswith(
        "message: "
    )


def test_no_model_may_allow_prompts_longer_than_the_declared_cap():
    raw = {"models": [load_registry().get("echo").model_dump(mode="json")]}
    raw["models"][0]["limits"]["max_prompt_chars"] = 1_000_000
    with pytest.raises(RegistryError, match="max_prompt_chars"):
        parse_registry(raw)
