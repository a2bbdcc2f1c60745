"""Plain-text tables of a MeshStatus for `mediamesh status` and `mediamesh top`."""

from __future__ import annotations

import math
from typing import Any


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, *body])


def render(status: Any) -> str:
    queues = [
        [
            q.name,
            str(q.depth),
            " ".join(f"{k[0]}{v}" for k, v in sorted(q.depth_by_priority.items()) if v) or "-",
            f"{q.work_s:.1f}",
            f"{q.oldest_wait_s:.1f}",
            f"{q.sla_s:.0f}",
            str(q.running),
            str(q.paused),
        ]
        for q in status.queues
    ]
    workers = [
        [
            w.worker_id,
            w.pool,
            ",".join(w.devices),
            ",".join(f"{m} (warming)" if m in w.warming else m for m in w.models),
            f"{w.load_s:.1f}",
            w.state,
            _adapters(w),
        ]
        for w in status.workers
    ]
    cost = status.cost
    jobs = " ".join(f"{k}={v}" for k, v in sorted(status.jobs_by_state.items())) or "none"
    held = sorted(status.result_bytes_by_tenant.items(), key=lambda item: (-item[1], item[0]))
    results = " ".join(f"{t}={bytes_text(n)}" for t, n in held[:RESULT_TENANTS_SHOWN]) or "none"
    if len(held) > RESULT_TENANTS_SHOWN:
        results += f" (and {len(held) - RESULT_TENANTS_SHOWN} more tenants)"
    return "\n".join(
        [
            "QUEUES",
            _table(
                [
                    "queue",
                    "depth",
                    "by priority",
                    "work s",
                    "oldest wait s",
                    "sla s",
                    "running",
                    "paused",
                ],
                queues,
            ),
            "",
            "WORKERS",
            _table(
                ["worker", "pool", "devices", "models", "load s", "state", "adapters"],
                workers,
            ),
            "",
            *_models(status),
            f"JOBS  {jobs}",
            f"RESULTS HELD  {results}",
            f"COST  {money_text(cost.cost)} so far; "
            f"{money_text(cost.on_demand_cost)} if all on-demand",
        ]
    )


# "unsuccessful", not "failed": the count is the statistics extension's `fail`, which, as
# Triton's does, takes in every job that ended without a result (cancelled and expired too),
# and would read as more failures than the JOBS line's FAILED.
_MODEL_HEADERS = [
    "model",
    "succeeded",
    "unsuccessful",
    "batches",
    "mean batch",
    "latency ms",
    "queue ms",
    "input ms",
    "denoise ms",
    "output ms",
]


def _mean_ms(durations: list[Any]) -> str:
    """The mean of durations given as (count, ns) messages, in milliseconds; "-" for none."""
    count = sum(d.count for d in durations)
    return f"{sum(d.ns for d in durations) / count / 1e6:.1f}" if count else "-"


def _models(status: Any) -> list[str]:
    """The MODELS table and a blank line: each model that ran since the scheduler started.
    Latency and queue are per job; input, denoise and output per batch."""
    rows = []
    for m in status.models:
        batches = m.batch_sizes
        jobs_in_batches = sum(b.batch_size * b.compute_infer.count for b in batches)
        rows.append(
            [
                m.model,
                str(m.inference_count),
                str(m.fail.count),
                str(m.execution_count),
                f"{jobs_in_batches / m.execution_count:.1f}" if m.execution_count else "-",
                _mean_ms([m.success]),
                _mean_ms([m.queue]),
                *(_mean_ms([getattr(b, phase) for b in batches]) for phase in _PHASES),
            ]
        )
    return ["MODELS", _table(_MODEL_HEADERS, rows), ""] if rows else []


_PHASES = ("compute_input", "compute_infer", "compute_output")

# Tenants named on the RESULTS HELD line, those holding the most first.
RESULT_TENANTS_SHOWN = 10


def bytes_text(count: int) -> str:
    """A byte count in the largest binary unit that keeps it at 1 or more, one decimal."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def money_text(amount: float) -> str:
    """Two decimals, or three significant digits for less than a cent (a short local run
    costs fractions of one, which two or four decimals round away), never in e-notation."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"{amount:.2f}"
    decimals = 2 - math.floor(math.log10(abs(amount)))
    return f"{amount:.{decimals}f}"


def _adapters(worker: Any) -> str:
    """The LoRA adapters a worker has loaded, as model:name,name per model; "-" for none."""
    loaded = [
        f"{m.model}:{','.join(a.name for a in m.adapters)}"
        for m in getattr(worker, "adapters", ())
        if m.adapters
    ]
    return " ".join(loaded) or "-"
