"""Where a REALTIME job's time goes, alone and under the priority benchmark's BATCH flood.

`python -m bench.realtime_timeline [--requests 100] [--rate 40]`

Starts the priority benchmark's mesh, sends REALTIME flux-tiny jobs one at a time through
the native Generate stream, and notes when each event reached the client: queued, the
dispatched notice, each step, the result. Then the same under an open-loop BATCH flood.
It prints the median and p99 of each mark, and the slowest jobs' timelines, so that a
tail can be told apart: waiting for a device (queued -> dispatched), waiting for a paused
batch's step boundary (dispatched -> step 1), slower steps (CPU contention), or the way
back (last step -> result). This is how the checkpoint written on the device's thread at
every pause was found (README, Performance).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import grpc

from bench.common import start_loadgen, stop_loadgen
from bench.launcher import running_mesh
from bench.priority import FLOOD_MODEL_PARAMS, FLOOD_MODELS, REALTIME_MODEL, SCHEDULER, WORKERS
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc

Timeline = dict[str, float]


async def realtime_timelines(gateway: str, requests: int) -> list[Timeline]:
    """Milliseconds from sending each request to each of its events reaching the client."""
    timelines: list[Timeline] = []
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        for index in range(requests):
            request = common_pb2.GenerateRequest(
                model=REALTIME_MODEL,
                prompt=f"realtime {index}",
                seed=index,
                priority=common_pb2.REALTIME,
            )
            started = time.monotonic()
            marks: Timeline = {}
            async for event in stub.Generate(request, timeout=120):
                at = 1000 * (time.monotonic() - started)
                kind = event.WhichOneof("event")
                if kind == "notice":
                    marks.setdefault(event.notice.kind, at)
                elif kind == "progress":
                    marks.setdefault(f"step {event.progress.step}", at)
                elif kind is not None:
                    marks.setdefault(kind, at)
            timelines.append(marks)
    return timelines


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def describe(name: str, timelines: list[Timeline], slowest: int) -> None:
    marks = {mark for timeline in timelines for mark in timeline}
    order = sorted(marks, key=lambda m: statistics.median(t[m] for t in timelines if m in t))
    print(f"{name}: mark  p50 ms  p99 ms")
    for mark in order:
        values = [t[mark] for t in timelines if mark in t]
        print(f"  {mark:<12} {_quantile(values, 0.5):>8} {_quantile(values, 0.99):>8}")
    for timeline in sorted(timelines, key=lambda t: -t.get("result", 0.0))[:slowest]:
        print("  slow:", {mark: round(at, 1) for mark, at in timeline.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rate", type=float, default=40.0, help="BATCH flood, requests/s")
    parser.add_argument("--slowest", type=int, default=5)
    args = parser.parse_args()
    with running_mesh(WORKERS, SCHEDULER) as mesh:
        alone = asyncio.run(realtime_timelines(mesh.gateway, args.requests))
        flood = start_loadgen(
            mesh.gateway,
            FLOOD_MODELS,
            mode="open",
            rate=args.rate,
            priority="BATCH",
            max_seconds=900,
            model_params=FLOOD_MODEL_PARAMS,
        )
        try:
            time.sleep(3.0)  # a standing queue first
            loaded = asyncio.run(realtime_timelines(mesh.gateway, args.requests))
        finally:
            stop_loadgen(flood)
    describe("alone", alone, args.slowest)
    describe("under the flood", loaded, args.slowest)


if __name__ == "__main__":
    main()
