from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.worker.models.build import COMPLETE_MARKER, build_models


def _weights(model_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(model_dir)): p.read_bytes() for p in model_dir.rglob("*.safetensors")}


def test_build_is_deterministic_and_skips_complete_models(tmp_path, models_dir) -> None:
    (again,) = build_models(tmp_path, ["flux-tiny", "echo"])
    assert again == tmp_path / "flux-tiny"
    assert _weights(again) == _weights(models_dir / "flux-tiny")
    marker = again / COMPLETE_MARKER
    stamp = marker.stat().st_mtime_ns
    build_models(tmp_path, ["flux-tiny"])
    assert marker.stat().st_mtime_ns == stamp


def test_an_unfinished_build_is_redone(tmp_path) -> None:
    broken = tmp_path / "flux-tiny"
    broken.mkdir()
    (broken / "junk").write_text("half written")
    build_models(tmp_path, ["flux-tiny"])
    assert (broken / COMPLETE_MARKER).is_file() and not (broken / "junk").exists()
    assert (broken / "tokenizer" / "tokenizer.json").is_file()
    assert (broken / "tokenizer_2" / "tokenizer.json").is_file()


def test_unknown_names_are_an_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="no builder for flux-huge"):
        build_models(tmp_path, ["flux-huge"])
