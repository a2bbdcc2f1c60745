"""Generate the Python protobuf and gRPC stubs from protos/ (run via `make protos`)."""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "protos"


def proto_files() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # Every folder of generated modules is a package, so setuptools installs it.
    for folder in {p.parent for p in out_dir.rglob("*_pb2.py")}:
        while folder != out_dir:
            (folder / "__init__.py").touch()
            folder = folder.parent


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
