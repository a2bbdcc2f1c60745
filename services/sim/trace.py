"""Arrival traces: JSON lines {"t": s, "model": ..., "priority": ..., "tenant": ...}.

Read and checked row by row when the scenario loads, so a bad row is refused naming its file,
line and field (exit 2) rather than failing, or being miscounted, in the middle of a run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from mediamesh.common.settings import PriorityName
from mediamesh.sim.errors import ScenarioError

PRIORITY_NAMES: tuple[str, ...] = get_args(PriorityName)


@dataclass(frozen=True)
class TraceRow:
    line: int
    t: float
    model: str
    priority: str
    tenant: str


def read_trace(path: Path, limit: int | None = None) -> list[TraceRow]:
    """The rows of the trace at `path` in file order (the first `limit` when given)."""
    try:
        with path.open() as lines:
            rows: list[TraceRow] = []
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                rows.append(_row(line, number, f"{path}:{number}"))
                if limit is not None and len(rows) >= limit:
                    break
    except OSError as exc:
        raise ScenarioError(f"workload.arrivals.path: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"workload.arrivals.path: {path} is not UTF-8 text: {exc}") from None
    if not rows:
        # No arrivals: a run would report nothing at all as if it had served a workload.
        raise ScenarioError(f"workload.arrivals.path: {path} has no rows; a trace needs one")
    return rows


def _row(line: str, number: int, where: str) -> TraceRow:
    try:
        # NaN and Infinity are not JSON: a trace that holds them would end in a NaN cost.
        raw = json.loads(line, parse_constant=_not_json)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ScenarioError(f"{where}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a JSON object, not {type(raw).__name__}")
    return TraceRow(
        line=number,
        t=_seconds(raw, where),
        model=_text(raw, "model", where, None),
        priority=_priority(raw, where),
        tenant=_text(raw, "tenant", where, "default"),
    )


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _seconds(raw: dict[str, Any], where: str) -> float:
    if "t" not in raw:
        raise ScenarioError(f"{where}: t: required (seconds from the start of the trace)")
    t = raw["t"]
    # bool is an int to Python, but `true` is no time.
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise ScenarioError(f"{where}: t: {t!r} is not a time; give a number of seconds, 0 or more")
    return float(t)


def _text(raw: dict[str, Any], field: str, where: str, default: str | None) -> str:
    value = raw.get(field, default)
    if value is None:
        raise ScenarioError(f"{where}: {field}: required")
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: {field}: {value!r} is not a name; give a non-empty string")
    return value


def _priority(raw: dict[str, Any], where: str) -> str:
    priority = raw.get("priority", "STANDARD")
    if priority not in PRIORITY_NAMES:
        raise ScenarioError(
            f"{where}: priority: unknown value {priority!r}; use {', '.join(PRIORITY_NAMES)}"
        )
    return str(priority)
