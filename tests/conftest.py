"""Shared fixtures: the tiny models, built once per machine into .mediamesh/models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / ".mediamesh" / "models"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# As `mediamesh` does (cli/main.py): ffmpeg spawned, never forked from a process with gRPC.
os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """Every buildable default model, built once (idempotent: skipped when complete)."""
    from mediamesh.worker.models.build import build_models

    build_models(MODELS_DIR)
    return MODELS_DIR
