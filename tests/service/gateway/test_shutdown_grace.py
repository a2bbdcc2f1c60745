"""The gateway's stop honours gateway.shutdown_grace_s: the grace in-flight calls and streams
get after SIGTERM, on the gRPC and HTTP listeners at once (deploy/k8s/base/gateway.yaml
budgets its terminationGracePeriodSeconds around it)."""

from __future__ import annotations

import asyncio
import time

import pytest

from mediamesh.cli import services
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, MeshConfig
from mediamesh.gateway.main import GatewayService, start_gateway

# Nothing listens there: the gateway's channel to the scheduler is lazy.
UNUSED_SCHEDULER = "127.0.0.1:44917"


def _config(**gateway: object) -> MeshConfig:
    settings = GatewaySettings(
        port=0,
        metrics_port=None,
        http_port=0,
        scheduler_address=UNUSED_SCHEDULER,
        **gateway,  # type: ignore[arg-type]
    )
    return MeshConfig(gateway=settings, workers=[])


def _record_stops(gateway: GatewayService, hold_s: float) -> dict[str, tuple[float, float]]:
    """Replace both listeners' stop with one that records (grace, start time) and takes
    `hold_s`, as a listener waiting out an open stream does; the real stops run after."""
    seen: dict[str, tuple[float, float]] = {}
    assert gateway.http is not None
    for name, listener in (("grpc", gateway.server), ("http", gateway.http)):
        real = listener.stop

        async def stop(grace_s: float, name: str = name, real=real) -> None:
            seen[name] = (grace_s, time.monotonic())
            await asyncio.sleep(hold_s)
            await real(0)

        listener.stop = stop  # type: ignore[method-assign]
    return seen


def test_the_default_grace_fits_the_k8s_budget():
    # Long enough for a download or an upload in flight; see test_k8s.py for the budget.
    assert 10 <= GatewaySettings().shutdown_grace_s < 30


async def test_stop_gives_both_listeners_the_configured_grace():
    gateway = await start_gateway(_config(shutdown_grace_s=7.5), load_registry())
    assert gateway.shutdown_grace_s == 7.5
    seen = _record_stops(gateway, hold_s=0.3)
    started = time.monotonic()
    await gateway.stop()
    took = time.monotonic() - started
    assert {name: grace for name, (grace, _) in seen.items()} == {"grpc": 7.5, "http": 7.5}
    # Both listeners wait out the grace together, not one after the other (which would
    # make the whole stop twice the grace and overrun the pod's termination period).
    assert abs(seen["grpc"][1] - seen["http"][1]) < 0.2
    assert took < 0.3 * 2, f"stop took {took:.2f} s: listeners stopped one after the other"


async def test_an_explicit_grace_still_wins():
    gateway = await start_gateway(_config(shutdown_grace_s=7.5), load_registry())
    seen = _record_stops(gateway, hold_s=0)
    await gateway.stop(0)
    assert {name: grace for name, (grace, _) in seen.items()} == {"grpc": 0, "http": 0}


def test_the_gateway_command_stops_with_the_configured_grace(monkeypatch: pytest.MonkeyPatch):
    """`mediamesh gateway` on SIGTERM: stop(gateway.shutdown_grace_s)."""
    stopped: list[float | None] = []

    class FakeGateway:
        async def stop(self, grace_s: float | None = None) -> None:
            stopped.append(grace_s)

    async def fake_start(config, registry, *, after_exposure_check=None):
        return FakeGateway()

    def signalled() -> asyncio.Event:
        event = asyncio.Event()
        event.set()
        return event

    monkeypatch.setattr("mediamesh.gateway.main.start_gateway", fake_start)
    monkeypatch.setattr(services, "stop_event_on_signals", signalled)
    monkeypatch.setattr(services, "_prepare", lambda config, service: None)
    services.run_gateway(_config(shutdown_grace_s=12.0), load_registry())
    assert stopped == [12.0]
