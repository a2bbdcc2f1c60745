"""Shared fixtures: the tiny models, built once per machine into .mediamesh/models."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / ".mediamesh" / "models"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """Every buildable default model, built once (idempotent: skipped when complete)."""
    from services.worker.models.build import build_models

    build_models(MODELS_DIR)
    return MODELS_DIR
