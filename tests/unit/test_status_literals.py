"""Product code names status codes through `StatusCode`, never as bare strings.

A literal such as "NOT_FOUND" escapes the per-transport mappings and breaks silently on a typo.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mediamesh.common.errors import StatusCode

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "services"
CODE_NAMES = frozenset(code.value for code in StatusCode)
# The enum itself and the mapping modules are where the names are meant to be.
MAPPING_MODULES = frozenset(
    {
        "common/errors.py",
        "common/api/status.py",
        "common/http_status.py",
        "gateway/core/kserve_status.py",
    }
)
# Job and model states that share a name with a status code: a different vocabulary, not a
# status (Triton's repository index names a model that cannot serve UNAVAILABLE).
JOB_STATE_NAMES = {
    "common/job_states.py": {"CANCELLED"},
    "scheduler/core/jobs.py": {"CANCELLED"},
    "sdk/types.py": {"CANCELLED"},
    "gateway/http/openai_videos.py": {"CANCELLED"},
    "gateway/core/model_config.py": {"UNAVAILABLE"},
}


def status_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant in `source` that is exactly a status code name."""
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and node.value in CODE_NAMES
    )  # fmt: skip


def test_the_scan_finds_a_bare_status_name():
    source = 'def f(job):\n    return Rejection("NOT_FOUND", f"no {job}")\nX = "NOT FOUND"\n'
    assert status_literals(source) == [(2, "NOT_FOUND")]


def test_no_product_module_spells_a_status_name():
    modules = [
        path
        for path in PRODUCT.rglob("*.py")
        if "generated" not in path.parts and "__pycache__" not in path.parts
    ]
    assert len(modules) > 50, "the product tree was not found"
    found = []
    for path in modules:
        relative = path.relative_to(PRODUCT).as_posix()
        if relative in MAPPING_MODULES:
            continue
        allowed = JOB_STATE_NAMES.get(relative, set())
        for line, name in status_literals(path.read_text()):
            if name not in allowed:
                found.append(f"services/{relative}:{line}: {name!r}, use StatusCode.{name}")
    assert not found, "\n".join(found)
