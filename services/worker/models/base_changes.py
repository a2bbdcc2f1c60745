"""What loading a LoRA changed in the base model it was loaded into, and putting it back.

A LoRA should only add layers beside the base weights, which `disable_lora` and
`delete_adapters` then take away again. Some loads change the base model itself, and those
changes outlast the adapter: diffusers' Flux loader widens a Linear layer whose LoRA has
more input features than it (a Flux Control LoRA widens `transformer.x_embedder` from 64 to
128 inputs, for a control image's latents), writes the new width into the transformer's
config (`in_channels`), and overwrites its norm layers with the LoRA's; a load that fails
halfway through that widening leaves the layers it reached. Every later job of the model
would then fail on a tensor size, or run with other weights, with or without adapters.

`BaseSnapshot.take` records, before a load, the shape of every base parameter of the
components a LoRA can reach (parameters of the LoRA layers themselves are not base), the
module that owns each, those components' configs and whether their norm layers were
overwritten; it holds references, no copies, so it is cheap. `changes` names what differs
afterwards and `restore` puts the recorded modules and config values back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from diffusers import DiffusionPipeline

# Where diffusers' Flux loader keeps the norm weights it replaced with a LoRA's, to restore
# them on `unload_lora_weights`.
_NORM_BACKUP = "_transformer_norm_layers"
# The Linear layer a Flux Control LoRA widens for its control image's latents.
_CONTROL_INPUT = "x_embedder"


def lora_components(pipeline: DiffusionPipeline) -> dict[str, torch.nn.Module]:
    """The pipeline's modules a LoRA can be loaded into, by attribute name."""
    names = getattr(pipeline, "_lora_loadable_modules", None) or ["transformer", "unet"]
    found = {name: getattr(pipeline, name, None) for name in names}
    return {name: module for name, module in found.items() if isinstance(module, torch.nn.Module)}


def _is_lora_parameter(name: str) -> bool:
    return any(part.startswith("lora_") for part in name.split("."))


def _base_name(name: str) -> str:
    """`name` as it was before peft wrapped its layer: peft moves a wrapped layer's own
    parameters under `base_layer` (`to_q.weight` becomes `to_q.base_layer.weight`)."""
    return ".".join(part for part in name.split(".") if part != "base_layer")


@dataclass(frozen=True)
class _Owner:
    """The module that owned a parameter before the load, and where it sat."""

    path: str
    module: torch.nn.Module


@dataclass
class _Component:
    shapes: dict[str, tuple[int, ...]]
    owners: dict[str, _Owner]
    config: dict[str, Any]
    norm_backup: object


@dataclass
class BaseSnapshot:
    """The base model's shapes, owning modules and configs before an adapter loads."""

    components: dict[str, _Component] = field(default_factory=dict)

    @classmethod
    def take(cls, pipeline: DiffusionPipeline) -> BaseSnapshot:
        snapshot = cls()
        for name, component in lora_components(pipeline).items():
            shapes: dict[str, tuple[int, ...]] = {}
            owners: dict[str, _Owner] = {}
            modules = dict(component.named_modules(remove_duplicate=False))
            for raw, parameter in component.named_parameters():
                if _is_lora_parameter(raw):
                    continue
                base = _base_name(raw)
                shapes[base] = tuple(parameter.shape)
                path = raw.rpartition(".")[0]
                owners[base] = _Owner(path, modules[path])
            snapshot.components[name] = _Component(
                shapes=shapes,
                owners=owners,
                config=_config_values(component),
                norm_backup=getattr(component, _NORM_BACKUP, None),
            )
        return snapshot

    def changes(self, pipeline: DiffusionPipeline) -> list[str]:
        """What differs from the snapshot, in words ("widens transformer.x_embedder from 16
        to 32 input features"); empty when the base model is as it was."""
        found: list[str] = []
        for name, component in lora_components(pipeline).items():
            before = self.components.get(name)
            if before is None:
                continue
            shapes = _base_shapes(component)
            for base in sorted(set(before.shapes) | set(shapes)):
                old, new = before.shapes.get(base), shapes.get(base)
                if old != new:
                    found.append(_shape_change(f"{name}.{base}", old, new))
            config = _config_values(component)
            for key in sorted(set(before.config) | set(config)):
                old_value, new_value = before.config.get(key), config.get(key)
                if old_value != new_value:
                    found.append(f"sets {name}.config.{key} from {old_value!r} to {new_value!r}")
            backup = getattr(component, _NORM_BACKUP, None)
            if backup is not before.norm_backup and backup:
                found.append(f"overwrites {len(backup)} norm weights of {name}")
        return found

    def restore(self, pipeline: DiffusionPipeline) -> None:
        """Puts back every module whose parameters changed shape, the config values, and the
        norm weights diffusers saved. Call it after deleting the adapter's LoRA layers: a
        restored module is the very object the snapshot saw, without them."""
        for name, component in lora_components(pipeline).items():
            before = self.components.get(name)
            if before is None:
                continue
            shapes = _base_shapes(component)
            changed = {
                before.owners[base].path: before.owners[base].module
                for base, shape in before.shapes.items()
                if shapes.get(base) != shape
            }
            # Outermost first: a module put back brings its own submodules with it.
            for path in sorted(changed, key=lambda p: p.count(".")):
                parent_path, _, leaf = path.rpartition(".")
                parent = component.get_submodule(parent_path) if parent_path else component
                setattr(parent, leaf, changed[path])
            config = getattr(component, "config", None)
            current = _config_values(component)
            for key, value in before.config.items():
                if current.get(key) != value and config is not None:
                    # diffusers widens by setting the attribute on its FrozenDict config.
                    object.__setattr__(config, key, value)
            backup = getattr(component, _NORM_BACKUP, None)
            if backup and backup is not before.norm_backup:
                component.load_state_dict(backup, strict=False)
                setattr(component, _NORM_BACKUP, before.norm_backup)


def widens_control_input(changes: list[str]) -> bool:
    """True when the changes widen a Flux transformer's `x_embedder` (a Control LoRA)."""
    return any(f".{_CONTROL_INPUT} " in f"{change} " for change in changes)


def _config_values(component: torch.nn.Module) -> dict[str, Any]:
    """A diffusers model's config as its attributes read: diffusers changes a config by
    setting the attribute, leaving the dict's own item as it was."""
    config = getattr(component, "config", None)
    if config is None or not isinstance(config, dict):
        return {}
    return {key: getattr(config, key, value) for key, value in config.items()}


def _shape_change(name: str, old: tuple[int, ...] | None, new: tuple[int, ...] | None) -> str:
    if old is None:
        return f"adds {name}"
    if new is None:
        return f"removes {name}"
    module, _, kind = name.rpartition(".")
    if kind == "weight" and len(old) == len(new) == 2:
        words = []
        if new[1] != old[1]:
            verb = "widens" if new[1] > old[1] else "narrows"
            words.append(f"{verb} {module} from {old[1]} to {new[1]} input features")
        if new[0] != old[0]:
            verb = "widens" if new[0] > old[0] else "narrows"
            words.append(f"{verb} {module} from {old[0]} to {new[0]} output features")
        return " and ".join(words)
    return f"changes {name} from {list(old)} to {list(new)}"


def _base_shapes(component: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Each base parameter's shape by its name without the LoRA wrapping (`base_layer.`)."""
    return {
        _base_name(raw): tuple(parameter.shape)
        for raw, parameter in component.named_parameters()
        if not _is_lora_parameter(raw)
    }
