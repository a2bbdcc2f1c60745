"""Validation of context parallelism's degrees (`parallelism: {mode: context, ...}`).

Kept torch-free so the registry can refuse a bad entry before any worker starts.
"""

from __future__ import annotations


def check_context_degrees(mode: str, ulysses: int, ring: int, devices: int) -> None:
    """ValueError naming the field when the degrees cannot form one context group.

    `devices` is the number of listed devices; 0 means one rank per degree on the worker's
    own device."""
    if mode != "context":
        return  # set outside context mode, they are refused with the other modes' fields
    ranks = ulysses * ring
    if ranks < 2:
        raise ValueError(
            "parallelism.ulysses: context mode needs ulysses * ring >= 2 ranks "
            f"(got ulysses={ulysses}, ring={ring})"
        )
    if devices and devices != ranks:
        raise ValueError(
            f"parallelism.devices: {devices} devices listed, but ulysses * ring = "
            f"{ulysses} * {ring} = {ranks} ranks need one each"
        )
