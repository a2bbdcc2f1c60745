"""The README's example registry entries load as written, once `source` names a model here."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from mediamesh.common.registry import load_registry, parse_registry
from tests.conftest import ROOT

# The sections whose ```yaml blocks are registry entries, each block a list of them.
SECTIONS = {
    "parallelism": "## Models and parallelism",
    "gpu-options": "## GPU options, step caches, warm-up and out-of-memory",
}
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.DOTALL | re.MULTILINE)


def section_snippets(heading: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return _YAML_BLOCK.findall(text[start : end if end != -1 else None])


def snippets() -> list[Any]:
    found = [
        pytest.param(block, id=f"{section}-{index}")
        for section, heading in SECTIONS.items()
        for index, block in enumerate(section_snippets(heading))
    ]
    assert len(found) >= len(SECTIONS)
    return found


@pytest.mark.parametrize("block", snippets())
def test_a_readme_snippet_loads_with_only_its_source_changed(block: str) -> None:
    # Each entry takes the source of the shipped tiny model of its pipeline, so the test
    # changes nothing the entry's author would have to write.
    tiny_sources = {spec.pipeline: spec.source for spec in load_registry().models}
    entries = yaml.safe_load(block)
    assert isinstance(entries, list) and entries
    local = [{**entry, "source": tiny_sources[entry["pipeline"]]} for entry in entries]
    registry = parse_registry({"models": local}, "README.md")
    assert registry.names == [entry["name"] for entry in entries]
