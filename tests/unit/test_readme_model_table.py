"""The README's model table agrees with the registry and with ListModels' preemption."""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.preemption import preemption_of
from mediamesh.common.registry import MODEL_FIELDS, load_registry
from tests.conftest import ROOT
from tests.e2e.test_families import FAMILIES

HEADER = "| model | pipeline | accepted fields | output formats | after preemption | previews |"


def table_rows() -> dict[str, list[str]]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_e2e_family_is_in_the_table_as_it_behaves(models_dir: Path) -> None:
    rows = table_rows()
    registry = load_registry()
    for name, resumes in FAMILIES.items():
        spec = registry.get(name)
        assert spec is not None and name in rows, name
        _, pipeline, fields, _formats, preemption, previews, _notes = rows[name]
        assert pipeline.startswith(f"`{spec.pipeline}`"), name
        assert preemption.startswith("resumes" if resumes else "restarts"), name
        assert preemption_of(spec, models_dir) == ("resume" if resumes else "restart"), name
        assert previews == ("yes" if spec.preview.enabled else "no"), name
        if not fields.startswith(("+", "as ")):
            listed = [f.strip() for f in fields.split(",")]
            assert listed == [f for f in MODEL_FIELDS if f in spec.accepted_fields], name
