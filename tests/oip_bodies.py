"""Open Inference Protocol REST request bodies for tests, with BYTES inputs sent raw (the
binary tensor data extension) after the JSON object."""

from __future__ import annotations

import json

from mediamesh.gateway.core.tensors import join_bytes_tensor


def raw_inputs_body(document: dict, **inputs: list[bytes]) -> tuple[bytes, str]:
    """The body of `document` with each of `inputs` (name: its elements) as a raw BYTES
    input of shape [len], in that order; and its Inference-Header-Content-Length."""
    raws = [join_bytes_tensor(elements) for elements in inputs.values()]
    tensors = [
        {
            "name": name,
            "shape": [len(elements)],
            "datatype": "BYTES",
            "parameters": {"binary_data_size": len(raw)},
        }
        for (name, elements), raw in zip(inputs.items(), raws, strict=True)
    ]
    head = json.dumps({**document, "inputs": tensors}).encode()
    return head + b"".join(raws), str(len(head))
