"""The `mediamesh` command line: run the mesh, run one service, or talk to a running mesh."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from mediamesh.cli.arg_types import address, bounded, port
from mediamesh.cli.run_dir import DEFAULT_RUN_DIR
from mediamesh.common.errors import StartupError
from mediamesh.common.registry import RegistryError
from mediamesh.common.settings import ConfigError, MeshConfig, WorkerSettings

Handler = Callable[[argparse.Namespace], int]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"MEDIAMESH_{name}", default)


def _insecure_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--insecure",
        action="store_true",
        help=f"serve off loopback without {what} (every caller is trusted)",
    )


def _config_arg(parser: argparse.ArgumentParser) -> None:
    default = _env("CONFIG")
    parser.add_argument(
        "--config",
        type=Path,
        default=Path(default) if default else None,
        help="mesh config YAML (env MEDIAMESH_CONFIG); built-in defaults when omitted",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mediamesh", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser(
        "up",
        help="start scheduler, gateway and workers on loopback",
        description="Start scheduler, gateway and workers on loopback as child processes, "
        "restart one that exits, and stop them all on Ctrl-C or SIGTERM.",
        epilog="exit status: 0 stopped by Ctrl-C or SIGTERM once ready; 1 not ready within "
        "--ready-timeout, or a child exited during start-up (its reason printed); 2 a "
        "configuration refused before anything started (named field), or a --run-dir another "
        "`mediamesh up` holds; 130/143 Ctrl-C/SIGTERM "
        "before the mesh was ready",
    )
    _config_arg(up)
    up.add_argument("--models-dir", type=Path, default=None, help="where the tiny models live")
    up.add_argument(
        "--run-dir",
        type=Path,
        default=DEFAULT_RUN_DIR,
        help="logs and the run's config, which `status`, `top` and `drain` read from here",
    )
    up.add_argument(
        "--ready-timeout",
        type=bounded(float, 0.0, above=True),
        default=300.0,
        help="seconds to become ready, above 0 (default: %(default)s)",
    )
    up.add_argument("--no-restart", action="store_true", help="do not restart exited children")
    up.add_argument("--no-build", action="store_true", help="do not build missing tiny models")
    _insecure_arg(up, "API keys or an internal credential")
    up.set_defaults(handler=_cmd_up)

    for name, handler in (("scheduler", _cmd_scheduler), ("gateway", _cmd_gateway)):
        service = sub.add_parser(name, help=f"run the {name} in this process")
        _config_arg(service)
        _insecure_arg(service, "API keys" if name == "gateway" else "an internal credential")
        service.set_defaults(handler=handler)

    # Flags override the worker's settings; MEDIAMESH_WORKER__<FIELD> variables reach the
    # config's `worker` section (see MeshConfig.standalone_worker).
    worker = sub.add_parser("worker", help="run a worker in this process")
    _config_arg(worker)
    worker.add_argument("--worker-id", help="a `workers` entry of the config, or a new id")
    worker.add_argument("--pool", choices=["on-demand", "spot"])
    worker.add_argument("--host")
    worker.add_argument("--port", type=port, help="0 to 65535; 0 takes a free one")
    worker.add_argument("--advertise-address", type=address)
    worker.add_argument("--device")
    worker.add_argument("--models", help="comma-separated model names")
    worker.add_argument("--metrics-port", type=port, help="0 to 65535; 0 takes a free one")
    worker.add_argument("--scheduler", type=address, help="scheduler host:port")
    _insecure_arg(worker, "an internal credential")
    worker.set_defaults(handler=_cmd_worker)

    models = sub.add_parser("models", help="manage the tiny offline models")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    build = models_sub.add_parser("build", help="build tiny models with random weights")
    build.add_argument("--out", type=Path, default=Path(".mediamesh/models"))
    build.add_argument("--only", default="", help="comma-separated model names")
    build.add_argument("--force", action="store_true", help="rebuild even if present")
    build.set_defaults(handler=_cmd_models_build)
    from mediamesh.cli.models_commands import add_models_commands

    add_models_commands(models_sub)

    from mediamesh.cli import client_commands
    from mediamesh.cli.batch_command import add_batch_command
    from mediamesh.cli.job_commands import add_job_commands

    client_commands.add_commands(sub)
    add_job_commands(sub)
    from mediamesh.cli.simulate_command import add_simulate_command

    add_simulate_command(sub)
    add_batch_command(sub)
    return parser


def _cmd_up(args: argparse.Namespace) -> int:
    from mediamesh.cli.run_dir import hold_run_dir
    from mediamesh.cli.services import keep_files_private, load
    from mediamesh.cli.up import refuse_unstartable, run_up

    keep_files_private()

    overrides = {"models_dir": str(args.models_dir)} if args.models_dir else None
    config, registry = load(args.config, overrides)
    refuse_unstartable(config, registry)
    config = without_idle_spot_wait(config)
    if args.insecure:
        config = insecure_everywhere(config)
    to_build: list[str] | None = None
    if not args.no_build:
        from mediamesh.cli.local_models import models_to_build
        from mediamesh.worker.models.build import BUILDERS

        # Checked first: an entry that cannot be built is refused before the run dir exists.
        to_build = models_to_build(config, registry, set(BUILDERS))
    # Before building anything: a second `up` on a running mesh's run dir changes nothing.
    run_lock = hold_run_dir(args.run_dir)
    if to_build is not None:
        from mediamesh.worker.models.build import build_models

        build_models(config.models_dir, to_build)
    return run_up(
        config, args.run_dir, args.ready_timeout, restart=not args.no_restart, run_lock=run_lock
    )


def without_idle_spot_wait(config: MeshConfig) -> MeshConfig:
    """A local mesh with no spot worker and no placement of its own runs BATCH work at once,
    rather than making every batch job wait out the spot fallback time first."""
    if any(w.pool == "spot" for w in config.workers):
        return config
    if "placement" in config.scheduler.model_fields_set:
        return config
    placement = {
        name: rule.model_copy(update={"fallback_after_s": 0.0})
        for name, rule in config.scheduler.placement.items()
    }
    scheduler = config.scheduler.model_copy(update={"placement": placement})
    return config.model_copy(update={"scheduler": scheduler})


def insecure_everywhere(config: MeshConfig) -> MeshConfig:
    """`mediamesh up --insecure`: every service it starts may serve without a credential."""
    workers = [w.model_copy(update={"insecure": True}) for w in config.workers]
    return config.model_copy(
        update={
            "gateway": config.gateway.model_copy(update={"insecure": True}),
            "scheduler": config.scheduler.model_copy(update={"insecure": True}),
            "workers": workers,
        }
    )


def _cmd_scheduler(args: argparse.Namespace) -> int:
    from mediamesh.cli.services import load, run_scheduler

    overrides = {"scheduler.insecure": True} if args.insecure else None
    run_scheduler(*load(args.config, overrides))
    return 0


def _cmd_gateway(args: argparse.Namespace) -> int:
    from mediamesh.cli.services import load, run_gateway

    overrides = {"gateway.insecure": True} if args.insecure else None
    run_gateway(*load(args.config, overrides))
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from mediamesh.cli.services import load, run_worker

    config, registry = load(args.config)
    return run_worker(config, registry, worker_settings(config, args))


def worker_settings(config: MeshConfig, args: argparse.Namespace) -> WorkerSettings:
    """What `mediamesh worker` runs with: the config's worker (its file and MEDIAMESH_WORKER__*
    variables, see MeshConfig.standalone_worker) with the command line's flags on top."""
    base = config.standalone_worker(args.worker_id)
    flags = {
        "pool": args.pool,
        "host": args.host,
        "port": args.port,
        "advertise_address": args.advertise_address,
        "device": args.device,
        "metrics_port": args.metrics_port,
        "scheduler_address": args.scheduler,
        "models": [m for m in args.models.split(",") if m] if args.models else None,
        "insecure": True if args.insecure else None,
    }
    try:
        return WorkerSettings.model_validate(
            {**base.model_dump(), **{k: v for k, v in flags.items() if v is not None}}
        )
    except ValidationError as exc:
        # A flag's value (--device gpu9) fails as the same setting in a file would.
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        flag = f"--{field.replace('_', '-')}" if flags.get(field) is not None else f"worker.{field}"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{flag}: {message}") from None


def _cmd_models_build(args: argparse.Namespace) -> int:
    # Checked before the builders (and torch with them) load, so that a mistyped flag is
    # refused at once rather than as a traceback from deep inside the build.
    refusal = not_a_folder(args.out)
    if refusal:
        print(f"mediamesh: --out: {refusal}", file=sys.stderr)
        return 2
    from mediamesh.worker.models.build import BUILDERS, BUILTIN, build_models

    names = [n for n in args.only.split(",") if n] or None
    unknown = [n for n in names or [] if n not in BUILDERS and n not in BUILTIN]
    if unknown:
        print(
            f"mediamesh: --only: no builder for {', '.join(unknown)}; known: {', '.join(BUILDERS)}",
            file=sys.stderr,
        )
        return 2
    try:
        paths = build_models(args.out, names, force=args.force)
    except OSError as exc:
        # A folder that exists but cannot be written (permissions, a full disk).
        print(f"mediamesh: --out: cannot write the models to {args.out}: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def not_a_folder(out: Path) -> str | None:
    """Why `out` cannot be made into a folder of models, or None: it, or the nearest of its
    parents that exists, is not a folder (mkdir would fail with a bare FileExistsError or
    NotADirectoryError)."""
    for place in (out, *out.parents):
        try:
            if not place.exists():
                continue
            if place.is_dir():
                return None
        except OSError:
            # Not ours to judge (a folder we may not look into): the build reports it.
            return None
        above = "" if place == out else f" (above {out})"
        return f"{place}{above} is a file, not a folder"
    return None


def main(argv: list[str] | None = None) -> int:
    # imageio-ffmpeg otherwise starts ffmpeg with a preexec_fn, which makes Python fork()
    # rather than spawn: in a process with gRPC's threads, the child then runs gRPC's fork
    # handlers before exec and can stall (seen as ffmpeg never answering). Spawned, it cannot.
    os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")
    # gRPC core's fork support (on by default in grpcio's builds) checks the process id and
    # takes locks around every call, so that a forked child could go on using gRPC; no
    # mediamesh process does (children are spawned), and an echo mesh under load spent about
    # 5% of its CPU on it. Set before gRPC is first imported, which reads it once.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except (ConfigError, RegistryError, StartupError) as exc:
        # One line, always: `mediamesh up` reports a child's last such line as its reason.
        print(f"mediamesh: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        # A blocking gRPC call object left in a reference cycle is otherwise finalized at
        # interpreter exit, after Python has stopped grpc's daemon threads: one stopped while
        # holding that call's lock (its channel thread handling the call's end) left the
        # call's __del__ waiting on the lock forever, and the command hung after its work
        # was done (seen as `generate` never returning under load). Collected here, the
        # thread is still alive to let go of the lock.
        gc.collect()


if __name__ == "__main__":
    sys.exit(main())
