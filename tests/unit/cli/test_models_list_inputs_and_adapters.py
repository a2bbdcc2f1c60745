"""`mediamesh models list` shows what each model takes besides its fields: its input images
and its LoRA adapters, "-" where it has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.main import build_parser
from mediamesh.cli.models_commands import MODEL_COLUMNS, model_rows
from mediamesh.common.registry import load_registry


def test_rows_carry_inputs_and_adapters(tmp_path: Path) -> None:
    rows = {
        row[0]: dict(zip(MODEL_COLUMNS, row, strict=True))
        for row in model_rows(load_registry(), tmp_path)
    }
    assert rows["sdxl-inpaint-tiny"]["inputs"] == "image,mask_image"
    assert rows["cogvideox-i2v-tiny"]["inputs"] == "image"
    assert rows["flux-tiny"]["inputs"] == "-"
    assert rows["flux-tiny"]["adapters"] == "style,style2"
    assert rows["wan-tiny"]["adapters"] == "-"


def test_the_printed_table_has_the_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mesh.yaml"
    config.write_text(f"models_dir: {tmp_path / 'models'}\n")
    args = build_parser().parse_args(["models", "list", "--config", str(config)])
    assert args.handler(args) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["model", "pipeline", "accepted", "fields"]
    assert "inputs" in header.split() and header.split()[-1] == "adapters"
    inpaint = next(line for line in lines if line.startswith("sdxl-inpaint-tiny "))
    assert "image,mask_image" in inpaint.split()
    flux = next(line for line in lines if line.startswith("flux-tiny "))
    assert flux.split()[-1] == "style,style2"
