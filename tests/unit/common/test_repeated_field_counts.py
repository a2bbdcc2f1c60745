"""Repeated fields are held to a count by their length, before any entry is walked: a request
of millions of tiny entries is refused in microseconds, on gRPC and in JSON alike."""

from __future__ import annotations

import time

import pytest

from mediamesh.common.api.bounds import DEFAULT_MAX_COUNT, MAX_COUNTS, check_bounds, max_count
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2
from mediamesh.gateway.api.json_plane import request_from_json


def _request_messages(service) -> set:
    found: dict[str, object] = {}

    def walk(descriptor) -> None:
        if descriptor.full_name in found:
            return
        found[descriptor.full_name] = descriptor
        for field in descriptor.fields:
            if field.message_type is not None:
                walk(field.message_type)

    for method in service.methods:
        walk(method.input_type)
    return set(found.values())


def test_every_repeated_field_of_the_public_requests_has_a_count_of_its_own():
    services = (
        gateway_pb2.DESCRIPTOR.services_by_name["Gateway"],
        pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
    )
    missing = [
        f"{message.full_name}.{field.name}"
        for service in services
        for message in _request_messages(service)
        if not message.GetOptions().map_entry
        for field in message.fields
        if field.is_repeated and field.name not in MAX_COUNTS.get(message.full_name, {})
    ]
    assert not missing


def test_a_field_over_its_count_is_refused_by_length_naming_it_and_the_limit():
    request = common_pb2.GenerateRequest(model="m")
    request.webhook.events.extend(["completed"] * 2_000_000)
    started = time.perf_counter()
    with pytest.raises(InvalidArgument) as caught:
        check_bounds(request)
    assert time.perf_counter() - started < 0.05
    assert caught.value.message == "webhook.events: 2000000 entries; the limit is 8"
    # Nested in repeated messages and maps, with the path to the entry.
    infer = pb.ModelInferRequest(model_name="m")
    infer.inputs.add(name="prompt", shape=[1] * 9)
    with pytest.raises(InvalidArgument, match=r"^inputs\[0\]\.shape: 9 entries; the limit is 8$"):
        check_bounds(infer)
    infer = pb.ModelInferRequest(model_name="m")
    infer.inputs.add(name="prompt").contents.bytes_contents.extend([b""] * 257)
    with pytest.raises(InvalidArgument, match=r"contents\.bytes_contents: 257 entries"):
        check_bounds(infer)
    # At the limit passes; unlisted fields fall under the default.
    request = common_pb2.GenerateRequest(model="m")
    request.webhook.events.extend(["completed"] * 8)
    check_bounds(request)
    assert max_count("mediamesh.v1.RunBatchRequest", "jobs") == DEFAULT_MAX_COUNT


def test_json_requests_are_held_to_the_same_counts_before_their_entries_are_checked():
    body = {"model": "m", "webhook": {"url": "https://x.example", "events": [0] * 100_000}}
    with pytest.raises(InvalidArgument) as caught:
        request_from_json(body)
    # The count, not the first entry's type (which is wrong too).
    assert caught.value.message == "webhook.events: 100000 entries; the limit is 8"
    with pytest.raises(InvalidArgument, match=r"^adapters: 65 entries; the limit is 64$"):
        request_from_json({"model": "m", "adapters": [{"name": "a"}] * 65})
