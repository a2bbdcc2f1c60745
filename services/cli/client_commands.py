"""Subcommands that talk to a running mesh: generate, status, top, healthcheck, drain."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import grpc

from mediamesh.cli.arg_types import address, bounded
from mediamesh.cli.gateway_args import add_gateway_arguments, gateway_options
from mediamesh.cli.image_inputs import add_image_arguments, image_options
from mediamesh.cli.run_dir import DEFAULT_RUN_DIR, local_config

# The shortest wait between `top`'s redraws: each redraw reads the scheduler's status, and a
# shorter one would poll it in a busy loop while showing nothing a person could read.
MIN_TOP_INTERVAL_S = 0.1


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gen = sub.add_parser("generate", help="generate one artifact with a progress bar")
    add_gateway_arguments(gen)
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
    gen.add_argument(
        "--output-format",
        default="",
        help="png, jpeg, webp (image); mp4, webm, gif (video); wav, flac, ogg, mp3, opus, aac "
        "(audio); "
        "default: the model's",
    )
    gen.add_argument("--output-quality", type=int, help="jpeg/webp quality 1..100")
    gen.add_argument("--fps", type=int, help="frames per second of a video")
    gen.add_argument(
        "--preview-every-steps",
        type=int,
        help="ask for a latent preview every N steps; the count received is shown",
    )
    gen.add_argument(
        "--preview-dir", type=Path, help="also save each preview here as step-NNNN.<ext>"
    )
    gen.add_argument(
        "--adapter",
        action="append",
        type=_adapter_argument,
        default=[],
        metavar="NAME:SCALE",
        help="apply a LoRA adapter of the model (repeatable; NAME alone: its default scale)",
    )
    add_image_arguments(gen)
    gen.add_argument(
        "--result-as-url",
        action="store_true",
        help="ask for a presigned URL of the result (S3 artifact store) and print it",
    )
    gen.add_argument(
        "--webhook",
        metavar="URL",
        help="POST signed completed/failed callbacks to URL (host on the mesh's allowlist)",
    )
    gen.add_argument("--priority", choices=["REALTIME", "STANDARD", "BATCH"])
    gen.add_argument("--timeout-ms", type=int)
    gen.add_argument("--idempotency-key", default="")
    gen.add_argument(
        "--out",
        type=Path,
        required=True,
        help="file to write the result to; its extension is set to the result's format",
    )
    gen.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no notices: print only the result's path, or the error",
    )
    gen.set_defaults(handler=_cmd_generate)

    for name, help_text in (("status", "print queues and workers"), ("top", "live status")):
        cmd = sub.add_parser(name, help=help_text)
        _local_config_args(cmd)
        cmd.add_argument("--scheduler", type=address, default=None, help="scheduler host:port")
        if name == "top":
            cmd.add_argument(
                "--interval",
                type=bounded(float, MIN_TOP_INTERVAL_S),
                default=1.0,
                help=f"seconds between redraws, at least {MIN_TOP_INTERVAL_S:g} "
                "(default: %(default)s)",
            )
            cmd.add_argument(
                "--iterations",
                type=bounded(int, 0),
                default=0,
                help="redraws before exiting; 0 runs until Ctrl-C (default: %(default)s)",
            )
        cmd.set_defaults(handler=_cmd_status if name == "status" else _cmd_top)

    health = sub.add_parser("healthcheck", help="exit 0 when a service reports SERVING")
    health.add_argument(
        "--address",
        type=address,
        default="127.0.0.1:50051",
        help="host:port of the service to ask (default: %(default)s, the gateway's)",
    )
    health.add_argument(
        "--service",
        default="",
        help="gRPC health service name to ask about (default: '', the whole server)",
    )
    health.add_argument(
        "--timeout",
        type=bounded(float, 0.0, above=True),
        default=3.0,
        help="seconds to wait for the answer, above 0 (default: %(default)s)",
    )
    health.set_defaults(handler=_cmd_healthcheck)

    drain = sub.add_parser("drain", help="ask a worker to checkpoint its jobs and stop")
    drain.add_argument(
        "--address",
        type=address,
        default="127.0.0.1:50060",
        help="host:port of the worker to drain (default: %(default)s, a worker's port)",
    )
    drain.add_argument(
        "--grace-s",
        type=bounded(float, 0.0),
        default=0.0,
        help="seconds the worker waits for its jobs' checkpoints before exiting "
        "(default: 0, the worker's drain_grace_s)",
    )
    drain.add_argument("--exit", action="store_true", help="exit the worker once drained")
    _local_config_args(drain)
    drain.set_defaults(handler=_cmd_drain)


def _local_config_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--config",
        type=Path,
        default=_env_path("MEDIAMESH_CONFIG"),
        help="mesh config (env MEDIAMESH_CONFIG); default: the one `mediamesh up` wrote",
    )
    cmd.add_argument(
        "--run-dir",
        type=Path,
        default=DEFAULT_RUN_DIR,
        help="run directory of a local `mediamesh up` (its --run-dir), read without --config",
    )


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _adapter_argument(text: str) -> tuple[str, float | None]:
    from mediamesh.sdk.options import parse_adapter

    try:
        return parse_adapter(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_generate(args: argparse.Namespace) -> int:
    import uuid

    from mediamesh.cli.following import JobOnTerminal, out_refusal, still_running
    from mediamesh.sdk import Client, GatewayError

    refusal = out_refusal(args.out)
    if refusal is not None:
        print(f"mediamesh: {refusal}", file=sys.stderr)
        return 2
    if args.preview_dir is not None and not args.preview_every_steps:
        # Without previews asked for, none arrive and the folder would stay silently empty.
        print(
            "mediamesh: --preview-dir: needs --preview-every-steps N (1 or more)",
            file=sys.stderr,
        )
        return 2
    terminal = JobOnTerminal(args.quiet, args.steps, args.preview_dir)
    # Our own key rather than the SDK's hidden one, so that an interruption before the first
    # event can still tell how to reach the job: the same command and key re-attach to it.
    idempotency_key = args.idempotency_key or f"cli-{uuid.uuid4().hex}"
    try:
        with Client(args.gateway, **gateway_options(args)) as client:
            terminal.follow(
                client.generate(
                    args.model,
                    args.prompt,
                    negative_prompt=args.negative_prompt,
                    steps=args.steps,
                    seed=args.seed,
                    width=args.width,
                    height=args.height,
                    num_frames=args.num_frames,
                    guidance_scale=args.guidance_scale,
                    duration_s=args.duration,
                    output_format=args.output_format,
                    output_quality=args.output_quality,
                    fps=args.fps,
                    preview_every_steps=args.preview_every_steps,
                    timeout_ms=args.timeout_ms,
                    idempotency_key=idempotency_key,
                    priority=args.priority,
                    adapters=args.adapter or None,
                    result_as_url=args.result_as_url or None,
                    webhook={"url": args.webhook} if args.webhook else None,
                    **image_options(client, args),
                )
            )
    except (GatewayError, OSError, ValueError) as exc:
        # OSError and ValueError: a certificate file that cannot be read or is half given;
        # ValueError also an option out of its range (`--steps -3`), naming it.
        terminal.close()
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Closing the stream does not cancel the job on the mesh: say which job goes on.
        terminal.close()
        if terminal.job_id:
            going_on = still_running(terminal.job_id, args.out, args.gateway)
            print(f"mediamesh: {going_on}", file=sys.stderr)
        else:
            print(
                "mediamesh: interrupted before the job was accepted; if it was, it goes on: "
                f"run the same command with --idempotency-key {idempotency_key} to follow it, "
                "or find it with `mediamesh jobs`",
                file=sys.stderr,
            )
        return 130
    terminal.close()
    return terminal.report(args.out, bool(args.preview_every_steps), args.gateway)


def _status_text(args: argparse.Namespace) -> str:
    from mediamesh.cli.api.mesh_client import mesh_status
    from mediamesh.cli.services import load
    from mediamesh.cli.status_table import render

    config, _ = load(local_config(args.config, args.run_dir))
    return render(mesh_status(config, args.scheduler))


# How much of a server's error text a one-line CLI message quotes.
_DETAILS_SHOWN = 200


def why_unreachable(
    exc: grpc.RpcError, args: argparse.Namespace, service: str = "scheduler", address: str = ""
) -> str:
    """Why `service` at `address` (default: the scheduler these args reach) could not be
    read: the status, the server's words, and, without a mesh config, where one was looked
    for, since the built-in defaults then chose the address and sent no credential."""
    from mediamesh.cli.api.mesh_client import scheduler_address
    from mediamesh.common.settings import load_mesh_config

    found = local_config(args.config, args.run_dir)
    if not address:
        address = args.scheduler or scheduler_address(load_mesh_config(found))
    code = exc.code()
    text = f"{service} unreachable at {address}: {code.name if code else 'no status'}"
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    if details:
        text += f" ({details[:_DETAILS_SHOWN]})"
    if found is None:
        text += (
            f"; no mesh config: neither --config nor a `mediamesh up` run directory at "
            f"{args.run_dir}, so the built-in defaults were used; run this where "
            "`mediamesh up` runs, or pass --run-dir or --config"
        )
    elif code == grpc.StatusCode.UNAUTHENTICATED and args.config is not None:
        # `mediamesh up` makes the internal token and writes it into the config it keeps in
        # its run directory, not into the user's file that --config named.
        text += (
            "; `mediamesh up` keeps its internal token in the config it writes to its run "
            f"directory: pass --run-dir (default {args.run_dir}) instead of --config"
        )
    return text


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        print(_status_text(args))
    except grpc.RpcError as exc:
        print(f"mediamesh: {why_unreachable(exc, args)}", file=sys.stderr)
        return 1
    return 0


def _cmd_top(args: argparse.Namespace) -> int:
    """Redraws the status until interrupted; exits 1 when the last read failed."""
    count = 0
    reached = True
    try:
        while args.iterations == 0 or count < args.iterations:
            try:
                text, reached = _status_text(args), True
            except grpc.RpcError as exc:
                text, reached = why_unreachable(exc, args), False
            sys.stdout.write("\x1b[2J\x1b[H" + time.strftime("%H:%M:%S ") + text + "\n")
            sys.stdout.flush()
            count += 1
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    return 0 if reached else 1


def _cmd_healthcheck(args: argparse.Namespace) -> int:
    from mediamesh.common.api.health import serving_status

    try:
        status = serving_status(args.address, args.service, args.timeout)
    except grpc.RpcError as exc:
        print(f"{args.address}: {exc.code().name}", file=sys.stderr)
        return 1
    print(f"{args.address}: {status}")
    return 0 if status == "SERVING" else 1


def _cmd_drain(args: argparse.Namespace) -> int:
    from mediamesh.cli.api.mesh_client import drain_worker
    from mediamesh.cli.services import load

    config, _ = load(local_config(args.config, args.run_dir))
    try:
        preempted = drain_worker(config, args.address, args.grace_s, args.exit)
    except grpc.RpcError as exc:
        reason = why_unreachable(exc, args, "worker", args.address)
        print(f"mediamesh: drain failed: {reason}", file=sys.stderr)
        return 1
    # Jobs past their last step are not among them: they finish on this worker.
    print(f"draining; jobs stopped to resume elsewhere: {', '.join(preempted) or 'none'}")
    return 0
