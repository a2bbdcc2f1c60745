"""Subcommands that talk to a running mesh: generate, status, top, healthcheck, drain."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import grpc


def add_commands(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate", help="generate one artifact with a progress bar")
    gen.add_argument("--gateway", default=os.environ.get("MEDIAMESH_GATEWAY", "127.0.0.1:50051"))
    gen.add_argument("--api-key", default=os.environ.get("MEDIAMESH_API_KEY"))
    gen.add_argument("--model", required=True)
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--negative-prompt", default="")
    gen.add_argument("--steps", type=int)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--width", type=int)
    gen.add_argument("--height", type=int)
    gen.add_argument("--num-frames", type=int)
    gen.add_argument("--guidance-scale", type=float)
    gen.add_argument("--duration", type=float, help="seconds of audio")
    gen.add_argument("--priority", choices=["REALTIME", "STANDARD", "BATCH"])
    gen.add_argument("--timeout-ms", type=int)
    gen.add_argument("--idempotency-key", default="")
    gen.add_argument("--out", type=Path, required=True, help="file to write the result to")
    gen.add_argument("--quiet", action="store_true", help="no progress bar")
    gen.set_defaults(handler=_cmd_generate)

    for name, help_text in (("status", "print queues and workers"), ("top", "live status")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--config", type=Path, default=_env_path("MEDIAMESH_CONFIG"))
        cmd.add_argument("--scheduler", default=None, help="scheduler host:port")
        if name == "top":
            cmd.add_argument("--interval", type=float, default=1.0)
            cmd.add_argument("--iterations", type=int, default=0, help="0 runs until Ctrl-C")
        cmd.set_defaults(handler=_cmd_status if name == "status" else _cmd_top)

    health = sub.add_parser("healthcheck", help="exit 0 when a service reports SERVING")
    health.add_argument("--address", default="127.0.0.1:50051")
    health.add_argument("--service", default="")
    health.add_argument("--timeout", type=float, default=3.0)
    health.set_defaults(handler=_cmd_healthcheck)

    drain = sub.add_parser("drain", help="ask a worker to checkpoint its jobs and stop")
    drain.add_argument("--address", default="127.0.0.1:50060")
    drain.add_argument("--grace-s", type=float, default=0.0)
    drain.add_argument("--exit", action="store_true", help="exit the worker once drained")
    drain.add_argument("--config", type=Path, default=_env_path("MEDIAMESH_CONFIG"))
    drain.set_defaults(handler=_cmd_drain)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _cmd_generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from mediamesh.cli.api import gateway_client as gc
    from mediamesh.common.generated.v1 import gateway_pb2_grpc

    request = gc.generate_request(
        model=args.model,
        prompt=args.prompt,
        negative_prompt=args.negative_prompt,
        steps=args.steps,
        seed=args.seed,
        width=args.width,
        height=args.height,
        num_frames=args.num_frames,
        guidance_scale=args.guidance_scale,
        duration_s=args.duration,
        timeout_ms=args.timeout_ms,
        idempotency_key=args.idempotency_key,
        priority=args.priority,
    )
    bar = tqdm(total=request.steps or None, unit="step", disable=args.quiet, file=sys.stderr)

    def on_event(event: object) -> None:
        kind = event.WhichOneof("event")  # type: ignore[attr-defined]
        if kind == "queued":
            bar.set_description(f"queued #{event.queued.position}")  # type: ignore[attr-defined]
        elif kind == "progress":
            progress = event.progress  # type: ignore[attr-defined]
            bar.total = progress.total_steps
            bar.set_description("denoising")
            bar.n = progress.step
            bar.refresh()
        elif kind == "notice":
            bar.write(f"{event.notice.kind}: {event.notice.message}")  # type: ignore[attr-defined]

    with gc.channel(args.gateway) as channel:
        stub = gateway_pb2_grpc.GatewayStub(channel)
        try:
            events = stub.Generate(request, metadata=gc.metadata(args.api_key))
            outcome = gc.follow(stub, events, args.api_key, on_event)
        except grpc.RpcError as exc:
            bar.close()
            print(f"mediamesh: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    bar.close()
    if outcome.state != "SUCCEEDED":
        print(
            f"mediamesh: job {outcome.job_id} {outcome.state}: "
            f"{outcome.error_code} {outcome.error_message}",
            file=sys.stderr,
        )
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(outcome.data)
    print(f"{args.out} ({outcome.mime_type}, {len(outcome.data)} bytes, seed {outcome.seed})")
    return 0


def _status_text(args: argparse.Namespace) -> str:
    from mediamesh.cli.api.mesh_client import mesh_status
    from mediamesh.cli.services import load
    from mediamesh.cli.status_table import render

    config, _ = load(args.config)
    return render(mesh_status(config, args.scheduler))


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        print(_status_text(args))
    except grpc.RpcError as exc:
        print(f"mediamesh: scheduler unreachable: {exc.code().name}", file=sys.stderr)
        return 1
    return 0


def _cmd_top(args: argparse.Namespace) -> int:
    count = 0
    try:
        while args.iterations == 0 or count < args.iterations:
            try:
                text = _status_text(args)
            except grpc.RpcError as exc:
                text = f"scheduler unreachable: {exc.code().name}"
            sys.stdout.write("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S ") + text + "\n")
            sys.stdout.flush()
            count += 1
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    return 0


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(args.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
    except grpc.RpcError as exc:
        print(f"{args.address}: {exc.code().name}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{args.address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def _cmd_drain(args: argparse.Namespace) -> int:
    from mediamesh.cli.api.mesh_client import _metadata
    from mediamesh.cli.services import load
    from mediamesh.common.generated.v1 import worker_pb2, worker_pb2_grpc

    config, _ = load(args.config)
    with grpc.insecure_channel(args.address) as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)
        try:
            reply = stub.Drain(
                worker_pb2.DrainRequest(grace_s=args.grace_s, exit=args.exit),
                metadata=_metadata(config),
                timeout=max(args.grace_s, 1.0) + 10,
            )
        except grpc.RpcError as exc:
            print(f"mediamesh: drain failed: {exc.code().name} {exc.details()}", file=sys.stderr)
            return 1
    print(f"draining; jobs being checkpointed: {', '.join(reply.preempted) or 'none'}")
    return 0
