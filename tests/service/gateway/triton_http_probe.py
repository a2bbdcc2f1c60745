"""Drive the gateway's HTTP/REST face with unmodified tritonclient.http; print what it saw
as JSON.

Runs as its own process (`python -m tests.service.gateway.triton_http_probe HOST:PORT KEY`):
tritonclient.http brings gevent, which is kept out of the test process.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable

import numpy as np
import tritonclient.http as triton
from PIL import Image
from tritonclient.utils import InferenceServerException


def _prompts(*texts: str, binary: bool = True) -> triton.InferInput:
    tensor = triton.InferInput("prompt", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_), binary)
    return tensor


def main(url: str, key: str) -> dict:
    client = triton.InferenceServerClient(url)
    # A copy per call: infer() adds its Inference-Header-Content-Length to the dict it is
    # given, which a second call would then send with the wrong length.
    key_header = {"authorization": f"Bearer {key}"}

    def headers() -> dict[str, str]:
        return dict(key_header)

    server = client.get_server_metadata(headers=headers())
    model = client.get_model_metadata("flux-tiny", headers=headers())
    report: dict = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("flux-tiny", headers=headers()),
        "unknown_ready": client.is_model_ready("nope", headers=headers()),
        "server": {"name": server["name"], "extensions": server["extensions"]},
        "inputs": [[t["name"], t["datatype"], t["shape"]] for t in model["inputs"]],
        "versions": model["versions"],
        "config": client.get_model_config("flux-tiny", headers=headers()),
        "index": client.get_model_repository_index(headers=headers()),
    }
    # No outputs named: the client asks for every output raw (binary_data_output).
    for name, binary in (("infer", True), ("infer_json_prompts", False)):
        result = client.infer(
            "flux-tiny",
            [_prompts("a fox", "a cat", binary=binary)],
            parameters={"steps": 1, "seed": 7, "width": 48},
            headers=headers(),
            request_id=name,
        )
        report[name] = {
            "id": result.get_response()["id"],
            "sizes": [
                list(Image.open(io.BytesIO(bytes(e))).size) for e in result.as_numpy("output")
            ],
            "seeds": result.as_numpy("seed").tolist(),
            "content_type": result.get_output("output")["parameters"]["content_type"],
        }
    # The seed alone, as JSON.
    result = client.infer(
        "flux-tiny",
        [_prompts("a bird")],
        outputs=[triton.InferRequestedOutput("seed", binary_data=False)],
        parameters={"steps": 1, "seed": 11},
        headers=headers(),
    )
    report["seed_as_json"] = result.get_output("seed")
    errors: dict[str, dict[str, str] | None] = {}
    calls: dict[str, Callable[[], object]] = {
        "unknown_model": lambda: client.infer("nope", [_prompts("x")], headers=headers()),
        "bad_steps": lambda: client.infer(
            "flux-tiny", [_prompts("x")], parameters={"steps": 99}, headers=headers()
        ),
        "media_as_json": lambda: client.infer(
            "flux-tiny",
            [_prompts("x")],
            outputs=[triton.InferRequestedOutput("output", binary_data=False)],
            headers=headers(),
        ),
        "no_key": lambda: client.infer("flux-tiny", [_prompts("x")]),
        "unknown_config": lambda: client.get_model_config("nope", headers=headers()),
        "unknown_statistics": lambda: client.get_inference_statistics("nope", headers=headers()),
    }
    for name, call in calls.items():
        try:
            call()
        except InferenceServerException as exc:
            errors[name] = {"status": exc.status(), "message": exc.message()}
        else:
            errors[name] = None
    report["errors"] = errors
    report["statistics"] = client.get_inference_statistics("flux-tiny", "1", headers=headers())
    every = client.get_inference_statistics(headers=headers())
    report["every_statistics"] = [model["name"] for model in every["model_stats"]]
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
