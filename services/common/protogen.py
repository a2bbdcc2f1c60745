"""Generate the Python protobuf and gRPC stubs from protos/ (run via `make protos`).

protoc names a generated module after its .proto path, so `mediamesh/v1/common.proto`
imports as `mediamesh.v1.common_pb2` and the KServe file as `inference.grpc_service_pb2`.
Installed that way they would claim two more top-level names, one of them (`inference`)
taken on PyPI. The stubs live inside the product instead, as `mediamesh.common.generated.v1`
and `mediamesh.common.generated.inference`, and their imports of each other are rewritten to
match. Only Python module paths change: the proto packages, the descriptors' file names and
so every wire name stay as they were.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import cast

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "protos"
PACKAGE = "mediamesh.common.generated"
# protoc's own package folder -> where it lives under the generated package.
_RELOCATED = {"mediamesh/v1": "v1", "inference": "inference"}
_IMPORT = re.compile(r"^(from|import) (mediamesh\.v1|inference)\b", re.MULTILINE)


def proto_files() -> list[Path]:
    """Every .proto file under protos/, in a stable order."""
    return sorted(PROTO_ROOT.rglob("*.proto"))


def _relocate_imports(source: str) -> str:
    def replace(match: re.Match[str]) -> str:
        keyword, module = match.groups()
        return f"{keyword} {PACKAGE}.{module.removeprefix('mediamesh.')}"

    return _IMPORT.sub(replace, source)


def _protoc() -> ModuleType:
    # grpcio-tools is a development dependency (the `dev` extra): the product only ever
    # imports the committed stubs.
    try:
        from grpc_tools import protoc
    except ImportError:
        raise SystemExit(
            "generating stubs needs grpcio-tools: pip install 'mediamesh[dev]'"
        ) from None
    return cast(ModuleType, protoc)


def generate(out_dir: Path) -> None:
    """Write the stubs for every proto under `out_dir`, relocated into the product package."""
    protoc = _protoc()
    out_dir.mkdir(parents=True, exist_ok=True)
    include = Path(str(protoc.__file__)).parent / "_proto"
    with tempfile.TemporaryDirectory() as staging_name:
        staging = Path(staging_name)
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={staging}",
            f"--pyi_out={staging}",
            f"--grpc_python_out={staging}",
            *(str(p.relative_to(PROTO_ROOT)) for p in proto_files()),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        for source_folder, target_name in _RELOCATED.items():
            target = out_dir / target_name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for module in sorted((staging / source_folder).glob("*.py*")):
                (target / module.name).write_text(_relocate_imports(module.read_text()))
            (target / "__init__.py").touch()
        (out_dir / "__init__.py").touch()


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
