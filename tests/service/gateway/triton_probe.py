"""Drive a gateway with unmodified tritonclient and print what it saw as JSON.

Runs as its own process (`python -m tests.service.gateway.triton_probe URL SCENARIO...`):
tritonclient's generated module and the gateway's `inference` stubs declare the same protobuf
names and cannot be imported into one process.
"""

from __future__ import annotations

import argparse
import io
import json
import queue
import sys
from collections.abc import Callable

import numpy as np
import tritonclient.grpc as triton
from PIL import Image
from tritonclient.utils import InferenceServerException


def _error(exc: InferenceServerException) -> dict:
    return {"status": exc.status(), "message": exc.message()}


def _refusal(call: Callable[[], object]) -> dict | None:
    """The error `call` raised, or None if it succeeded."""
    try:
        call()
    except InferenceServerException as exc:
        return _error(exc)
    return None


def _prompts(*texts: str) -> triton.InferInput:
    tensor = triton.InferInput("prompt", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
    return tensor


def _images(result: triton.InferResult) -> list[list[int]]:
    return [list(Image.open(io.BytesIO(bytes(e))).size) for e in result.as_numpy("output")]


def health(client: triton.InferenceServerClient, headers: dict) -> dict:
    server = client.get_server_metadata(headers=headers)
    model = client.get_model_metadata("flux-tiny", headers=headers)
    return {
        "live": client.is_server_live(headers=headers),
        "ready": client.is_server_ready(headers=headers),
        "echo_ready": client.is_model_ready("echo", headers=headers),
        "unknown_ready": client.is_model_ready("nope", headers=headers),
        "server": {"name": server.name, "extensions": list(server.extensions)},
        "inputs": [[t.name, t.datatype, list(t.shape)] for t in model.inputs],
        "outputs": [[t.name, t.datatype, list(t.shape)] for t in model.outputs],
        "versions": list(model.versions),
    }


def infer(client: triton.InferenceServerClient, headers: dict) -> dict:
    result = client.infer(
        "flux-tiny",
        [_prompts("a red fox", "a blue bird", "a green frog")],
        parameters={"steps": 2, "seed": 7, "width": 48, "height": 32},
        headers=headers,
        client_timeout=120,
    )
    output = result.get_output("output")
    return {
        "sizes": _images(result),
        "seeds": result.as_numpy("seed").tolist(),
        "content_type": output.parameters["content_type"].string_param,
        "shape": list(output.shape),
    }


def stream(client: triton.InferenceServerClient, headers: dict) -> dict:
    responses: queue.Queue = queue.Queue()
    client.start_stream(lambda result, error: responses.put((result, error)), headers=headers)
    client.async_stream_infer(
        "flux-tiny",
        [_prompts("a fox", "a cat")],
        request_id="s1",
        parameters={"steps": 3, "seed": 1},
    )
    client.async_stream_infer(
        "flux-tiny", [_prompts("x")], request_id="bad", parameters={"steps": 99}
    )
    seen: dict = {"progress": [], "final": None, "errors": []}
    while seen["final"] is None or not seen["errors"]:
        result, error = responses.get(timeout=120)
        if error is not None:
            seen["errors"].append(error.message())
            continue
        response = result.get_response()
        params = response.parameters
        if params["triton_final_response"].bool_param:
            seen["final"] = {"id": response.id, "sizes": _images(result)}
        else:
            seen["progress"].append(
                [
                    params["element"].int64_param,
                    params["step"].int64_param,
                    params["total_steps"].int64_param,
                ]
            )
    client.stop_stream()
    return seen


def errors(client: triton.InferenceServerClient, headers: dict) -> dict:
    attempts: dict[str, Callable[[], object]] = {
        "unknown_model": lambda: client.infer("nope", [_prompts("x")], headers=headers),
        "bad_steps": lambda: client.infer(
            "flux-tiny", [_prompts("x")], parameters={"steps": 99}, headers=headers
        ),
        "too_many": lambda: client.infer("flux-tiny", [_prompts(*"abcde")], headers=headers),
        "no_key": lambda: client.infer("echo", [_prompts("x")]),
        "unknown_metadata": lambda: client.get_model_metadata("nope", headers=headers),
    }
    return {name: _refusal(attempt) for name, attempt in attempts.items()}


def tensor_parameters(client: triton.InferenceServerClient, headers: dict) -> dict:
    """Every output the metadata lists, asked for by name; then tensor parameters the client
    sets for shared memory and classification, and one of its own, each on its own call."""
    listed = [t.name for t in client.get_model_metadata("flux-tiny", headers=headers).outputs]
    result = client.infer(
        "flux-tiny",
        [_prompts("a fox")],
        outputs=[triton.InferRequestedOutput(name) for name in listed],
        parameters={"steps": 1, "seed": 5},
        headers=headers,
        client_timeout=120,
    )
    answered = [o.name for o in result.get_response().outputs]

    shared_output = triton.InferRequestedOutput("output")
    shared_output.set_shared_memory("o0", 1024)
    shared_input = triton.InferInput("prompt", [1], "BYTES")
    shared_input.set_shared_memory("i0", 16)
    tagged_input = _prompts("x")
    tagged_input._get_tensor().parameters["foo"].string_param = "bar"
    calls: dict[str, Callable[[], object]] = {
        "classification": lambda: client.infer(
            "flux-tiny",
            [_prompts("x")],
            outputs=[triton.InferRequestedOutput("seed", class_count=2)],
            headers=headers,
        ),
        "shared_output": lambda: client.infer(
            "flux-tiny", [_prompts("x")], outputs=[shared_output], headers=headers
        ),
        "shared_input": lambda: client.infer("flux-tiny", [shared_input], headers=headers),
        "input_parameter": lambda: client.infer("flux-tiny", [tagged_input], headers=headers),
    }
    refused = {name: _refusal(call) for name, call in calls.items()}
    return {"listed": listed, "answered": answered, "refused": refused}


def repository(client: triton.InferenceServerClient, headers: dict) -> dict:
    config = client.get_model_config("flux-tiny", headers=headers, as_json=True)
    index = client.get_model_repository_index(headers=headers, as_json=True)
    unknown = _refusal(lambda: client.get_model_config("nope", headers=headers))
    return {"config": config["config"], "index": index.get("models", []), "unknown": unknown}


def statistics(client: triton.InferenceServerClient, headers: dict) -> dict:
    """The statistics extension after an echo job of this caller's, as the client's JSON."""
    client.infer("echo", [_prompts("counted")], headers=headers)
    one = client.get_inference_statistics("echo", headers=headers, as_json=True)
    every = client.get_inference_statistics(headers=headers, as_json=True)
    unknown = _refusal(lambda: client.get_inference_statistics("nope", headers=headers))
    return {
        "echo": one["model_stats"],
        "every": [model["name"] for model in every["model_stats"]],
        "unknown": unknown,
    }


def echo(client: triton.InferenceServerClient, headers: dict) -> dict:
    result = client.infer("echo", [_prompts("hello")], headers=headers, priority=3)
    return {"sizes": _images(result)}


SCENARIOS = {
    "health": health,
    "infer": infer,
    "stream": stream,
    "errors": errors,
    "echo": echo,
    "tensor_parameters": tensor_parameters,
    "repository": repository,
    "statistics": statistics,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    parser.add_argument("--api-key")
    parser.add_argument("--root-cert", help="use TLS, trusting this certificate")
    args = parser.parse_args()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    client = triton.InferenceServerClient(
        args.url, ssl=bool(args.root_cert), root_certificates=args.root_cert
    )
    report = {}
    try:
        for name in args.scenarios:
            try:
                report[name] = SCENARIOS[name](client, headers)
            except InferenceServerException as exc:
                report[name] = {"failed": _error(exc)}
    finally:
        client.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
