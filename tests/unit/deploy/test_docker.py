"""deploy/docker: both images run as non-root with a `mediamesh healthcheck` HEALTHCHECK."""

from __future__ import annotations

import re

import pytest
from deploy_support import DEPLOY, ROOT, dockerfile_instructions

DOCKER = DEPLOY / "docker"
IMAGES = {"Dockerfile": "python:3.11-slim", "Dockerfile.cuda": "nvidia/cuda:"}


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_dockerfile(name):
    path = DOCKER / name
    instructions = dockerfile_instructions(path)
    words = [w for w, _ in instructions]
    args = dict(rest.split("=", 1) for w, rest in instructions if w == "ARG" and "=" in rest)
    base_images = [
        args.get(rest.split()[0].strip("${}"), rest.split()[0])
        for w, rest in instructions
        if w == "FROM"
    ]
    assert any(IMAGES[name] in image for image in base_images), base_images

    final_stage = words[len(words) - 1 - words[::-1].index("FROM") :]
    users = [rest for w, rest in instructions[len(words) - len(final_stage) :] if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), f"{name}: runs as root"

    (healthcheck,) = [rest for w, rest in instructions if w == "HEALTHCHECK"]
    assert "CMD mediamesh healthcheck --address" in healthcheck

    (entrypoint,) = [rest for w, rest in instructions if w == "ENTRYPOINT"]
    assert entrypoint == '["mediamesh"]'

    runs = " ".join(rest for w, rest in instructions if w == "RUN")
    assert "download.pytorch.org/whl/" in " ".join(args.values())
    assert '--index-url "${TORCH_INDEX_URL}"' in runs
    if name == "Dockerfile":
        assert args["TORCH_INDEX_URL"].endswith("/whl/cpu")
    # constraints.txt pins a local torch build (+cpu) the image's own index/version would
    # conflict with: the project is installed against the constraints without it.
    pins = [
        line
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("torch==")
    ]
    if any("+" in pin for pin in pins):
        assert "grep -v -E '^torch==' constraints.txt" in runs, f"{name}: {pins} kept"
        # The project itself (".", or with extras: ".[deepspeed]"), against those constraints.
        assert re.search(r"pip install -c /tmp/constraints\.txt (\.|\"\.\[[\w,-]+\]\")", runs), name


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_build_context_is_the_repo_root(name):
    """Built with `-f deploy/docker/<name> .`; the ignore file keeps the context small but must
    keep everything `pip install .` needs."""
    ignore = (DOCKER / f"{name}.dockerignore").read_text().split()
    for needed in ("services", "protos", "pyproject.toml", "constraints.txt"):
        assert needed not in ignore
        assert (ROOT / needed).exists()
    for heavy in (".git", ".venv", ".mediamesh"):
        assert heavy in ignore
    assert f"docker build -f deploy/docker/{name} " in (DOCKER / name).read_text()
