"""Tiny scenarios for the simulator's tests: a few devices, the default registry's models."""

from __future__ import annotations

import copy

from mediamesh.sim.scenario import Scenario, parse_scenario

BASE: dict = {
    "name": "tiny",
    "seed": 3,
    "startup_s": 5.0,
    "drain_s": 600.0,
    "scheduler": {
        "queues": {
            "image": {"sla_s": 10},
            "video": {"sla_s": 120},
            "audio": {"sla_s": 30},
        },
        "placement": {
            "REALTIME": {"prefer": "on-demand", "allow": ["on-demand"]},
            "STANDARD": {"prefer": "on-demand", "allow": ["on-demand"]},
            "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 5},
        },
    },
    "device_types": {
        "gpu": {
            "price_per_hour": {"on-demand": 2.0, "spot": 0.5},
            "step_s_per_unit": {"flux-tiny": 20.0, "flux-small": 8.0, "stable-audio-tiny": 0.1},
        }
    },
    "fleet": [
        {"name": "od", "device": "gpu", "pool": "on-demand", "replicas": 3},
        {"name": "spot", "device": "gpu", "pool": "spot", "replicas": 2},
    ],
    "workload": {
        "jobs": 500,
        "arrivals": {"process": "poisson", "rate_per_s": 6},
        "models": {"flux-tiny": 2, "flux-small": 1, "stable-audio-tiny": 1},
        "priorities": {"STANDARD": 2, "BATCH": 1},
        "tenants": {"a": {"share": 2}, "b": {"share": 1}},
    },
}


def _merge(base: dict, overrides: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def tiny(**overrides: object) -> Scenario:
    """The base scenario with nested overrides (dicts merge, anything else replaces)."""
    return parse_scenario(_merge(BASE, overrides), "tiny test scenario")
