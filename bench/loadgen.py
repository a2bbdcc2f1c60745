"""The load generator: one process, one grpc.aio channel (or, for `--api openai`, an httpx
client per caller of the gateway's HTTP face), N concurrent callers; prints JSON.

closed: N workers each send their next request when the previous one ends, `--warmup`
requests first (not measured), then exactly `--requests` measured ones.
open: requests start at `--rate` per second whatever the answers, until stdin closes or
`--max-seconds` pass; every completion is reported with its time, so the caller can cut
the window it cares about. Times are time.monotonic(), which is system-wide on Linux.

    python -m bench.loadgen --target 127.0.0.1:50051 --model echo --concurrency 16 --requests 500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
import httpx

from mediamesh.common.generated.inference import grpc_service_pb2 as kserve_pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as kserve_grpc
from mediamesh.common.generated.v1 import common_pb2, gateway_pb2_grpc

Call = Callable[[int], Awaitable[str]]  # request index -> "" on success, else the error code
_MAX_MESSAGE = 64 * 1024 * 1024


@dataclass
class Records:
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # (start, end, ok, model) per finished request, for open-loop windows.
    finished: list[tuple[float, float, bool, str]] = field(default_factory=list)

    def add(self, start: float, end: float, error: str, model: str) -> None:
        if error:
            self.errors[error] += 1
        else:
            self.latencies_ms.append((end - start) * 1000.0)
        self.finished.append((round(start, 6), round(end, 6), not error, model))


def native_call(
    channel: grpc.aio.Channel,
    models: list[str],
    params: dict,
    priority: str,
    timeout_s: float,
    model_params: dict[str, dict] | None = None,
) -> Call:
    stub = gateway_pb2_grpc.GatewayStub(channel)
    level = common_pb2.Priority.Value(priority) if priority else 0
    # Per model, `params` with that model's own fields over them (e.g. long video jobs).
    by_model = {m: {**params, **(model_params or {}).get(m, {})} for m in models}

    async def call(index: int) -> str:
        model = models[index % len(models)]
        request = common_pb2.GenerateRequest(
            model=model, prompt=f"bench {index}", seed=index, **by_model[model]
        )
        request.priority = level
        try:
            async for event in stub.Generate(request, timeout=timeout_s):
                kind = event.WhichOneof("event")
                if kind == "result":
                    return ""
                if kind == "error":
                    return event.error.code or "ERROR"
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "NO_RESULT"

    return call


def openai_call(
    target: str, models: list[str], params: dict, priority: str, timeout_s: float
) -> tuple[Call, Callable[[], Awaitable[None]]]:
    """OpenAI's images.generate as its client sends it (JSON, `b64_json`), the mesh's own
    fields beside OpenAI's as the openai client's `extra_body` puts them; and what closes
    the connections. Each request in flight has a client (and a connection) of its own,
    kept for the next request: one shared client's connection pool took a whole core at 64
    callers (httpx), and the load generator, not the mesh, set the pace."""
    base = dict(params)
    if priority:
        base["priority"] = priority
    # Clients not in a request now, and every one made (as many as callers at once).
    idle: list[httpx.AsyncClient] = []
    made: list[httpx.AsyncClient] = []

    def client() -> httpx.AsyncClient:
        if idle:
            return idle.pop()
        made.append(httpx.AsyncClient(base_url=f"http://{target}", timeout=timeout_s))
        return made[-1]

    async def call(index: int) -> str:
        body = {
            "model": models[index % len(models)],
            "prompt": f"bench {index}",
            "response_format": "b64_json",
            **base,
            "seed": index,
        }
        own = client()
        try:
            answer = await own.post("/v1/images/generations", json=body)
        except httpx.HTTPError as exc:
            return type(exc).__name__
        finally:
            idle.append(own)
        return "" if answer.status_code == 200 else f"HTTP {answer.status_code}"

    async def close() -> None:
        await asyncio.gather(*(c.aclose() for c in made))

    return call, close


def kserve_call(
    channel: grpc.aio.Channel, models: list[str], params: dict, priority: str, timeout_s: float
) -> Call:
    stub = kserve_grpc.GRPCInferenceServiceStub(channel)
    base = dict(params)
    if priority:
        base["priority"] = priority

    async def call(index: int) -> str:
        request = kserve_pb.ModelInferRequest(model_name=models[index % len(models)])
        request.id = str(index)
        prompt = request.inputs.add(name="prompt", datatype="BYTES", shape=[1])
        prompt.contents.bytes_contents.append(f"bench {index}".encode())
        for name, value in {**base, "seed": index}.items():
            _set_parameter(request.parameters[name], value)
        try:
            await stub.ModelInfer(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return ""

    return call


def _set_parameter(parameter: kserve_pb.InferParameter, value: object) -> None:
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


async def closed_loop(call: Call, concurrency: int, requests: int, warmup: int) -> dict:
    async def drive(count: int, workers: int, records: Records | None, first: int) -> None:
        tickets = iter(range(first, first + count))

        async def worker() -> None:
            for index in tickets:
                start = time.monotonic()
                error = await call(index)
                if records is not None:
                    records.add(start, time.monotonic(), error, "")

        await asyncio.gather(*(worker() for _ in range(min(workers, count))))

    if warmup:
        await drive(warmup, concurrency, None, 1_000_000)
    records = Records()
    started = time.monotonic()
    await drive(requests, concurrency, records, 0)
    ended = time.monotonic()
    return _summary(records, concurrency, started, ended, finished=False)


async def open_loop(call: Call, models: list[str], rate: float, max_seconds: float) -> dict:
    records = Records()
    stop = _stdin_closed()
    pending: set[asyncio.Task] = set()

    async def one(index: int) -> None:
        start = time.monotonic()
        error = await call(index)
        records.add(start, time.monotonic(), error, models[index % len(models)])

    started = time.monotonic()
    index = 0
    while not stop.is_set() and time.monotonic() - started < max_seconds:
        task = asyncio.create_task(one(index))
        pending.add(task)
        task.add_done_callback(pending.discard)
        index += 1
        delay = started + index / rate - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
    ended = time.monotonic()
    unfinished = len(pending)
    for task in list(pending):
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    report = _summary(records, 0, started, ended, finished=True)
    report.update(issued=index, unfinished=unfinished, rate=rate)
    return report


def _stdin_closed() -> asyncio.Event:
    """Set when stdin closes: the caller ends the flood, or dies and so ends it anyway."""
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()

    def wait() -> None:
        sys.stdin.read()
        loop.call_soon_threadsafe(closed.set)

    # A daemon thread, not the loop's executor: a blocked read must not hold up exit.
    threading.Thread(target=wait, daemon=True).start()
    return closed


def _summary(
    records: Records, concurrency: int, started: float, ended: float, finished: bool
) -> dict:
    report = {
        "concurrency": concurrency,
        "requests": len(records.latencies_ms) + sum(records.errors.values()),
        "errors": sum(records.errors.values()),
        "error_codes": dict(records.errors),
        "started": started,
        "ended": ended,
        "duration_s": ended - started,
        "latencies_ms": [round(v, 3) for v in records.latencies_ms],
    }
    if finished:
        report["finished"] = records.finished
    return report


async def main_async(args: argparse.Namespace) -> dict:
    params = json.loads(args.params) if args.params else {}
    if args.api == "openai":
        call, close = openai_call(args.target, args.model, params, args.priority, args.timeout)
        try:
            report = await _levels(call, args)
        finally:
            await close()
        report.update(api=args.api, mode=args.mode, models=args.model, priority=args.priority)
        return report
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ("grpc.max_send_message_length", _MAX_MESSAGE),
    ]
    model_params = json.loads(args.model_params) if args.model_params else {}
    async with grpc.aio.insecure_channel(args.target, options=options) as channel:
        await asyncio.wait_for(channel.channel_ready(), 30)
        if args.api == "kserve":
            call = kserve_call(channel, args.model, params, args.priority, args.timeout)
        else:
            call = native_call(
                channel, args.model, params, args.priority, args.timeout, model_params
            )
        report = await _levels(call, args)
    report.update(api=args.api, mode=args.mode, models=args.model, priority=args.priority)
    return report


async def _levels(call: Call, args: argparse.Namespace) -> dict:
    if args.mode == "open":
        return await open_loop(call, args.model, args.rate, args.max_seconds)
    return await closed_loop(call, args.concurrency, args.requests, args.warmup)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument(
        "--target", required=True, help="gateway host:port (its HTTP port for --api openai)"
    )
    parser.add_argument("--model", action="append", required=True, help="repeat to mix models")
    parser.add_argument("--api", choices=["native", "kserve", "openai"], default="native")
    parser.add_argument("--mode", choices=["closed", "open"], default="closed")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--rate", type=float, default=1.0, help="open mode: requests per second")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="open mode: hard stop")
    parser.add_argument("--priority", default="", help="REALTIME, STANDARD or BATCH")
    parser.add_argument("--params", default="", help="JSON of GenerateRequest fields")
    parser.add_argument(
        "--model-params", default="", help="native: JSON {model: fields} over --params"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per-request seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    report = asyncio.run(main_async(parse_args(argv)))
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
