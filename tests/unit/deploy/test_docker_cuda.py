"""deploy/docker/Dockerfile.cuda: what a GPU worker needs at run time beyond the wheels.

torch.compile's default backend (inductor, the worker's `gpu.compile`) has Triton compile a
C launcher per kernel when it first runs: a C compiler, the C library's headers and Python.h
must be in the final image, not only in the build stage. DeepSpeed, for tensor-parallel
models, comes with the project's `deepspeed` extra.
"""

from __future__ import annotations

import re
import shlex
import tomllib

from tests.unit.deploy.deploy_support import DEPLOY, ROOT, dockerfile_instructions

DOCKERFILE = DEPLOY / "docker" / "Dockerfile.cuda"
COMPILERS = {"gcc", "clang", "build-essential"}


def stages() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(alias, base, instructions) per stage; the alias is "" for an unnamed stage."""
    instructions = dockerfile_instructions(DOCKERFILE)
    args = dict(rest.split("=", 1) for w, rest in instructions if w == "ARG" and "=" in rest)
    found: list[tuple[str, str, list[tuple[str, str]]]] = []
    for word, rest in instructions:
        if word == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m[0]), parts[0])
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
            found.append((alias, base, []))
        elif found:
            found[-1][2].append((word, rest))
    return found


def final_image_runs() -> list[str]:
    """The RUN lines of the final stage and of the stages it is built FROM, in order."""
    by_alias = {alias: (base, body) for alias, base, body in stages() if alias}
    _, base, body = stages()[-1]
    chain = [body]
    while base in by_alias:
        base, parent = by_alias[base]
        chain.insert(0, parent)
    return [rest for body in chain for word, rest in body if word == "RUN"]


def apt_packages(runs: list[str]) -> set[str]:
    packages: set[str] = set()
    for run in runs:
        for command in re.split(r"&&|;", run):
            words = shlex.split(command)
            if words[:2] == ["apt-get", "install"]:
                packages |= {w for w in words[2:] if not w.startswith("-")}
    return packages


def venv_python() -> str:
    """The interpreter the image's venv is made with (python3.11 -m venv ...)."""
    runs = " ".join(rest for _, _, body in stages() for word, rest in body if word == "RUN")
    match = re.search(r"(python3\.\d+) -m venv", runs)
    assert match, "no `python3.X -m venv` in the CUDA Dockerfile"
    return match[1]


def test_final_image_has_a_c_compiler_for_triton():
    packages = apt_packages(final_image_runs())
    assert packages & COMPILERS or any(re.fullmatch(r"gcc-\d+", p) for p in packages), packages
    # --no-install-recommends leaves out gcc's libc6-dev (stdlib.h), unless build-essential.
    assert {"libc6-dev", "build-essential"} & packages, packages


def test_final_image_has_the_python_headers_of_its_interpreter():
    python = venv_python()
    assert f"{python}-dev" in apt_packages(final_image_runs()), python


def test_project_installed_with_the_deepspeed_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "deepspeed" in extras
    runs = " ".join(rest for _, _, body in stages() for word, rest in body if word == "RUN")
    assert re.search(r"pip install -c /tmp/constraints\.txt \"\.\[([\w,-]*,)?deepspeed", runs), runs
