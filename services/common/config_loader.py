"""Reads a settings model from three layers: a YAML file, environment variables and flags.

Precedence, highest first:
1. overrides the caller passes (the CLI's flags), as dotted paths;
2. environment variables, ``MEDIAMESH_`` plus the field path joined by ``__``
   (``MEDIAMESH_SCHEDULER__PORT=50052``, ``MEDIAMESH_WORKER__WORKER_ID=pod-1``); lists and
   mappings are written as JSON (``MEDIAMESH_GATEWAY__API_KEYS='[{"sha256": ...}]'``).
   Names are case-insensitive, so a mapping key inside a name arrives lower-cased
   (``..._TENANTS__DEV__BURST`` sets tenant ``dev``): give mixed-case keys as JSON;
3. the YAML file;
4. the model's defaults.

Layers merge field by field, so an environment variable changes one setting and keeps the
rest of its section from the file. The environment is read when a process's main calls the
loader, never at import time, and tests pass their own mapping.

Every failure, from a file that is not YAML to a bad value in an environment variable, is
one `ConfigError` line naming where the value came from: the file and line, or the variable.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from pydantic_settings.sources.utils import parse_env_vars

from mediamesh.common.yaml_lines import line_of, read_nodes

ENV_PREFIX = "MEDIAMESH_"
ENV_NESTED_DELIMITER = "__"

Model = TypeVar("Model", bound=BaseModel)
Loc = tuple[int | str, ...]

# The kubelet gives every pod that keeps enableServiceLinks a variable per Service of its
# namespace (Kubernetes, "Discovering services: environment variables"): Service
# mediamesh-gateway gives MEDIAMESH_GATEWAY_PORT=tcp://10.0.0.1:50051, shaped like a misspelt
# gateway.port. Only the <SERVICE>_PORT[_<num>_<PROTO>] names can look like a setting (the
# others end in _SERVICE_HOST, _SERVICE_PORT*, _PROTO, _ADDR), and only with this URL value,
# which no port setting takes, are they let through: MEDIAMESH_GATEWAY_PORT=50051 is a typo.
_SERVICE_LINK_NAME = re.compile(r".+_PORT(_\d+_(TCP|UDP|SCTP))?", re.IGNORECASE)
_SERVICE_LINK_URL = re.compile(r"(tcp|udp|sctp)://(\[[0-9A-Fa-f:.]+\]|[0-9.]+):\d+")


class ConfigError(ValueError):
    """A config that cannot be used, with the file line or environment variable at fault."""


def load_layered(
    model: type[Model],
    path: Path | None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Model:
    """Build `model` from the file at `path` (none: defaults), `environ` (None: the process
    environment, read now) and dotted `overrides`, in the precedence the module describes."""
    environ = os.environ if environ is None else environ
    if stray := _stray_variables(model, environ):
        raise ConfigError(stray)
    data, document = _read_yaml(path) if path is not None else ({}, None)
    flags: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(flags, dotted, value)
    layered = _layered_class(model, data, environ)
    origin = _Origin(path, document, environ, set(overrides or ()))
    try:
        loaded = layered(**flags)
    except SettingsError:
        raise ConfigError(_undecodable_env(layered, environ)) from None
    except ValidationError as exc:
        details = "; ".join(
            # A validator's own sentence, without pydantic's "Value error, " in front.
            origin.describe(e["loc"], e["msg"].removeprefix("Value error, "))
            for e in exc.errors()
        )
        raise ConfigError(details) from None
    # Hand back the plain model: callers compare, copy and dump it like one built in code.
    values = {name: getattr(loaded, name) for name in model.model_fields}
    return model.model_construct(_fields_set=set(loaded.model_fields_set), **values)


def _stray_variables(model: type[BaseModel], environ: Mapping[str, str]) -> str | None:
    """The first variable that looks meant for `model` but names none of its fields.

    pydantic-settings forbids unknown keys only inside a section it recognises, so a
    misspelt section (MEDIAMESH_SCHEDULR__PORT) or a single underscore where two belong
    (MEDIAMESH_WORKER_WORKER_ID) was dropped without a word, and a k8s pod ran with the
    default. Variables of other tools and commands (MEDIAMESH_API_KEY) match neither
    pattern and stay allowed, and so do the kubelet's service links (_is_service_link)."""
    fields = model.model_fields
    for name in sorted(environ):
        if not name.upper().startswith(ENV_PREFIX) or _is_service_link(name, environ[name]):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        head, nested, tail = rest.partition(ENV_NESTED_DELIMITER)
        if nested and head not in fields:
            close = difflib.get_close_matches(head, list(fields), n=1)
            if close:
                meant = f"{ENV_PREFIX}{close[0].upper()}{ENV_NESTED_DELIMITER}{tail.upper()}"
                return f"env {name}: {head!r} is not a section; did you mean {meant}?"
            return f"env {name}: {head!r} is not a section; sections are {', '.join(fields)}"
        if nested and _is_list(fields[head].annotation):
            # pydantic-settings reads no index into a list: the error blamed the file.
            return (
                f"env {name}: {head} is a list, and a variable cannot set one entry of it; "
                f"set {ENV_PREFIX}{head.upper()} to the whole list as JSON, or set it in the "
                "config file"
            )
        if nested or rest in fields:
            continue
        for section, info in fields.items():
            inner = _model_of(info.annotation)
            field = rest.removeprefix(f"{section}_")
            if inner is not None and field != rest and field in inner.model_fields:
                meant = f"{ENV_PREFIX}{section.upper()}{ENV_NESTED_DELIMITER}{field.upper()}"
                return f"env {name}: not a setting; did you mean {meant}?"
    return None


def _is_list(annotation: Any) -> bool:
    """Whether a field of `annotation` holds a list (or tuple), perhaps optional."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if typing.get_origin(candidate) in (list, tuple):
            return True
    return False


def _is_service_link(name: str, value: str) -> bool:
    """Whether `name=value` is a variable the kubelet set for a Service of the namespace."""
    return bool(_SERVICE_LINK_NAME.fullmatch(name) and _SERVICE_LINK_URL.fullmatch(value))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (`X` or `X | None`), if it holds one."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _layered_class(
    model: type[Model], data: Mapping[str, Any], environ: Mapping[str, str]
) -> type[BaseSettings]:
    """`model` as pydantic-settings BaseSettings whose sources are this load's layers."""

    class Layered(BaseSettings, model):  # type: ignore[valid-type,misc]
        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER, extra="forbid"
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            # First wins: flags (the init arguments), then the environment, then the file.
            return (
                init_settings,
                MappingEnvSource(settings_cls, environ),
                InitSettingsSource(settings_cls, dict(data)),
            )

    return Layered


class MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of os.environ
    (the same hook its dotenv source overrides to read a file)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        # Set before the base class reads the variables in its __init__.
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def _undecodable_env(layered: type[BaseSettings], environ: Mapping[str, str]) -> str:
    """Name the variables whose list or mapping value is not JSON (pydantic-settings names
    only the top-level field)."""
    bad = []
    for name in sorted(n for n in environ if n.upper().startswith(ENV_PREFIX)):
        try:
            MappingEnvSource(layered, {name: environ[name]})()
        except SettingsError:
            bad.append(name)
    names = ", ".join(bad) or f"a {ENV_PREFIX}* variable"
    return f"env {names}: not valid JSON (lists and mappings are written as JSON)"


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    """The file's data and its node tree (for line numbers); one ConfigError line if the
    file cannot be read or parsed."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data, document = read_nodes(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"config {path} line {mark.line + 1}" if mark else f"config {path}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} line 1: expected a mapping at the top level")
    return data, document


class _Origin:
    """Says where a failing value came from: a flag, an environment variable or the file."""

    def __init__(
        self,
        path: Path | None,
        document: yaml.Node | None,
        environ: Mapping[str, str],
        flags: set[str],
    ) -> None:
        self.path = path
        self.document = document
        self.env_names = {n.upper(): n for n in environ if n.upper().startswith(ENV_PREFIX)}
        self.flags = flags

    def describe(self, loc: Loc, message: str) -> str:
        dotted = ".".join(str(part) for part in loc)
        if any(dotted == f or dotted.startswith(f + ".") for f in self.flags):
            return f"option {dotted}: {message}"
        for depth in range(len(loc), 0, -1):
            wanted = ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(p).upper() for p in loc[:depth])
            if wanted in self.env_names:
                inside = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[depth:])
                return f"env {self.env_names[wanted]}{inside}: {message}"
        if self.path is None:
            return f"config (defaults): {dotted}: {message}"
        line = line_of(self.document, loc)
        where = f"config {self.path} line {line}" if line else f"config {self.path}"
        return f"{where}: {dotted}: {message}"


def _set_dotted(raw: dict[str, Any], dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def json_or_csv(value: object) -> object:
    """A list setting from the environment: JSON, or the friendlier `a,b,c`."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        return json.loads(value)
    return [item.strip() for item in value.split(",") if item.strip()]
