"""The committed stubs are what `make protos` would write, and every rpc and field is documented."""

from __future__ import annotations

import filecmp
import re
from pathlib import Path

from mediamesh.common import protogen

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "services" / "common" / "generated"


def test_committed_stubs_are_fresh(tmp_path: Path):
    protogen.generate(tmp_path)
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    committed = sorted(
        p.relative_to(GENERATED) for p in GENERATED.rglob("*.py*") if "__pycache__" not in p.parts
    )
    assert fresh == committed, "run `make protos`: the set of generated files changed"
    stale = [str(p) for p in fresh if not filecmp.cmp(tmp_path / p, GENERATED / p, shallow=False)]
    assert not stale, f"run `make protos`: stale stubs {stale}"


_DECLARATION = re.compile(
    r"^\s*(rpc\s+\w+|(optional\s+|repeated\s+)?[\w.<>, ]+\s+\w+\s*=\s*\d+;|\w+\s*=\s*\d+;)"
)


def test_every_rpc_field_and_enum_value_has_a_comment():
    undocumented = []
    for proto in protogen.proto_files():
        lines = proto.read_text().splitlines()
        for number, line in enumerate(lines):
            if not _DECLARATION.match(line) or line.strip().startswith(("//", "option")):
                continue
            previous = lines[number - 1].strip() if number else ""
            if not previous.startswith("//") and "//" not in line:
                undocumented.append(f"{proto.name}:{number + 1}: {line.strip()}")
    assert not undocumented, "\n".join(undocumented)
