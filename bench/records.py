"""Benchmark records: measured on a clean tree, and compared with the last committed ones.

A result names the commit it measured, which identifies the code only if the tree had no
uncommitted changes; `require_clean_tree` refuses to run otherwise (unless the developer
asks for it, and then the result says `git.dirty: true`). `compare_with_committed` prints
each figure of a result's summary next to the same figure in the result file as committed
at HEAD, so that a change in performance shows in the run that caused it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench.common import ROOT, changes_outside


class DirtyTree(Exception):
    """The working tree has uncommitted changes: a result would not identify its code."""


def require_clean_tree(allow_dirty: bool, out_dir: Path) -> None:
    """Raise DirtyTree when the tree has changes outside `out_dir`, unless `allow_dirty`."""
    changed = changes_outside(out_dir)
    if changed and not allow_dirty:
        listed = ", ".join(line[3:] for line in changed[:5])
        raise DirtyTree(
            f"{len(changed)} uncommitted change(s) ({listed}{', ...' if len(changed) > 5 else ''}):"
            " commit them first so that the results identify the code they measured, or pass"
            " --allow-dirty for a development run (its results say git.dirty: true)"
        )


def committed_record(path: Path) -> dict[str, Any] | None:
    """The result file at `path` as committed at HEAD; None if it is not committed."""
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    done = subprocess.run(
        ["git", "--no-optional-locks", "show", f"HEAD:{relative.as_posix()}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    try:
        record = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def figures(summary: Any, prefix: str = "") -> dict[str, float]:
    """The numbers of a summary, flattened to dotted names (booleans are not figures)."""
    found: dict[str, float] = {}
    if isinstance(summary, dict):
        for key, value in summary.items():
            found.update(figures(value, f"{prefix}{key}."))
    elif isinstance(summary, int | float) and not isinstance(summary, bool):
        found[prefix.rstrip(".")] = float(summary)
    return found


def comparison_lines(name: str, new: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """One line per figure of `new`'s summary: its value, then the committed one."""
    before = figures(old.get("summary", {})) if old else {}
    commit = (old or {}).get("git", {}).get("commit", "")[:10] or "none"
    lines = []
    for key, value in figures(new.get("summary", {})).items():
        previous = before.get(key)
        if previous is None:
            lines.append(f"{name} {key}: {value:g} (committed {commit}: -)")
            continue
        change = f", {100 * (value - previous) / abs(previous):+.0f}%" if previous else ""
        lines.append(f"{name} {key}: {value:g} (committed {commit}: {previous:g}{change})")
    return lines


def compare_with_committed(name: str, path: Path) -> list[str]:
    """`comparison_lines` for the result just written at `path`."""
    new = json.loads(path.read_text())
    return comparison_lines(name, new, committed_record(path))
