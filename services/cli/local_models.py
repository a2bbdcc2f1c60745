"""Which registry models `mediamesh up` builds before it starts, and which it cannot start.

A source under `{models_dir}` is either one of the tiny models `mediamesh models build`
writes, or a folder the user put there (their own model). A folder that is missing and
cannot be built would only fail later, inside a worker; it is reported here instead, with
the entry's name and what to do.
"""

from __future__ import annotations

from pathlib import Path

from mediamesh.common.errors import StartupError
from mediamesh.common.registry import Registry
from mediamesh.common.settings import MeshConfig

MODELS_DIR_PREFIX = "{models_dir}"


def hosted_names(config: MeshConfig, registry: Registry) -> set[str]:
    """The registry models some worker of `config` loads (a worker without a list loads all)."""
    if not config.workers or any(not w.models for w in config.workers):
        return set(registry.names)
    return {name for w in config.workers for name in w.models}


def models_to_build(config: MeshConfig, registry: Registry, buildable: set[str]) -> list[str]:
    """The hosted models under `{models_dir}` that have a tiny builder (in `buildable`).

    Raises StartupError naming the first hosted entry under `{models_dir}` whose folder is
    missing and that no builder can write.
    """
    hosted = hosted_names(config, registry)
    names: list[str] = []
    for spec in registry.models:
        if spec.name not in hosted or not spec.source.startswith(MODELS_DIR_PREFIX):
            continue
        # An entry may load another tiny model's folder under its own pipeline class
        # (sdxl-img2img-tiny reads sdxl-tiny): that folder is what gets built.
        folder_name = spec.source.removeprefix(MODELS_DIR_PREFIX).strip("/")
        built = spec.name if spec.name in buildable else folder_name
        if built in buildable:
            if built not in names:
                names.append(built)
            continue
        folder = Path(spec.resolved_source(config.models_dir))
        if not folder.is_dir():
            where = config.registry_path or "the default registry"
            raise StartupError(
                f"model {spec.name!r} ({where}): source {spec.source} is {folder}, which does "
                f"not exist, and only the tiny models ({', '.join(sorted(buildable))}) can be "
                "built; put the model there (a diffusers save_pretrained folder), point its "
                "`source` at a local folder or hub id, or remove the entry"
            )
    return names
