"""Every HTTP face refuses JSON holding a lone UTF-16 surrogate with a 400 in its own error
shape (it was a plain-text 500), and the KServe infer route reads gzip and deflate bodies,
as Triton does and unmodified tritonclient.http sends them."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import zlib

import pytest

from tests.conftest import ROOT
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    MAX_BODY,
    base_url,
    bearer,
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROMPT = {"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["a fox"]}
INFER = {"inputs": [PROMPT], "outputs": [{"name": "seed"}]}
# A lone surrogate: json.dumps writes it as the escape `\ud800`, as a client's raw JSON may.
LONE = "\ud800"


def json_body(document: object) -> bytes:
    return json.dumps(document).encode()


async def test_a_lone_surrogate_is_a_400_on_every_face(http_mesh: InProcessMesh):  # noqa: F811
    kserve = {
        "/v2/models/echo/infer": [
            {**INFER, "inputs": [{**PROMPT, "data": [LONE]}]},
            {**INFER, "inputs": [{**PROMPT, "name": LONE}]},
            {**INFER, "inputs": [{**PROMPT, "datatype": LONE}]},
            {**INFER, "outputs": [{"name": LONE}]},
            {**INFER, "parameters": {LONE: 1}},
            {**INFER, LONE: 1},
            {**INFER, "id": LONE},
        ],
        "/v2/repository/index": [{LONE: True}],
    }
    others = {
        "/v1/jobs": {"model": "echo", "prompt": LONE},
        "/v1/images/generations": {"model": "flux-tiny", "prompt": LONE},
        "/v1/audio/generate": {"model": "stable-audio-tiny", "input": LONE},
    }
    async with http_client(http_mesh, KEY_A) as client:
        for path, documents in kserve.items():
            for document in documents:
                answer = await client.post(path, content=json_body(document))
                assert answer.status_code == 400, (path, document, answer.text)
                (message,) = answer.json().values()
                assert "not valid UTF-8" in message and "\\ud800" in message
        for path, document in others.items():
            answer = await client.post(
                path, content=json_body(document), headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400, (path, answer.text)
            shape = answer.json()  # the mesh's {code, message} or OpenAI's {error: {...}}
            message = shape.get("message") or shape["error"]["message"]
            assert ": not valid UTF-8 (holds a lone surrogate, \\ud800" in message


async def test_gzip_and_deflate_bodies_are_read_within_the_body_limit(http_mesh: InProcessMesh):  # noqa: F811
    async with http_client(http_mesh, KEY_A) as client:
        for encoding, compress in (("gzip", gzip.compress), ("deflate", zlib.compress)):
            answer = await client.post(
                "/v2/models/echo/infer",
                content=compress(json_body({**INFER, "parameters": {"seed": 5}})),
                headers={"content-encoding": encoding},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["outputs"][0]["data"] == [5]
        # Within the limit compressed, over it once inflated.
        padded = {**INFER, "id": "x" * MAX_BODY}
        bomb = await client.post(
            "/v2/models/echo/infer",
            content=gzip.compress(json_body(padded)),
            headers={"content-encoding": "gzip"},
        )
        assert bomb.status_code == 413
        assert bomb.json() == {
            "error": f"body: over the limit of {MAX_BODY} bytes once decompressed "
            "(Content-Encoding: gzip)"
        }
        other = await client.post(
            "/v2/models/echo/infer", content=b"x", headers={"content-encoding": "br"}
        )
        assert other.status_code == 415 and "gzip or deflate" in other.json()["error"]


# tritonclient.http brings gevent, kept out of the test process (as triton_http_probe.py).
_TRITON_COMPRESSED = """
import sys, numpy as np, tritonclient.http as triton
client = triton.InferenceServerClient(sys.argv[1])
prompt = triton.InferInput("prompt", [1], "BYTES")
prompt.set_data_from_numpy(np.array([b"a fox"], dtype=np.object_))
for algorithm in ("gzip", "deflate"):
    result = client.infer(
        "echo", [prompt], parameters={"seed": 3},
        headers={"authorization": "Bearer " + sys.argv[2]},
        outputs=[triton.InferRequestedOutput("seed")], request_compression_algorithm=algorithm,
    )
    print(algorithm, int(result.as_numpy("seed")[0]))
"""


async def test_tritonclient_http_compressed_requests(http_mesh: InProcessMesh):  # noqa: F811
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _TRITON_COMPRESSED,
        base_url(http_mesh).removeprefix("http://"),
        KEY_A,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    assert out.decode().split() == ["gzip", "3", "deflate", "3"]


async def test_the_extensions_not_offered_answer_501(http_mesh: InProcessMesh):  # noqa: F811
    async with http_client(http_mesh) as client:
        load = await client.post("/v2/repository/models/echo/load", headers=bearer(KEY_A))
        assert load.status_code == 501
        assert load.json()["error"].startswith(
            "the mesh does not offer Triton's model_repository extension"
        )
        status = await client.get("/v2/systemsharedmemory/status")
        assert status.status_code == 501 and set(status.json()) == {"error"}
