"""The KServe face's answers to text that is not UTF-8, compressed bodies, deadlines the queue
makes unreachable, non-finite parameters and the Triton extensions the mesh does not offer."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib

import httpx
import pytest
from fastapi import FastAPI

from mediamesh.common.errors import InvalidArgument, MeshError, PayloadTooLarge, StatusCode
from mediamesh.gateway.core.inference_call import call_deadline_sooner, refusal
from mediamesh.gateway.core.oip_rest import parse_infer_request
from mediamesh.gateway.core.strict_json import parse_json
from mediamesh.gateway.http import errors, oip
from mediamesh.gateway.http.compressed_bodies import content_encoding, inflated
from mediamesh.gateway.http.errors import UnsupportedMediaType, error_response

PROMPT = {"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a fox"]}


def surrogate_refusal(text: str | bytes, where: str = "body", keys_under: str = "") -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse_json(text, where, keys_under=keys_under)
    return caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"inputs":[{"data":["ab\\ud800"]}]}',
            "inputs[0].data[0]: not valid UTF-8 (holds a lone surrogate, \\ud800, at character 2)",
        ),
        (
            '{"parameters":{"\\udc00":1}}',
            "parameters.\\udc00: not valid UTF-8 (the key holds a lone surrogate",
        ),
        ('{"id":"\\ud800"}', "id: not valid UTF-8"),
        ('"\\ud800"', "body: not valid UTF-8"),
        ('["\\ud800"]', "body[0]: not valid UTF-8"),
        # The three bytes of an encoded surrogate, which Python's parser also lets through.
        (b'{"prompt":"\xed\xa0\x80"}', "prompt: not valid UTF-8"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_its_field(text, message):
    assert surrogate_refusal(text).startswith(message)


def test_a_form_fields_json_names_the_field_and_a_pair_passes():
    refused = surrogate_refusal('[{"name":"\\ud800"}]', "adapters", "adapters.")
    assert refused.startswith("adapters[0].name: not valid UTF-8")
    assert parse_json('{"p":"\\ud83d\\ude00"}', "body") == {"p": "\U0001f600"}


def test_the_kserve_body_with_a_surrogate_is_a_refusal_not_an_encoding_error():
    for document in (
        {"inputs": [{**PROMPT, "data": ["\ud800"]}]},
        {"inputs": [{**PROMPT, "name": "\ud800"}]},
        {"inputs": [PROMPT], "outputs": [{"name": "\ud800"}]},
        {"inputs": [PROMPT], "\ud800": 1},
    ):
        with pytest.raises(InvalidArgument, match="not valid UTF-8"):
            parse_infer_request(json.dumps(document).encode(), None)


def test_an_error_quoting_a_surrogate_still_renders_as_json():
    error = InvalidArgument("inputs.\ud800: not a field")
    for path in ("/v2/models/echo/infer", "/v1/images/generations", "/v1/jobs"):
        response = error_response(error, path)
        assert response.status_code == 400
        assert "inputs.\\\\ud800: not a field" in response.body.decode()


def test_a_non_finite_parameter_is_called_that():
    document = {"inputs": [PROMPT], "parameters": {"steps": float("nan")}}
    with pytest.raises(InvalidArgument) as caught:
        parse_infer_request(json.dumps(document).encode(), None)
    assert caught.value.message.startswith("parameters.steps: NaN is not a finite number")


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
def test_gzip_and_deflate_bodies_are_inflated(encoding, compress):
    body = b'{"inputs": []}' * 1000
    assert content_encoding(f" {encoding.upper()} ") == encoding
    assert inflated(compress(body), encoding, len(body)) == body
    with pytest.raises(PayloadTooLarge, match=f"over the limit of {len(body) - 1} bytes"):
        inflated(compress(body), encoding, len(body) - 1)
    with pytest.raises(InvalidArgument, match="ends before its stream does"):
        inflated(compress(body)[:-8], encoding, len(body))
    with pytest.raises(InvalidArgument, match=f"body: not valid {encoding} data"):
        inflated(b"not compressed", encoding, len(body))


def test_a_compression_bomb_is_refused_without_being_inflated_whole():
    packer = zlib.compressobj(1, wbits=16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1024 * 1024)
    bomb = b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge, match="over the limit of 1048576 bytes"):
            inflated(bomb, "gzip", 1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024  # the 256 MiB it inflates to were never held


def test_an_unknown_encoding_is_415_naming_the_supported_ones():
    assert content_encoding(None) == "identity"
    with pytest.raises(UnsupportedMediaType) as caught:
        content_encoding("br")
    assert caught.value.message == (
        "Content-Encoding: 'br' is not supported; send the body uncompressed or with gzip "
        "or deflate"
    )


def test_a_deadline_the_queue_makes_unreachable_is_tritons_timeout():
    unreachable = MeshError(
        "timeout_ms: deadline cannot be met: estimated 96.9 s to finish, 0.4 s left",
        code=StatusCode.RESOURCE_EXHAUSTED,
        retry_after_s=96.5,
    )
    answer = refusal(unreachable)
    assert answer.code is StatusCode.UNAVAILABLE and answer.retry_after_s == 96.5
    assert answer.message == (
        "Request timeout expired (timeout: deadline cannot be met: estimated 96.9 s to "
        "finish, 0.4 s left)"
    )
    by_call = refusal(unreachable, deadline_set_by_call=True)
    assert by_call.message.startswith(
        "Request timeout expired (the call's gRPC deadline (the job's, being sooner than any "
        "timeout): deadline cannot be met"
    )
    too_short = MeshError("timeout_ms: 0.010 s left, and ...", code=StatusCode.DEADLINE_EXCEEDED)
    assert refusal(too_short).message == "Request timeout expired (timeout: 0.010 s left, and ...)"
    # A full queue is no matter of the deadline: it keeps its status.
    full = MeshError("queue 'image' is full: ...", code=StatusCode.RESOURCE_EXHAUSTED)
    assert refusal(full) is full
    assert call_deadline_sooner(None, 5.0) and call_deadline_sooner(6000, 5.0)
    assert not call_deadline_sooner(4000, 5.0) and not call_deadline_sooner(None, None)


@pytest.mark.parametrize(
    ("method", "path", "extension"),
    [
        ("POST", "/v2/repository/models/echo/load", "model_repository"),
        ("POST", "/v2/repository/models/echo/unload", "model_repository"),
        ("GET", "/v2/systemsharedmemory/status", "system_shared_memory"),
        ("GET", "/v2/systemsharedmemory/region/r/status", "system_shared_memory"),
        ("POST", "/v2/systemsharedmemory/region/r/register", "system_shared_memory"),
        ("POST", "/v2/systemsharedmemory/region/r/unregister", "system_shared_memory"),
        ("POST", "/v2/systemsharedmemory/unregister", "system_shared_memory"),
        ("GET", "/v2/cudasharedmemory/status", "cuda_shared_memory"),
        ("POST", "/v2/cudasharedmemory/region/r/register", "cuda_shared_memory"),
    ],
)
async def test_extensions_not_offered_answer_501_in_the_protocols_shape(method, path, extension):
    app = FastAPI()
    app.include_router(oip.router)
    errors.install(app)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.request(method, path)
    assert answer.status_code == 501
    assert answer.json() == {
        "error": f"the mesh does not offer Triton's {extension} extension: "
        f"{oip._NOT_OFFERED[extension]} (GET /v2 lists the extensions it serves)"
    }
