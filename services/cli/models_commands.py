"""`mediamesh models pull` and `mediamesh models list`: registry entries on this machine."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mediamesh.common.adapter_hub import hub_adapters, pull_adapter
from mediamesh.common.hub import Downloader, is_hub_source, pull
from mediamesh.common.preemption import preemption_of
from mediamesh.common.registry import MODEL_FIELDS, ModelSpec, Registry


def add_models_commands(models_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `pull` and `list` under `mediamesh models`."""
    pull_cmd = models_sub.add_parser(
        "pull", help="download hub models into the Hugging Face cache (HF_TOKEN honoured)"
    )
    pull_cmd.add_argument("names", nargs="+", help="registry model names")
    _config_argument(pull_cmd)
    pull_cmd.set_defaults(handler=_cmd_pull)
    list_cmd = models_sub.add_parser("list", help="the registry's models and what they take")
    _config_argument(list_cmd)
    list_cmd.set_defaults(handler=_cmd_list)


def _config_argument(cmd: argparse.ArgumentParser) -> None:
    # Read when the parser is built, in main, never at import: as `up` and the client
    # commands do, so that they all read the same registry.
    from_env = os.environ.get("MEDIAMESH_CONFIG")
    cmd.add_argument(
        "--config",
        type=Path,
        default=Path(from_env) if from_env else None,
        help="mesh config YAML (env MEDIAMESH_CONFIG); built-in defaults when omitted",
    )


def pull_models(
    registry: Registry,
    names: list[str],
    models_dir: Path,
    *,
    token: str | None,
    download: Downloader | None = None,
) -> list[str]:
    """Pulls each named hub entry; returns one line per name. Raises ValueError naming
    unknown models or entries that are not hub ids (local folders, tiny built models)."""
    specs: list[ModelSpec] = []
    for name in names:
        spec = registry.get(name)
        if spec is None:
            raise ValueError(f"{name}: not in the registry")
        if not is_hub_source(spec, models_dir) and not hub_adapters(spec, models_dir):
            raise ValueError(f"{name}: source {spec.source} is not a hub id; nothing to pull")
        specs.append(spec)
    lines = []
    for spec in specs:
        if is_hub_source(spec, models_dir):
            snapshot = pull(spec, token=token, download=download)
            lines.append(f"{spec.name}: {spec.source} -> {snapshot}")
        # Its LoRA adapters from the hub come along, so the worker finds them offline.
        for adapter in hub_adapters(spec, models_dir):
            folder = pull_adapter(adapter, token=token, download=download)
            lines.append(f"{spec.name} adapter {adapter.name}: {adapter.source} -> {folder}")
    return lines


# The columns of `mediamesh models list`, one per `model_rows` cell.
MODEL_COLUMNS = (
    "model",
    "pipeline",
    "accepted fields",
    "inputs",
    "output formats",
    "preemption",
    "previews",
    "adapters",
)


# The preemption of a model whose files are not there to read (not built, not pulled).
UNKNOWN = "?"


def model_rows(registry: Registry, models_dir: Path) -> list[list[str]]:
    """One row per model, a cell per MODEL_COLUMNS: "-" where a model has no inputs or
    adapters, or no preemption (the built-in echo), UNKNOWN where its preemption cannot be
    read (its folder is not there, or a hub model is not pulled yet)."""
    return [
        [
            spec.name,
            spec.pipeline,
            ",".join(f for f in MODEL_FIELDS if f in spec.accepted_fields),
            ",".join(spec.inputs) or "-",
            ",".join(spec.output_formats),
            preemption_of(spec, models_dir) or ("-" if spec.source == "builtin" else UNKNOWN),
            "yes" if spec.preview.enabled else "no",
            ",".join(a.name for a in spec.adapters) or "-",
        ]
        for spec in registry.models
    ]


def _cmd_pull(args: argparse.Namespace) -> int:
    from mediamesh.cli.services import load

    config, registry = load(args.config)
    try:
        # Read here, in the command, never at import: the token is the caller's.
        lines = pull_models(
            registry, args.names, config.models_dir, token=os.environ.get("HF_TOKEN") or None
        )
    except ValueError as exc:
        print(f"mediamesh: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from mediamesh.cli.services import load

    config, registry = load(args.config)
    rows = model_rows(registry, config.models_dir)
    print(_table(list(MODEL_COLUMNS), rows))
    unread = [row[0] for row in rows if row[MODEL_COLUMNS.index("preemption")] == UNKNOWN]
    sources = {name: getattr(registry.get(name), "source", "") for name in unread}
    under = [name for name in unread if sources[name].startswith("{models_dir}")]
    elsewhere = [name for name in unread if name not in under]
    if under:
        # Said, since a relative models_dir (the default) depends on where this runs.
        print(
            f"mediamesh: preemption {UNKNOWN}: no files to read for {', '.join(under)} under "
            f"models_dir {config.models_dir.resolve()} (build them with `mediamesh models "
            "build`, or point --config or MEDIAMESH_MODELS_DIR at the folder)",
            file=sys.stderr,
        )
    if elsewhere:
        # An absolute folder or a hub model: models_dir has nothing to do with them.
        print(
            f"mediamesh: preemption {UNKNOWN}: no files to read at the source of "
            f"{', '.join(elsewhere)} (a folder that is not there, or a hub model not yet "
            "pulled: `mediamesh models pull`)",
            file=sys.stderr,
        )
    return 0


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [headers, *rows]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in lines)
