"""What one gRPC call per request costs, against one long-lived stream that carries them all.

`python -m bench.grpc_hops [--requests 20000] [--rounds 2]`

A server process and this client, both grpc.aio on uvloop over loopback, trade one small
request for two small answers (what a job's hop in the mesh carries when nobody wants its
progress: the queued state and the final event). Two ways:

- `call`: a server-streaming call per request, as the gateway opens `SubmitAndWatch` and the
  scheduler opens `RunBatch` today;
- `stream`: one bidirectional stream for every request, answers matched by order, as a
  multiplexed gateway-to-scheduler link would be.

It prints requests/s, the p50 latency and the CPU of each end per request, at concurrency 1
and 64, for each round. This is the measurement behind the README's estimate of what
multiplexing the mesh's hops would save.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import psutil
import uvloop
from grpc_health.v1 import health_pb2

# Any small message does: the health check's, so that nothing here needs generated stubs.
Request = health_pb2.HealthCheckRequest
Answer = health_pb2.HealthCheckResponse
_SERVICE = "bench.Hops"
_FIRST, _LAST = 1, 2


def _serialize(message: Request | Answer) -> bytes:
    return message.SerializeToString()


async def _per_call(request: Request, context: grpc.aio.ServicerContext) -> AsyncIterator[Answer]:
    yield Answer(status=_FIRST)
    yield Answer(status=_LAST)


async def _one_stream(
    requests: AsyncIterator[Request], context: grpc.aio.ServicerContext
) -> AsyncIterator[Answer]:
    async for _ in requests:
        yield Answer(status=_FIRST)
        yield Answer(status=_LAST)


def _serve(ports: multiprocessing.Queue) -> None:
    async def main() -> None:
        server = grpc.aio.server()
        handlers = {
            "Call": grpc.unary_stream_rpc_method_handler(
                _per_call, request_deserializer=Request.FromString, response_serializer=_serialize
            ),
            "Stream": grpc.stream_stream_rpc_method_handler(
                _one_stream, request_deserializer=Request.FromString, response_serializer=_serialize
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    uvloop.run(main())


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _calls(channel: grpc.aio.Channel) -> Callable[[], Awaitable[None]]:
    call = channel.unary_stream(
        f"/{_SERVICE}/Call", request_serializer=_serialize, response_deserializer=Answer.FromString
    )

    async def one() -> None:
        async for _ in call(Request()):
            pass

    return one


class _OneStream:
    """Every request on one bidirectional stream; the server answers in request order, so
    the oldest waiter owns the next final answer."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        open_stream = channel.stream_stream(
            f"/{_SERVICE}/Stream",
            request_serializer=_serialize,
            response_deserializer=Answer.FromString,
        )
        self._stream = open_stream()
        self._waiters: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()
        self._outgoing: asyncio.Queue[Request] = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._write())]

    async def _read(self) -> None:
        async for answer in self._stream:
            if answer.status == _LAST:
                self._waiters.get_nowait().set_result(None)

    async def _write(self) -> None:
        # One writer: grpc.aio allows one write in flight per call.
        while True:
            await self._stream.write(await self._outgoing.get())

    async def one(self) -> None:
        answered = asyncio.get_running_loop().create_future()
        self._waiters.put_nowait(answered)
        self._outgoing.put_nowait(Request())
        await answered


async def _level(
    port: int, mode: str, concurrency: int, requests: int, server_cpu_s: Callable[[], float]
) -> dict[str, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        one = await _calls(channel) if mode == "call" else _OneStream(channel).one
        latencies: list[float] = []

        async def client(count: int) -> None:
            for _ in range(count):
                started = time.perf_counter()
                await one()
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(client(20) for _ in range(concurrency)))  # warm-up
        latencies.clear()
        per_client = max(requests // concurrency, 1)
        cpu_before, server_before = _own_cpu_s(), server_cpu_s()
        started = time.perf_counter()
        await asyncio.gather(*(client(per_client) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu, server_cpu = _own_cpu_s() - cpu_before, server_cpu_s() - server_before
        done = per_client * concurrency
        return {
            "requests_per_s": round(done / elapsed, 1),
            "p50_ms": round(1000 * statistics.median(latencies), 3),
            "client_cpu_ms_per_request": round(1000 * cpu / done, 4),
            "server_cpu_ms_per_request": round(1000 * server_cpu / done, 4),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ports: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(ports,))
    server.start()
    try:
        port = ports.get(timeout=30)
        server_process = psutil.Process(server.pid)

        def server_cpu_s() -> float:
            times = server_process.cpu_times()
            return times.user + times.system

        results = []
        for round_number in range(args.rounds):
            for mode in ("call", "stream"):
                for concurrency, requests in ((1, args.requests // 20), (64, args.requests)):
                    level = uvloop.run(_level(port, mode, concurrency, requests, server_cpu_s))
                    results.append(
                        {"round": round_number, "mode": mode, "concurrency": concurrency, **level}
                    )
                    print(json.dumps(results[-1]), flush=True)
    finally:
        server.terminate()
        server.join(10)


if __name__ == "__main__":
    main()
