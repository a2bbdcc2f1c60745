"""StatusCode maps once per transport: gRPC, HTTP and the KServe face, each total."""

from __future__ import annotations

import grpc
import pytest

from mediamesh.common import errors
from mediamesh.common.api.status import GRPC_STATUS, from_grpc, to_grpc
from mediamesh.common.errors import (
    MeshError,
    PayloadTooLarge,
    ResourceExhausted,
    StatusCode,
    retry_after_ms,
)
from mediamesh.common.http_status import HTTP_STATUS, http_status, http_status_of
from mediamesh.gateway.core.kserve_status import KSERVE_STATUS, kserve_code, stream_error_text


def test_values_are_the_grpc_code_names():
    # Stored job error codes and proto string fields hold these names: they must not drift.
    assert {code.value for code in StatusCode} == {code.name for code in grpc.StatusCode}
    assert all(code.name == code.value for code in StatusCode)


@pytest.mark.parametrize("code", list(StatusCode))
def test_every_code_maps_on_every_transport(code: StatusCode):
    assert isinstance(to_grpc(code), grpc.StatusCode)
    assert 200 <= http_status(code) <= 599
    assert KSERVE_STATUS[code] in StatusCode


def test_grpc_mapping_is_total_and_bijective():
    assert set(GRPC_STATUS) == set(StatusCode)
    assert set(GRPC_STATUS.values()) == set(grpc.StatusCode)
    assert len(set(GRPC_STATUS.values())) == len(StatusCode)
    for code in StatusCode:
        assert to_grpc(code).name == code.value
        assert from_grpc(to_grpc(code)) is code


def test_no_grpc_status_yet_reads_as_ok():
    assert from_grpc(None) is StatusCode.OK


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (StatusCode.OK, 200),
        (StatusCode.CANCELLED, 499),
        (StatusCode.INVALID_ARGUMENT, 400),
        (StatusCode.UNAUTHENTICATED, 401),
        (StatusCode.PERMISSION_DENIED, 403),
        (StatusCode.NOT_FOUND, 404),
        (StatusCode.ALREADY_EXISTS, 409),
        (StatusCode.RESOURCE_EXHAUSTED, 429),
        (StatusCode.INTERNAL, 500),
        (StatusCode.UNIMPLEMENTED, 501),
        (StatusCode.UNAVAILABLE, 503),
        (StatusCode.DEADLINE_EXCEEDED, 504),
    ],
)
def test_http_status_follows_the_canonical_mapping(code: StatusCode, expected: int):
    assert http_status(code) == expected


def test_http_table_is_total():
    assert set(HTTP_STATUS) == set(StatusCode)


def test_too_large_is_413_over_http_and_resource_exhausted_over_grpc():
    too_large = PayloadTooLarge("output: 9 MB do not fit")
    assert too_large.code is StatusCode.RESOURCE_EXHAUSTED
    assert to_grpc(too_large.code) is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert http_status_of(too_large) == 413
    assert http_status_of(ResourceExhausted("queue full")) == 429
    assert http_status_of(MeshError("boom")) == 500


def test_every_mesh_error_class_carries_a_member():
    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, MeshError)
    ]
    assert len(classes) > 5
    for cls in classes:
        assert isinstance(cls.code, StatusCode), cls


def test_a_code_read_from_a_peer_becomes_a_member():
    error = MeshError("m", code=StatusCode("NOT_FOUND"))
    assert error.code is StatusCode.NOT_FOUND
    assert StatusCode.parse("ABORTED") is StatusCode.ABORTED
    assert StatusCode.parse("NO_SUCH_CODE") is StatusCode.UNKNOWN
    assert StatusCode.parse("", default=StatusCode.INTERNAL) is StatusCode.INTERNAL


def test_kserve_answers_follow_triton():
    assert set(KSERVE_STATUS) == set(StatusCode)
    assert kserve_code("DEADLINE_EXCEEDED") is StatusCode.UNAVAILABLE
    assert kserve_code("OK") is StatusCode.INTERNAL
    assert kserve_code("NO_SUCH_CODE") is StatusCode.INTERNAL
    assert kserve_code("NOT_FOUND") is StatusCode.NOT_FOUND


def test_kserve_stream_error_carries_code_and_retry_hint():
    assert stream_error_text(StatusCode.NOT_FOUND, "no model") == "NOT_FOUND: no model"
    text = stream_error_text(StatusCode.RESOURCE_EXHAUSTED, "queue full", retry_after_s=1.5)
    assert text == "RESOURCE_EXHAUSTED: queue full (retry after 1500 ms)"


def test_a_retry_hint_in_milliseconds_is_rounded_up_and_never_zero():
    # A token bucket's waits are often under a millisecond: "0" would send the client back
    # before the limit lifts, and grpcio's retries of a 0 ms pushback could hang.
    assert retry_after_ms(0.0004) == 1
    assert retry_after_ms(0.0091) == 10
    assert retry_after_ms(0.29) == 290
    assert retry_after_ms(1.5) == 1500
    text = stream_error_text(StatusCode.RESOURCE_EXHAUSTED, "over budget", retry_after_s=0.0002)
    assert text == "RESOURCE_EXHAUSTED: over budget (retry after 1 ms)"
