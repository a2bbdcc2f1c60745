"""`mediamesh simulate SCENARIO`: run a fleet and workload through the real scheduler core on a
virtual clock, or `--right-size` to find the cheapest fleet that meets an SLA target.

Writes DIR/sim-<scenario>.json and .png (DIR/sim-<scenario>-right-size.json when sizing)
and prints a summary: SLA attainment and wait/latency percentiles per modality, cost
against all-on-demand, and simulated jobs per wall-clock second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mediamesh.cli.arg_types import bounded
from mediamesh.common.errors import StartupError
from mediamesh.common.folders import writable_folder


def _fraction(text: str) -> float:
    """--sla-target: a fraction of jobs, in (0, 1], as the scenario's right_size.target."""
    value = bounded(float, 0.0, above=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be at most 1 (a fraction of jobs), not {text}")
    return value


def add_simulate_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = sub.add_parser(
        "simulate",
        help="simulate a fleet and workload against the real scheduler policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_argument(
        "scenario",
        nargs="?",
        default="small",
        help="scenario file (YAML or JSON) or a shipped one: small, fleet-1000 (default: small)",
    )
    simulate.add_argument(
        "--jobs",
        type=bounded(int, 1),
        default=None,
        help="arrivals to simulate, at least 1 (default: the file's workload.jobs)",
    )
    simulate.add_argument(
        "--devices",
        type=bounded(int, 1),
        default=None,
        help="scale the fleet to this many devices, at least 1",
    )
    simulate.add_argument(
        "--seed",
        type=bounded(int, 0),
        default=None,
        help="random seed, at least 0 (default: file's)",
    )
    simulate.add_argument(
        "--out", type=Path, default=Path("bench/results"), help="where results are written"
    )
    simulate.add_argument(
        "--right-size", action="store_true", help="search for the cheapest fleet meeting the SLA"
    )
    simulate.add_argument(
        "--sla-target",
        type=_fraction,
        default=None,
        help="right-size: fraction within SLA, above 0 and at most 1 (default: the file's, 0.99)",
    )
    simulate.add_argument(
        "--window-s",
        type=bounded(float, 0.0, above=True),
        default=None,
        help="right-size: seconds of arrivals per trial, above 0 (default: the file's)",
    )
    simulate.add_argument(
        "--dispatch-interval-s",
        type=bounded(float, 0.0),
        default=None,
        help="least seconds between scheduling passes (default: file's, 0 = every event)",
    )
    simulate.add_argument("--no-plot", action="store_true", help="skip the PNG")
    simulate.set_defaults(handler=_cmd_simulate)


def _flag_out_of_mode(args: argparse.Namespace) -> str | None:
    """Why a flag given does not apply to the mode chosen (None when all do): ignored, it
    would leave the caller believing the run used it."""
    if args.right_size:
        for flag, value in (("--jobs", args.jobs), ("--devices", args.devices)):
            if value is not None:
                return (
                    f"{flag} does not apply with --right-size, which sizes the fleet itself "
                    "over right_size.window_s (--window-s) of arrivals; leave it out"
                )
        return None
    for flag, value in (("--sla-target", args.sla_target), ("--window-s", args.window_s)):
        if value is not None:
            return f"{flag} applies only with --right-size; add --right-size or leave it out"
    return None


def _cmd_simulate(args: argparse.Namespace) -> int:
    from mediamesh.sim.scenario import ScenarioError, load_scenario

    refusal = _flag_out_of_mode(args)
    if refusal is not None:
        print(f"mediamesh simulate: {refusal}", file=sys.stderr)
        return 2
    try:
        # Before the run, which may take minutes, rather than a traceback at its end.
        writable_folder("--out", args.out)
    except StartupError as exc:
        print(f"mediamesh simulate: {exc}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
        if args.dispatch_interval_s is not None:
            scenario = scenario.model_copy(update={"dispatch_interval_s": args.dispatch_interval_s})
        if args.right_size:
            return _right_size(scenario, args)
        return _simulate(scenario, args)
    except (ScenarioError, ValueError) as exc:
        print(f"mediamesh simulate: {exc}", file=sys.stderr)
        return 2


def _simulate(scenario: object, args: argparse.Namespace) -> int:
    from mediamesh.sim.report import PlotUnavailable, pyplot, write_json, write_plot
    from mediamesh.sim.simulation import simulate

    if not args.no_plot:
        # Before the run, not after it: a long simulation should not end in a missing extra.
        try:
            pyplot()
        except PlotUnavailable as exc:
            print(f"mediamesh simulate: {exc}", file=sys.stderr)
            return 2
    result = simulate(scenario, jobs=args.jobs, devices=args.devices, seed=args.seed)  # type: ignore[arg-type]
    # Not with_suffix: a name's own dot (fleet-v1.5x) would be taken for an extension.
    stem = f"sim-{result.scenario}"
    json_path = args.out / f"{stem}.json"
    data = write_json(result, json_path)
    if not args.no_plot:
        write_plot(result, args.out / f"{stem}.png")
    print(_summary(data))
    print(f"results: {json_path}" + ("" if args.no_plot else " and .png"))
    unfinished = _unfinished(data)
    if unfinished:
        # The results are written either way (an overload scenario is worth its plot), but
        # a run that left jobs queued past drain_s did not serve its workload: a script
        # must not read it as one that did.
        drain_s = scenario.drain_s  # type: ignore[attr-defined]
        print(
            f"mediamesh simulate: {data['total']['unfinished']:,} jobs unfinished ({unfinished}):"
            f" still queued or running {drain_s:g} s after the last arrival (drain_s);"
            " their waits and latencies count as infinite (inf)",
            file=sys.stderr,
        )
        return 1
    return 0


def _unfinished(data: dict[str, Any]) -> str:
    """The jobs the run ended without, per modality (`image 2,473, audio 3`), or ""."""
    return ", ".join(
        f"{modality} {stats['unfinished']:,}"
        for modality, stats in data["by_modality"].items()
        if stats["unfinished"]
    )


def _right_size(scenario: object, args: argparse.Namespace) -> int:
    from mediamesh.sim.rightsize import Trial, right_size

    def progress(trial: Trial) -> None:
        verdict = "meets" if trial.meets else "misses"
        attainment = ", ".join(f"{m} {v:.3f}" for m, v in sorted(trial.attainment.items()))
        print(
            f"  {trial.device} x{trial.devices} (spot {trial.spot_share:.0%}): "
            f"${trial.cost_per_hour:,.2f}/h {verdict} [{attainment}]",
            file=sys.stderr,
        )

    result = right_size(
        scenario,  # type: ignore[arg-type]
        target=args.sla_target,
        window_s=args.window_s,
        seed=args.seed,
        progress=progress,
    )
    path = args.out / f"sim-{scenario.name}-right-size.json"  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    best = result.best
    if best is None:
        print(f"no fleet tried met {result.target:.1%} within SLA; see {path}")
        return 1
    print(
        f"cheapest fleet meeting {result.target:.1%} within SLA "
        f"({'/'.join(result.priorities)} jobs, {result.jobs:,} jobs over {result.window_s:.0f} s):"
        f"\n  {best.devices} x {best.device}: {best.on_demand} on-demand + {best.spot} spot, "
        f"${best.cost_per_hour:,.2f}/h"
    )
    for device, reason in result.skipped.items():
        print(f"  {device} skipped: {reason}")
    for trial in result.frontier:
        print(
            f"  smallest {trial.device} fleet at {trial.spot_share:.0%} spot: "
            f"{trial.devices} devices, ${trial.cost_per_hour:,.2f}/h"
        )
    print(f"results: {path}")
    return 0


def _fmt(value: float | None) -> str:
    """A percentile: `-` without jobs, `inf` when it reaches jobs that never ended."""
    if value is None:
        return "-"
    return "inf" if value == float("inf") else f"{value:.2f}"


def _summary(data: dict[str, Any]) -> str:
    lines = [
        f"{data['scenario']}: {data['jobs']:,} jobs, {data['simulated_seconds'] / 60:,.1f} "
        f"simulated minutes in {data['wall_seconds']:.1f} s "
        f"({data['jobs_per_wall_second']:,.0f} jobs/s)",
        f"{'':<22}{'jobs':>9}{'in SLA':>8}{'wait p50/p95/p99 s':>24}{'latency p50/p95/p99 s':>27}",
    ]
    rows = {**data["by_modality"], **data["by_modality_priority"]}
    for name, stats in rows.items():
        wait, latency = stats["wait_s"], stats["latency_s"]
        attainment = stats["sla_attainment"]
        lines.append(
            f"{name:<22}{stats['jobs']:>9,}"
            f"{'-' if attainment is None else f'{attainment:.1%}':>8}"
            f"{'/'.join(_fmt(wait[k]) for k in ('p50', 'p95', 'p99')):>24}"
            f"{'/'.join(_fmt(latency[k]) for k in ('p50', 'p95', 'p99')):>27}"
        )
    fleet = data["fleet"]
    lines.append(
        f"cost ${fleet['cost']:,.2f} (all on-demand ${fleet['on_demand_cost']:,.2f}, "
        f"saved {fleet['savings']:.1%}); utilization {fleet['utilization']:.1%}; "
        f"rejected {data['total']['rejected']:,}, unfinished {data['total']['unfinished']:,}"
    )
    return "\n".join(lines)
