"""The Open Inference Protocol over HTTP/REST: unmodified tritonclient.http against the
gateway's HTTP face, and the same calls by hand (JSON, the binary extension, an input image,
keys, errors in the protocol's shape)."""

from __future__ import annotations

import asyncio
import io
import json
import sys

import httpx
import pytest
from PIL import Image

from mediamesh.common.registry import load_registry
from mediamesh.gateway.core.model_config import model_config
from mediamesh.gateway.core.tensors import split_bytes_tensor
from tests.conftest import ROOT
from tests.oip_bodies import raw_inputs_body
from tests.service.conftest import InProcessMesh
from tests.service.gateway.conftest import KEY_A
from tests.service.gateway.http_support import (
    base_url,
    bearer,
    http_client,
    http_mesh,  # noqa: F401 (a fixture)
    png_bytes,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_tritonclient_http_health_metadata_infer_and_errors(http_mesh: InProcessMesh):  # noqa: F811
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.service.gateway.triton_http_probe",
        f"127.0.0.1:{http_mesh.gateway.http_port}",
        KEY_A,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode == 0, err.decode()[-3000:]
    report = json.loads(out)
    assert report["live"] and report["ready"] and report["model_ready"]
    assert not report["unknown_ready"]
    assert report["server"]["name"] == "mediamesh"
    assert "binary_tensor_data" in report["server"]["extensions"]
    assert report["inputs"] == [["prompt", "BYTES", [-1]]] and report["versions"] == ["1"]
    assert "model_configuration" in report["server"]["extensions"]
    assert report["config"] == model_config(load_registry().get("flux-tiny"))
    assert report["config"]["input"] == [
        {
            "name": "prompt",
            "data_type": "TYPE_STRING",
            "format": "FORMAT_NONE",
            "dims": [-1],
            "optional": False,
        }
    ]
    states = {model["name"]: model["state"] for model in report["index"]}
    assert states["flux-tiny"] == "READY" and set(states) == set(load_registry().names)
    for name in ("infer", "infer_json_prompts"):
        infer = report[name]
        assert infer["id"] == name and infer["sizes"] == [[48, 64], [48, 64]]
        assert infer["seeds"] == [7, 8] and infer["content_type"] == "image/png"
    assert report["seed_as_json"] == {
        "name": "seed",
        "datatype": "INT64",
        "shape": [1],
        "data": [11],
    }
    errors = report["errors"]
    assert errors["unknown_model"]["status"] == "404"
    assert errors["unknown_model"]["message"].startswith("Request for unknown model: 'nope'")
    assert errors["bad_steps"]["status"] == "400" and "steps" in errors["bad_steps"]["message"]
    assert errors["media_as_json"]["status"] == "400"
    assert errors["media_as_json"]["message"].startswith("outputs.output: it holds encoded media")
    assert errors["no_key"]["status"] == "401"
    assert errors["unknown_config"]["status"] == "404"
    assert errors["unknown_statistics"]["status"] == "404"
    assert "statistics" in report["server"]["extensions"]
    (flux,) = report["statistics"]["model_stats"]
    # The probe's five flux-tiny jobs, all this tenant's; numbers as numbers.
    assert flux["name"] == "flux-tiny" and flux["inference_count"] == 5
    assert flux["inference_stats"]["success"]["count"] == 5
    assert report["every_statistics"] == list(load_registry().names)


async def test_an_input_image_goes_raw_and_the_answer_names_its_id(http_mesh: InProcessMesh):  # noqa: F811
    content, header_length = raw_inputs_body(
        {"id": "edit-1", "parameters": {"steps": 2, "strength": 0.5, "binary_data_output": True}},
        prompt=[b"a red fox"],
        image=[png_bytes(64, 64)],
    )
    async with http_client(http_mesh, KEY_A) as client:
        answer = await client.post(
            "/v2/models/flux-img2img-tiny/versions/1/infer",
            content=content,
            headers={"Inference-Header-Content-Length": header_length},
        )
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    document = json.loads(answer.content[:length])
    assert document["id"] == "edit-1" and document["model_name"] == "flux-img2img-tiny"
    output, seed = document["outputs"]
    media = answer.content[length : length + output["parameters"]["binary_data_size"]]
    (png,) = split_bytes_tensor(media, "output")
    assert Image.open(io.BytesIO(png)).size == (64, 64)
    assert seed["parameters"]["binary_data_size"] == 8


async def test_keys_probes_and_errors_in_the_protocols_shape(http_mesh: InProcessMesh):  # noqa: F811
    async with http_client(http_mesh) as client:
        assert (await client.get("/v2/health/live")).json() == {"live": True}
        assert (await client.get("/v2/health/ready")).status_code == 200
        no_key = await client.get("/v2")
        assert no_key.status_code == 401 and set(no_key.json()) == {"error"}
        unknown = await client.get("/v2/models/nope", headers=bearer(KEY_A))
        assert unknown.status_code == 404
        assert unknown.json()["error"].startswith("Request for unknown model: 'nope'")
        version = await client.get("/v2/models/flux-tiny/versions/2", headers=bearer(KEY_A))
        assert version.status_code == 404 and "version" in version.json()["error"]
        metadata = await client.get("/v2/models/flux-tiny", headers=bearer(KEY_A))
        assert metadata.json()["outputs"] == [
            {"name": "output", "datatype": "BYTES", "shape": [-1]},
            {"name": "seed", "datatype": "INT64", "shape": [-1]},
        ]
        not_ready = await client.get("/v2/models/nope/ready", headers=bearer(KEY_A))
        assert not_ready.status_code == 400 and not_ready.json() == {"name": "nope", "ready": False}
        bad = await client.post(
            "/v2/models/flux-tiny/infer",
            json={
                "inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": ["x"]}],
                "outputs": [{"name": "seed", "parameters": {"classification": 2}}],
            },
            headers=bearer(KEY_A),
        )
        assert bad.status_code == 400
        assert bad.json()["error"].startswith("outputs.seed.parameters.classification")
        gzipped = await client.post(
            "/v2/models/flux-tiny/infer",
            content=b"\x1f\x8b...",
            headers={**bearer(KEY_A), "content-encoding": "gzip"},
        )
        assert gzipped.status_code == 400
        assert gzipped.json()["error"].startswith("body: not valid gzip data")
        brotli = await client.post(
            "/v2/models/flux-tiny/infer",
            content=b"...",
            headers={**bearer(KEY_A), "content-encoding": "br"},
        )
        assert brotli.status_code == 415 and set(brotli.json()) == {"error"}
        # Loading is the workers' registry and residency, not a call: Triton's answer to an
        # extension it lacks.
        stray = await client.post("/v2/repository/models/flux-tiny/load", headers=bearer(KEY_A))
        assert stray.status_code == 501 and set(stray.json()) == {"error"}
        wrong_method = await client.get("/v2/repository/index", headers=bearer(KEY_A))
        assert wrong_method.status_code == 405 and set(wrong_method.json()) == {"error"}


async def test_a_client_that_leaves_cancels_its_jobs(http_mesh: InProcessMesh):  # noqa: F811
    # A model no worker of this mesh hosts: its jobs wait in the queue until cancelled.
    document = {
        "parameters": {"steps": 2, "binary_data_output": True},
        "inputs": [
            {"name": "prompt", "shape": [2], "datatype": "BYTES", "data": ["gone a", "gone b"]}
        ],
    }
    async with httpx.AsyncClient(base_url=base_url(http_mesh), timeout=1.5) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v2/models/sdxl-tiny/infer", json=document, headers=bearer(KEY_A))
    async with http_client(http_mesh, KEY_A) as client:
        for _ in range(100):
            page = await client.get("/v1/jobs", params={"limit": 10})
            mine = [j for j in page.json()["data"] if j["prompt"].startswith("gone ")]
            if len(mine) == 2 and all(j["state"] == "CANCELLED" for j in mine):
                break
            await asyncio.sleep(0.2)
    assert [j["state"] for j in mine] == ["CANCELLED", "CANCELLED"], mine


async def test_the_repository_index_and_model_configuration_over_rest(http_mesh: InProcessMesh):  # noqa: F811
    async with http_client(http_mesh) as client:
        index = await client.post("/v2/repository/index", headers=bearer(KEY_A))
        assert index.status_code == 200
        states = {m["name"]: (m["state"], m["reason"]) for m in index.json()}
        assert states["flux-tiny"] == ("READY", "")
        assert states["sdxl-tiny"] == ("UNAVAILABLE", "no live worker hosts it")
        ready = await client.post(
            "/v2/repository/index", json={"ready": True}, headers=bearer(KEY_A)
        )
        assert ready.status_code == 200 and ready.json()
        assert {m["state"] for m in ready.json()} == {"READY"}
        assert {m["name"] for m in ready.json()} < set(states)
        bad = await client.post(
            "/v2/repository/index", json={"ready": "yes"}, headers=bearer(KEY_A)
        )
        assert bad.status_code == 400 and bad.json()["error"].startswith("ready: expected")
        assert (await client.post("/v2/repository/index")).status_code == 401
        config = await client.get("/v2/models/flux-tiny/versions/1/config", headers=bearer(KEY_A))
        assert config.status_code == 200 and config.json()["max_batch_size"] == 0
        unknown = await client.get("/v2/models/nope/config", headers=bearer(KEY_A))
        assert unknown.status_code == 404 and set(unknown.json()) == {"error"}
        assert (await client.get("/v2/models/flux-tiny/config")).status_code == 401
