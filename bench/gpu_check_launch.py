"""`make gpu-check` on a bare CUDA machine: the wheels it lacks, and the stand-ins it needs.

A lent GPU machine has no package index and no network: its image holds Python 3.12, a CUDA
build of torch and many common packages (DEVICE_IMAGE), but not all of mediamesh's runtime
dependencies. Here, `make gpu-wheels` (the `wheels` command) downloads exactly those it
lacks, for CPython 3.12 on manylinux x86-64, pinned to this virtual environment's versions,
into .whl/ (ignored by git; the device call carries it). There, `bash scripts/gpu_check.sh`
installs them into a folder on PYTHONPATH, runs `stand-ins` and `check` from here, builds
flux-tiny and runs `python -m bench.gpu_check`.

    python -m bench.gpu_check_launch wheels [--dest .whl] [--python-version 3.12]
    python -m bench.gpu_check_launch stand-ins --site /tmp/site
    python -m bench.gpu_check_launch check

`stand-ins` and `check` run on the device before anything is installed there: this module
imports nothing but the standard library at module level.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# What the lent machines' image ('cuda') holds, as the device notes listed it on 2026-11-17
# (torch 2.11.0+cu130, transformers 5.17.0, huggingface_hub 1.33.0, numpy 2.5.2, ...).
# A dependency found here is not carried, nor are its own dependencies followed: the image's
# version brings what it needs.
_IMAGE_PACKAGES = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
    diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
    frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
    meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
    narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
    nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
    onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
    prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
    pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
    sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
    statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
    typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
"""
DEVICE_IMAGE = frozenset(_IMAGE_PACKAGES.split())
# In the image, but at versions nobody has read there, and mediamesh needs a floor: carried
# anyway (a folder on PYTHONPATH comes before the image's site-packages).
CARRIED_OVER_IMAGE = {
    # The generated *_pb2_grpc.py refuse a grpcio older than the grpcio-tools that wrote them.
    "grpcio": "the generated stubs need grpcio >= 1.81.1",
    # The generated *_pb2.py refuse a protobuf runtime older than their gencode (6.33).
    "protobuf": "the generated stubs need protobuf >= 6.33.5, < 7",
    "typing-extensions": "pydantic-core needs a recent typing-extensions",
}
# Runtime dependencies `make gpu-check` does not use, left behind for their size. A module
# the worker imports at start-up gets a stand-in (`stand-ins`) that fails when used.
LEFT_BEHIND = {
    # 36 MiB (FFmpeg inside); worker/models/encode.py imports it for video results only.
    "av": "PyAV encodes video results only; gpu-check serves images",
    # 5.6 MiB; imported only with scheduler.artifacts.backend s3.
    "obstore": "the S3 artifact store only",
}
STAND_INS = {"av": "av"}  # distribution: the module the mesh imports at start-up
# A share of the 64 MiB a device call may carry; the repository itself takes about 4.
MAX_BYTES = 40 * 2**20
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# What `check` imports: the modules gpu_check, `mediamesh up` and the load generator load.
CHECK_MODULES = (
    "torch",
    "diffusers",
    "transformers",
    "google.protobuf",
    "grpc",
    "pydantic",
    "mediamesh.cli.main",
    "mediamesh.gateway.main",
    "mediamesh.scheduler.main",
    "mediamesh.worker.main",
    "mediamesh.worker.models.pipeline_host",
    "bench.gpu_check",
    "bench.launcher",
    "bench.loadgen",
)
CHECK_VERSIONS = (
    "torch",
    "triton",
    "diffusers",
    "transformers",
    "huggingface-hub",
    "accelerate",
    "grpcio",
    "protobuf",
    "pydantic",
    "numpy",
)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def carried(
    root: str = "mediamesh",
    distribution: Callable[
        [str], importlib.metadata.Distribution
    ] = importlib.metadata.distribution,
) -> dict[str, str]:
    """{name: version} of the distributions to carry: mediamesh's runtime dependencies (no
    extras) and theirs, as installed here, less the image's and the ones left behind."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    seen: set[str] = set()
    pending = [(root, frozenset[str]())]
    while pending:
        name, extras = pending.pop()
        key = canonical(name)
        if key in seen or key in LEFT_BEHIND:
            continue
        seen.add(key)
        is_root = key == canonical(root)
        if not is_root and key in DEVICE_IMAGE and key not in CARRIED_OVER_IMAGE:
            continue
        dist = distribution(name)
        if not is_root:
            found[key] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            wanted = extras or frozenset({""})
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in wanted):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return dict(sorted(found.items()))


def wheel_key(path: Path) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name."""
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def download(pins: dict[str, str], dest: Path, python_version: str) -> list[Path]:
    """pip download --no-deps of exactly `pins`, binary only, for CPython `python_version`
    on x86-64 Linux; any other wheel in `dest` is removed (two versions stop the install)."""
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", python_version]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    argv += ["-d", str(dest), *(f"{name}=={version}" for name, version in pins.items())]
    subprocess.run(argv, check=True)
    wanted = {(name, version) for name, version in pins.items()}
    kept = []
    for path in sorted(dest.glob("*.whl")):
        if wheel_key(path) in wanted:
            kept.append(path)
        else:
            path.unlink()
    missing = wanted - {wheel_key(p) for p in kept}
    if missing:
        raise SystemExit(f"no wheel downloaded for {sorted(missing)}")
    return kept


def wheels_command(args: argparse.Namespace) -> int:
    pins = carried()
    wheels = download(pins, args.dest, args.python_version)
    total = 0
    for path in wheels:
        size = path.stat().st_size
        total += size
        print(f"{size / 2**20:8.2f} MiB  {path.name}")
    print(f"{total / 2**20:8.2f} MiB  total, {len(wheels)} wheels in {args.dest}")
    for name, why in LEFT_BEHIND.items():
        print(f"left behind: {name} ({why})")
    if total > MAX_BYTES:
        print(f"over the {MAX_BYTES / 2**20:.0f} MiB budget for a device call", file=sys.stderr)
        return 1
    return 0


def stand_in_source(module: str, why: str) -> str:
    return (
        f'"""Stand-in for {module}, not carried to this machine: {why}."""\n\n\n'
        "def __getattr__(name):\n"
        f"    raise ModuleNotFoundError({module!r} + ' is not installed here ({why})')\n"
    )


def write_stand_ins(
    site: Path, find: Callable[[str], Any] = importlib.util.find_spec
) -> list[Path]:
    """A package in `site` for each left-behind module the mesh imports at start-up that
    cannot be imported here: importing it works, using it raises ModuleNotFoundError."""
    written = []
    for distribution, module in STAND_INS.items():
        if find(module) is not None:
            continue
        package = site / module
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(stand_in_source(module, LEFT_BEHIND[distribution]))
        written.append(package)
    return written


def stand_ins_command(args: argparse.Namespace) -> int:
    for package in write_stand_ins(args.site):
        print(f"stand-in: {package}")
    return 0


def check_command(args: argparse.Namespace) -> int:
    """Imports what the check loads, then prints versions and where each came from."""
    failed = 0
    for module in CHECK_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:
            failed += 1
            print(f"import {module}: {type(exc).__name__}: {exc}", file=sys.stderr)
    for name in CHECK_VERSIONS:
        try:
            dist = importlib.metadata.distribution(name)
            print(f"{name} {dist.version} ({dist.locate_file('')})")
        except importlib.metadata.PackageNotFoundError:
            print(f"{name} absent")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check_launch", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    wheels = commands.add_parser("wheels", help="download the wheels a bare machine lacks")
    wheels.add_argument("--dest", type=Path, default=Path(".whl"))
    wheels.add_argument("--python-version", default="3.12", help="the device's CPython")
    wheels.set_defaults(run=wheels_command)
    stand_ins = commands.add_parser("stand-ins", help="stand-ins for left-behind modules")
    stand_ins.add_argument("--site", type=Path, required=True)
    stand_ins.set_defaults(run=stand_ins_command)
    check = commands.add_parser("check", help="import what the check loads; print versions")
    check.set_defaults(run=check_command)
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
