"""Checks of a parsed scenario against its registry and fleet, run when it loads: every model
it names exists and can run somewhere, a trace's rows are usable, and `workload.params` holds
values the mesh would accept for that model (the mesh's own checks, common/params.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ModelSpec
from mediamesh.sim.errors import ScenarioError
from mediamesh.sim.trace import read_trace

if TYPE_CHECKING:
    from mediamesh.sim.scenario import Deployment, Scenario

# The generation parameters a workload may set per model: those of a request that change
# what a job costs or how it batches. Values are numbers (Workload.params).
WHOLE_PARAMS = ("steps", "width", "height", "num_frames", "output_quality", "fps")
FRACTIONAL_PARAMS = ("guidance_scale", "duration_s")
SETTABLE_PARAMS = (*WHOLE_PARAMS, *FRACTIONAL_PARAMS)


def check_scenario(scenario: Scenario, origin: str) -> None:
    specs = scenario.specs()
    for model in scenario.workload.models:
        if model not in specs:
            raise ScenarioError(f"{origin}: workload model {model!r} is not in the registry")
    for name, device in scenario.device_types.items():
        unknown = set(device.step_s_per_unit) - set(specs)
        if unknown:
            raise ScenarioError(f"{origin}: device {name!r} has speeds for unknown {unknown}")
    unservable = unservable_models(scenario, scenario.fleet, specs)
    if unservable:
        raise ScenarioError(f"{origin}: {unservable}")
    models = list(scenario.workload.models)
    path = scenario.workload.arrivals.path
    if scenario.workload.arrivals.process == "trace" and path is not None:
        models = _check_trace_models(scenario, path, specs, origin)
    _check_params(scenario, specs, models, origin)


def _check_trace_models(
    scenario: Scenario, path: Path, specs: dict[str, ModelSpec], origin: str
) -> list[str]:
    """The workload's models and the trace's; ScenarioError naming the first row whose model
    is not in the registry, or that no deployment could run."""
    first_line: dict[str, int] = {}
    for row in read_trace(path):
        first_line.setdefault(row.model, row.line)
    for model, line in first_line.items():
        if model not in specs:
            raise ScenarioError(
                f"{path}:{line}: model: {model!r} is not in the registry; "
                f"known: {', '.join(sorted(specs))}"
            )
    unservable = unservable_models(scenario, scenario.fleet, specs, first_line, f"models of {path}")
    if unservable:
        raise ScenarioError(f"{origin}: {unservable}")
    return list(dict.fromkeys([*scenario.workload.models, *first_line]))


def _check_params(
    scenario: Scenario, specs: dict[str, ModelSpec], models: list[str], origin: str
) -> None:
    for model, overrides in scenario.workload.params.items():
        field = f"workload.params.{model}"
        if model not in models:
            raise ScenarioError(
                f"{origin}: {field}: {model!r} is not a model of the workload "
                f"(workload.models or the trace: {', '.join(models)})"
            )
        for name, value in overrides.items():
            if name not in SETTABLE_PARAMS:
                raise ScenarioError(
                    f"{origin}: {field}.{name}: not a parameter the simulator sets; "
                    f"use {', '.join(SETTABLE_PARAMS)}"
                )
            if not math.isfinite(value):
                raise ScenarioError(f"{origin}: {field}.{name}: {value} must be a finite number")
            if name in WHOLE_PARAMS and value != int(value):
                raise ScenarioError(f"{origin}: {field}.{name}: {value} must be a whole number")
        try:
            resolve(specs[model], _request(model, overrides))
        except InvalidArgument as exc:
            # The mesh's message starts with the field it names: `steps: 1000 is out of range`.
            raise ScenarioError(f"{origin}: {field}.{exc}") from None


def _request(model: str, overrides: dict[str, float | int]) -> RequestFields:
    """A request for `model` that sets what the workload sets, as a caller of the mesh would."""

    def whole(name: str) -> int | None:
        value = overrides.get(name)
        return None if value is None else int(value)

    def fractional(name: str) -> float | None:
        value = overrides.get(name)
        return None if value is None else float(value)

    return RequestFields(
        model=model,
        prompt="simulated",
        steps=whole("steps"),
        width=whole("width"),
        height=whole("height"),
        num_frames=whole("num_frames"),
        output_quality=whole("output_quality"),
        fps=whole("fps"),
        guidance_scale=fractional("guidance_scale"),
        duration_s=fractional("duration_s"),
    )


def unservable_models(
    scenario: Scenario,
    fleet: list[Deployment],
    specs: dict[str, ModelSpec],
    models: Iterable[str] | None = None,
    source: str = "workload.models",
) -> str | None:
    """Why some of `models` (the workload's by default) can never run on `fleet` (None when
    every one can): no deployment with a replica, or an autoscaler, has a device type with a
    speed for it, in its modality. Such jobs would only wait to the end of the run, and be
    reported as unfinished rather than as the scenario's mistake."""
    served: set[str] = set()
    for deployment in fleet:
        if not deployment.can_serve:
            continue
        for model in scenario.device_types[deployment.device].step_s_per_unit:
            modality = specs[model].modality
            if deployment.modality is None or deployment.modality == modality:
                served.add(model)
    wanted = scenario.workload.models if models is None else models
    missing = [m for m in wanted if m not in served]
    if not missing:
        return None
    return (
        f"{source} {missing} cannot run: no deployment in `fleet` with a replica or "
        "an autoscale has a device type with a speed for them "
        "(device_types.<device>.step_s_per_unit) in its modality"
    )
