"""Typed settings for every service, built once in `main` from a YAML file, MEDIAMESH_*
environment variables and flags (config_loader.py says how the layers combine).

Nothing here reads the environment at import time: the process entry points call
`load_mesh_config`, which reads it then.
"""

from __future__ import annotations

import math
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode

# ConfigError is re-exported: the services raise and catch it as a settings error.
from mediamesh.common.adapters import (
    DEFAULT_MAX_ADAPTERS_PER_REQUEST,
    DEFAULT_MAX_LOADED_ADAPTERS,
)
from mediamesh.common.addresses import port_problem
from mediamesh.common.artifact_settings import ArtifactSettings
from mediamesh.common.config_loader import ConfigError as ConfigError
from mediamesh.common.config_loader import json_or_csv, load_layered
from mediamesh.common.limits import WORKER_ID_PATTERN
from mediamesh.common.secret_files import read_setting_file
from mediamesh.common.tenants import TENANT_PATTERN, is_tenant_name
from mediamesh.common.webhook_settings import WebhookSettings

Pool = Literal["on-demand", "spot"]
PriorityName = Literal["REALTIME", "STANDARD", "BATCH"]


class Section(BaseModel):
    # No setting takes an infinite or NaN number: `mediamesh up` writes the run config as
    # JSON-safe YAML, where .inf becomes null, which every child would then refuse.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads true as 1 and false as 0, and YAML reads `off`, `no` and
        # `n` as false: `http_port: off` put the HTTP face on a random port, not off.
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _numeric(field.annotation):
            raise ValueError(
                f"{str(value).lower()} is a boolean (YAML reads on, off, yes and no as "
                "booleans); this setting takes a number"
                + (", or null for none" if _optional(field.annotation) else "")
            )
        return value


def _dialable(value: str | None) -> str | None:
    problem = None if value is None else port_problem(value, zero=True)
    if problem:
        raise ValueError(problem)
    return value


def _numeric(annotation: Any) -> bool:
    """Whether a field of `annotation` takes an int or a float but not a bool."""
    kinds = _kinds(annotation)
    return bool(kinds & {int, float}) and bool not in kinds


def _optional(annotation: Any) -> bool:
    return type(None) in _kinds(annotation)


def _kinds(annotation: Any) -> set[Any]:
    """The plain types a field's annotation allows, through Annotated and unions."""
    if get_origin(annotation) is Annotated:
        return _kinds(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return {kind for arg in get_args(annotation) for kind in _kinds(arg)}
    return {annotation}


# A TCP port; 0 takes a free one.
Port = Annotated[int, Field(ge=0, le=65535)]
# A worker's device, as torch names the ones the mesh places pipelines on.
_DEVICE = re.compile(r"cpu|mps|cuda(:\d{1,3})?")
# The modalities a queue and its settings are keyed by (the registry's `modality`).
QUEUE_NAMES = ("image", "video", "audio")
_Value = TypeVar("_Value")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


DEFAULT_OTLP_ENDPOINT = "http://127.0.0.1:4317"
# The standard OpenTelemetry variables `load_mesh_config` reads when telemetry.otlp_endpoint
# is not set, the traces-only one first as the OpenTelemetry spec orders them: the exporter
# is given its endpoint, so it would not read them itself.
OTEL_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# The same for telemetry.otlp_export_timeout_s, read in the spec's unit, milliseconds: the
# installed exporter would read them as seconds (opentelemetry-python #4044), but it is given
# its timeout, so a value set for every service of a deployment means here what it means to
# the others.
OTEL_TIMEOUT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
# What one OTLP export, retries included, may take before it gives up. 2 s, not the SDK's 10:
# with the collector down, exports pending at shutdown held a worker 7.5 s and the scheduler
# 14 s past SIGTERM, beyond what a spot pod's grace leaves after its drain. The 0.1 s floor
# also refuses a variable written in seconds (10, which would be 10 ms); the ceiling is not
# about shutdown, which waits for the last spans 2.5 s at most whatever this is.
DEFAULT_OTLP_EXPORT_TIMEOUT_S = 2.0
OTLP_EXPORT_TIMEOUT_BOUNDS_S = (0.1, 60.0)


class TelemetrySettings(Section):
    # "none" keeps tracing off; "console" prints spans; "otlp" exports to otlp_endpoint;
    # "file" appends spans as JSON lines to trace_file (what the tests read).
    traces: Literal["none", "console", "otlp", "file"] = "none"
    # Unset: the OTEL_ENDPOINT_VARIABLES, else this default.
    otlp_endpoint: str = DEFAULT_OTLP_ENDPOINT
    # Unset: the OTEL_TIMEOUT_VARIABLES (milliseconds), else this default.
    otlp_export_timeout_s: float = Field(
        DEFAULT_OTLP_EXPORT_TIMEOUT_S,
        ge=OTLP_EXPORT_TIMEOUT_BOUNDS_S[0],
        le=OTLP_EXPORT_TIMEOUT_BOUNDS_S[1],
        allow_inf_nan=False,
    )
    trace_file: Path | None = None
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) and value.upper() in _LOG_LEVELS else value


def _token_problem(token: str) -> str | None:
    """Why `token` cannot be the internal credential, or None."""
    if not token.strip():
        # An empty token authenticates nothing: servers would take it for no token at all.
        return "is empty"
    # It travels as gRPC metadata, which carries printable ASCII only; and a server comparing
    # it with a non-ASCII token would fail every call instead of refusing the start.
    bad = next((i for i, c in enumerate(token) if not " " <= c <= "~"), None)
    if bad is not None:
        return f"has a character outside printable ASCII at position {bad + 1}"
    return None


# Shortest gateway.http.result_link_secret: 32 characters, 256 bits of base64 or hex text.
MIN_LINK_SECRET_CHARS = 32


class InternalAuthSettings(Section):
    """The mesh's shared credential for scheduler and worker calls: `token`, or `token_file`
    holding it (surrounding whitespace stripped), never both."""

    token: SecretStr | None = None
    token_file: Path | None = None

    @field_validator("token", mode="after")
    @classmethod
    def _usable_token(cls, value: SecretStr | None) -> SecretStr | None:
        problem = None if value is None else _token_problem(value.get_secret_value())
        if problem:
            raise ValueError(f"the token {problem}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> InternalAuthSettings:
        if self.token is not None and self.token_file is not None:
            raise ValueError("set token or token_file, not both")
        return self

    @property
    def configured(self) -> bool:
        """Whether a token is configured (its file is read by `resolve`)."""
        return self.token is not None or self.token_file is not None

    def resolve(self) -> str | None:
        """The token, None when none is configured; ConfigError naming the field when its file
        cannot be read, is empty or holds what cannot be a token."""
        if self.token is not None:
            return self.token.get_secret_value()
        if self.token_file is None:
            return None
        setting = "internal_auth.token_file"
        token = read_setting_file(self.token_file, setting).decode(errors="replace").strip()
        problem = _token_problem(token)
        if problem:
            raise ConfigError(f"{setting}: the token in {self.token_file} {problem}")
        return token


class InternalTlsSettings(Section):
    """TLS for every internal channel (gateway -> scheduler, scheduler <-> workers, the CLI):
    servers present cert_file/key_file; with ca_file they also demand a client certificate
    that CA signed (mutual TLS, itself a credential), and clients verify servers against it
    and present the same cert_file/key_file."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    # The name clients expect in the servers' certificates, when it is not the host they dial
    # (workers are dialled by pod IP, unknown when certificates are issued).
    server_name: str | None = None

    @model_validator(mode="after")
    def _cert_with_key(self) -> InternalTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self

    @property
    def enabled(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None


class TlsSettings(Section):
    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _cert_with_key(self) -> TlsSettings:
        # Either alone would serve plaintext while the config asks for TLS.
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None and self.key_file is not None


class TenantSettings(Section):
    """Quotas of one tenant."""

    # Model names the tenant may use; empty means all.
    allowed_models: list[str] = Field(default_factory=list)
    highest_priority: PriorityName = "REALTIME"
    max_concurrent_jobs: int = Field(64, ge=1)
    max_queued_jobs: int = Field(10_000, ge=1)
    requests_per_second: float = Field(100.0, gt=0)
    burst: int = Field(200, ge=1)
    # A separate budget for calls that make no job (Watch, GetJob, Download, Cancel,
    # DeleteJob, ListModels and the KServe metadata calls), so reads cannot starve submits or
    # run free.
    reads_per_second: float = Field(100.0, gt=0)
    read_burst: int = Field(200, ge=1)
    weight: float = Field(1.0, gt=0)
    # Most bytes of stored results the tenant may hold (its results within the scheduler's
    # retention); new jobs are refused while it holds that many. 0: no limit.
    result_quota_bytes: int = Field(0, ge=0)


class ApiKeySettings(Section):
    # Lowercase hex SHA-256 of the key; the key itself is never stored.
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # Never empty: an empty name is no tenant, not every tenant.
    tenant: str = Field(pattern=TENANT_PATTERN)
    # "admin": the key sees and acts on every tenant's jobs (operators' tools).
    scopes: list[Literal["admin"]] = Field(default_factory=list)


class GatewayHttpSettings(Section):
    """The gateway's HTTP/JSON face (services/gateway/http)."""

    # Origins a browser page may call the HTTP face from (CORS); empty: same origin only.
    # "*" lets a page on any origin read (never write: writes stay same-origin or listed),
    # and only on a gateway with API keys (GatewaySettings refuses it without).
    cors_origins: list[str] = Field(default_factory=list)
    # The URL clients reach the face at ("https://mesh.example.com", a path prefix allowed):
    # absolute links, such as a result's URL, start with it. Unset, they start with the
    # request's own scheme and Host, which are wrong behind a TLS proxy and are the
    # caller's to choose.
    public_url: str | None = None
    # Signs the result links the OpenAI images API gives for `response_format: url`, which
    # its clients open without a key. Unset: a random secret per gateway process, so a link
    # opens only on the gateway that made it; several gateways behind one address need
    # one shared secret here (at least 32 characters).
    result_link_secret: SecretStr | None = None
    # How long such a link opens its result (OpenAI's own image URLs last an hour).
    result_link_ttl_s: float = Field(3600.0, gt=0, le=7 * 24 * 3600)

    @field_validator("result_link_secret", mode="after")
    @classmethod
    def _long_enough_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # pydantic's own length check counts a secret's "items"; a secret has characters.
        if value is not None and len(value.get_secret_value()) < MIN_LINK_SECRET_CHARS:
            raise ValueError(
                f"{len(value.get_secret_value())} characters; the least is {MIN_LINK_SECRET_CHARS}"
            )
        return value

    # Connection limits of the face's own server (uvicorn). They keep one client from holding
    # the gateway's sockets and file descriptors, which the gRPC listener shares; a public
    # deployment still belongs behind a reverse proxy or load balancer that buffers requests.
    # Seconds a connection has to send a whole request head (request line and headers), from
    # its opening or from the first byte of its next request; then it is closed.
    header_timeout_s: float = Field(10.0, gt=0, le=300)
    # Seconds a request body may go without a byte arriving while the gateway waits for it;
    # then it is answered 408 and closed (an upload on a slow link keeps arriving).
    body_timeout_s: float = Field(30.0, gt=0, le=600)
    # Seconds an idle kept-alive connection stays open between requests.
    keep_alive_s: int = Field(5, ge=1, le=300)
    # Seconds a connection has to finish its TLS handshake (with gateway.tls); then it is
    # closed. The request head's own time starts after it.
    tls_handshake_timeout_s: float = Field(10.0, gt=0, le=300)
    # Connections open at once; one more is answered 503 and closed.
    max_connections: int = Field(1000, ge=1, le=1_000_000)
    # The longest request head (request line and headers) read; 431/400 beyond it.
    max_header_bytes: int = Field(16 * 1024, ge=1024, le=1024 * 1024)

    @field_validator("cors_origins", mode="after")
    @classmethod
    def _origins_as_browsers_send_them(cls, values: list[str]) -> list[str]:
        # CORS compares the Origin header with each entry as a string: an entry written
        # otherwise than browsers write origins would never match.
        normalised = []
        for index, value in enumerate(values):
            origin = value if value == "*" else _origin_of(value)
            if origin is None:
                raise ValueError(
                    f"gateway.http.cors_origins[{index}]: {value[:100]!r} is not an origin; "
                    "give scheme://host[:port] (http or https), without a path, query, "
                    "fragment or credentials, or '*'"
                )
            normalised.append(origin)
        return normalised

    @field_validator("public_url", mode="after")
    @classmethod
    def _a_base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = _base_url_problem(value)
        if problem:
            raise ValueError(f"{value[:100]!r} {problem}")
        return value.rstrip("/")


def _base_url_problem(url: str) -> str | None:
    """Why `url` cannot be the start of the links the HTTP face gives out, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http:// or https:// URL with a host"
    if "?" in url or "#" in url:
        # Links are made by appending a path; a query or fragment would end up before it.
        return "has a query or fragment; give the scheme, host, port and path only"
    if parts.username is not None:
        return "has credentials; links would hand them to every caller"
    return None


# The port an origin leaves out, as browsers serialise it, for its scheme.
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_of(value: str) -> str | None:
    """`value` as a browser writes an origin (lower case, no default port, no trailing
    slash), or None when it is not one."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in value or "#" in value:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


# Room left in a message for the fields around a result's or a download chunk's bytes.
MESSAGE_ENVELOPE_BYTES = 64 * 1024


class GatewaySettings(Section):
    host: str = "127.0.0.1"
    port: Port = 50051
    # The HTTP/JSON face on the same host, with the same API keys and TLS: None turns it off,
    # 0 takes a free port.
    http_port: Port | None = 8080
    http: GatewayHttpSettings = Field(default_factory=GatewayHttpSettings)
    metrics_port: Port | None = 9401
    # /metrics takes no credential: loopback unless the operator chooses otherwise (a
    # Prometheus in another container or pod needs 0.0.0.0).
    metrics_host: str = "127.0.0.1"
    scheduler_address: str = "127.0.0.1:50052"
    api_keys: list[ApiKeySettings] = Field(default_factory=list)
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    # Allows running without API keys on a non-loopback address.
    insecure: bool = False
    tls: TlsSettings = Field(default_factory=TlsSettings)
    inline_result_limit_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_message_bytes: int = Field(64 * 1024 * 1024, ge=1024 * 1024)
    # The largest message the public gRPC listener reads from a caller: two inline input
    # images (8 MiB each: image and mask_image) and the rest of a request. Larger inputs
    # go through Gateway.Upload in chunks; a KServe call carrying several input images may
    # need more (at most max_message_bytes, which the default shrinks to when lower).
    max_request_bytes: int = Field(17 * 1024 * 1024, ge=64 * 1024)
    # Calls the public gRPC listener serves at once, streams included; gRPC refuses more with
    # RESOURCE_EXHAUSTED until some end.
    max_concurrent_rpcs: int = Field(1000, ge=1)
    # HTTP/2 streams (calls) one client connection may have open at once; more wait for one
    # to end. Keeps one connection from taking all of max_concurrent_rpcs.
    max_streams_per_connection: int = Field(256, ge=1)
    download_chunk_bytes: int = Field(1024 * 1024, ge=1024)
    # Seconds without an answer from the scheduler before the gateway reports NOT_SERVING,
    # so that readiness takes it out of rotation; SERVING again once the scheduler answers.
    scheduler_lost_after_s: float = Field(10.0, gt=0)
    # LoRA adapters one request may name (GenerateRequest.adapters, the KServe `adapters`).
    max_adapters_per_request: int = Field(DEFAULT_MAX_ADAPTERS_PER_REQUEST, ge=0, le=64)
    # On SIGTERM: seconds in-flight calls and streams (downloads, uploads, event streams) get
    # to finish after the listeners stop accepting, for gRPC and HTTP together; the rest are
    # then cut. Keep it below what the supervisor waits before SIGKILL, less any preStop
    # hook: deploy/k8s/base/gateway.yaml gives 30 s, 5 of them a preStop sleep.
    shutdown_grace_s: float = Field(20.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _results_fit_a_message(self) -> GatewaySettings:
        # A download chunk and an inline result each travel in one message from the scheduler
        # to the gateway, whose channel refuses any message above max_message_bytes.
        room = self.max_message_bytes - MESSAGE_ENVELOPE_BYTES
        for name in ("download_chunk_bytes", "inline_result_limit_bytes"):
            value = getattr(self, name)
            if value <= room:
                continue
            if name not in self.model_fields_set:
                # A default that a smaller max_message_bytes leaves no room for shrinks to fit.
                object.__setattr__(self, name, room)
                continue
            raise ValueError(
                f"gateway.{name}: {value} bytes does not fit in one message of "
                f"gateway.max_message_bytes ({self.max_message_bytes}) with its "
                f"{MESSAGE_ENVELOPE_BYTES}-byte envelope; at most {room}"
            )
        return self

    @model_validator(mode="after")
    def _requests_fit_a_message(self) -> GatewaySettings:
        # A caller's request is forwarded in one message on the scheduler channel, whose
        # messages are at most max_message_bytes.
        if self.max_request_bytes <= self.max_message_bytes:
            return self
        if "max_request_bytes" not in self.model_fields_set:
            object.__setattr__(self, "max_request_bytes", self.max_message_bytes)
            return self
        raise ValueError(
            f"gateway.max_request_bytes: {self.max_request_bytes} bytes is more than "
            f"gateway.max_message_bytes ({self.max_message_bytes}) lets the gateway forward; "
            f"at most {self.max_message_bytes}"
        )

    @model_validator(mode="after")
    def _any_origin_needs_keys(self) -> GatewaySettings:
        # Without keys every request acts, and a page on any site could read every job and
        # result through the browser of whoever runs the gateway.
        if "*" in self.http.cors_origins and not self.api_keys:
            raise ValueError(
                "gateway.http.cors_origins: '*' lets a page on any site use this gateway "
                "through its visitors' browsers, and it has no gateway.api_keys; list the "
                "origins (https://app.example) or configure keys"
            )
        return self

    @model_validator(mode="after")
    def _keys_are_unambiguous(self) -> GatewaySettings:
        # A repeated hash would silently give its key the tenant and scopes of the last entry.
        first: dict[str, int] = {}
        for index, key in enumerate(self.api_keys):
            if key.sha256 in first:
                raise ValueError(
                    f"gateway.api_keys[{index}].sha256: the same key as "
                    f"gateway.api_keys[{first[key.sha256]}]"
                )
            first[key.sha256] = index
        # With quotas configured, a key whose tenant has none is a typo, not a tenant meant to
        # run on the default quota (every model, REALTIME, 100 requests a second).
        if not self.tenants:
            return self
        for index, key in enumerate(self.api_keys):
            if key.tenant not in self.tenants:
                raise ValueError(
                    f"gateway.api_keys[{index}].tenant: {key.tenant!r} has no entry in "
                    f"gateway.tenants (tenants: {', '.join(sorted(self.tenants))})"
                )
        return self

    @field_validator("tenants", mode="after")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantSettings]) -> dict[str, TenantSettings]:
        bad = [name for name in value if not is_tenant_name(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a tenant name (pattern {TENANT_PATTERN})")
        return value

    @field_validator("scheduler_address")
    @classmethod
    def _dialable_scheduler(cls, value: str) -> str | None:
        return _dialable(value)


def _class_names_upper(value: object) -> object:
    """Keys naming priority classes, upper-cased: environment variable names are
    case-insensitive and reach us lower-cased (MEDIAMESH_SCHEDULER__PLACEMENT__BATCH__PREFER
    gives a key "batch")."""
    if isinstance(value, dict):
        return {k.upper() if isinstance(k, str) else k: v for k, v in value.items()}
    return value


class QueueSettings(Section):
    # Target seconds from acceptance to result for this modality.
    sla_s: float = Field(gt=0)
    max_depth: int = Field(10_000, ge=1)
    # A class's own target in this queue where it differs from `sla_s`, e.g. {REALTIME: 0.1}
    # for interactive callers: lower-class batches are paused for a job that would miss it.
    class_sla_s: dict[PriorityName, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)

    _class_names_in_any_case = field_validator("class_sla_s", mode="before")(
        lambda value: _class_names_upper(value)
    )

    def sla_for(self, priority: str) -> float:
        """The latency target of a job of class `priority` (its name) in this queue."""
        return next((s for c, s in self.class_sla_s.items() if c == priority), self.sla_s)


class PlacementSettings(Section):
    """Where jobs of one priority class may run."""

    prefer: Pool = "on-demand"
    allow: list[Pool] = Field(default_factory=lambda: _pools("on-demand"))
    # A job preferring spot that found no spot room for this long goes to on-demand.
    fallback_after_s: float = Field(30.0, ge=0)


def _default_queues() -> dict[str, QueueSettings]:
    return {
        "image": QueueSettings(sla_s=10.0),
        "video": QueueSettings(sla_s=120.0),
        "audio": QueueSettings(sla_s=30.0),
    }


def _pools(*pools: Pool) -> list[Pool]:
    return list(pools)


def _default_placement() -> dict[PriorityName, PlacementSettings]:
    return {
        "REALTIME": PlacementSettings(prefer="on-demand", allow=["on-demand"]),
        "STANDARD": PlacementSettings(prefer="on-demand", allow=["on-demand"]),
        "BATCH": PlacementSettings(prefer="spot", allow=["spot", "on-demand"]),
    }


def _default_prices() -> dict[Pool, float]:
    return {"on-demand": 4.0, "spot": 1.4}


class SchedulerSettings(Section):
    host: str = "127.0.0.1"
    port: Port = 50052
    metrics_port: Port | None = 9402
    # As the gateway's: loopback unless chosen otherwise.
    metrics_host: str = "127.0.0.1"
    store_path: Path = Path(".mediamesh/state/jobs.sqlite3")
    artifact_dir: Path = Path(".mediamesh/artifacts")
    # Results on local disk (under artifact_dir) or in an S3-compatible bucket; checkpoints
    # always stay under artifact_dir/checkpoints, a folder the workers share.
    artifacts: ArtifactSettings = Field(default_factory=ArtifactSettings)
    # A config that names some queues keeps the defaults for the others.
    queues: dict[str, QueueSettings] = Field(default_factory=_default_queues)
    # Seconds of waiting that raise a job's effective priority by one class.
    aging_s_per_class: float = Field(30.0, gt=0)
    heartbeat_interval_s: float = Field(1.0, gt=0)
    heartbeat_misses_allowed: int = Field(3, ge=1)
    max_attempts: int = Field(3, ge=1)
    retention_s: float = Field(24 * 3600.0, gt=0)
    # Ended jobs kept in memory, the ones that ended last; older ones within retention are
    # read back from the job store when asked for (scheduler/ended_jobs.py).
    ended_jobs_in_memory: int = Field(10_000, ge=0)
    placement: dict[PriorityName, PlacementSettings] = Field(default_factory=_default_placement)
    # LoRA adapters one request may name; the scheduler checks again what gateways sent.
    max_adapters_per_request: int = Field(DEFAULT_MAX_ADAPTERS_PER_REQUEST, ge=0, le=64)
    # A worker with a batch's adapters loaded is preferred while its load is at most this
    # many device-seconds above the least-loaded worker's (plus the adapters' load time).
    adapter_affinity_margin_s: float = Field(1.0, ge=0)
    # Seconds an adapter is assumed to take to load before any worker measured it.
    adapter_load_prior_s: float = Field(0.5, ge=0)
    # Seconds a cold model is assumed to take to load on a worker before any worker
    # measured it; a measured load replaces it (scheduler/core/residency.py).
    model_load_prior_s: float = Field(10.0, ge=0)
    # Price per device-hour of each pool, for cost accounting.
    prices_per_device_hour: dict[Pool, float] = Field(default_factory=_default_prices)
    # Input images up to this many bytes are kept inside their job (its store row and the
    # JobSpec); larger ones are files in the artifact store that workers read. At most the
    # JobSpec's InputRef.data limit (limits.INPUT_IMAGE, 8 MiB).
    inline_input_bytes: int = Field(64 * 1024, ge=0, le=8 * 1024 * 1024)
    # Uploads (the Upload rpc): how long one lives unused, the bytes of live uploads one
    # tenant may hold (a gateway may send a tenant's own), and the largest single upload.
    upload_ttl_s: float = Field(3600.0, gt=0)
    upload_quota_bytes: int = Field(1024 * 1024 * 1024, ge=1)
    max_upload_bytes: int = Field(64 * 1024 * 1024, ge=1)
    # Save a checkpoint every N steps by modality (0 = only on preemption).
    checkpoint_every_steps: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    # Pausing a lower-class batch at its next step boundary when a higher-class job would
    # otherwise miss its queue's SLA: at most this many pauses per job (0 = never pause) ...
    pause_max_per_job: int = Field(1, ge=0)
    # ... and never within a job's first this many steps.
    pause_min_steps: int = Field(2, ge=0)
    # Give a worker its next batch once every job of its running batch is at its last step,
    # so that its device does not idle between batches.
    dispatch_ahead: bool = True
    # ...and not at once, but this long before the running batch is expected to end (its
    # model's decode-and-encode tail, learned from earlier batches): the next batch then
    # forms as late as it can and holds everyone who arrived by then. Cover the time a
    # batch takes to reach the worker and start; 0 forms it at the expected end.
    dispatch_ahead_lead_s: float = Field(0.005, ge=0.0, le=10.0)
    # Where the running batch's learned tail ends, that is when its worker is expected to
    # want the next batch: at the batch's first result (`first_result`: the device is free
    # and the rest encode on the host's cores), at its last (`last_result`: encoding takes
    # the cores the next batch computes on), or `auto`, by device kind: first on an
    # accelerator, last on a CPU worker.
    dispatch_ahead_tail_end: Literal["auto", "first_result", "last_result"] = "auto"
    # Let a batch for an idle worker wait out its model's batch window to fill up. Off by
    # default: an idle device starts at once (no window at low load), and only the batch
    # given ahead to a busy worker waits for its window to fill.
    batch_window_when_idle: bool = False
    max_message_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    # Allows running without an internal credential on a non-loopback address.
    insecure: bool = False
    # A plaintext port serving only grpc.health.v1, for probes that cannot do TLS (the
    # kubelet's); None: health is served on `port` only.
    health_port: Port | None = None

    _class_names_in_any_case = field_validator("placement", mode="before")(
        lambda value: _class_names_upper(value)
    )

    @field_validator("placement", mode="after")
    @classmethod
    def _every_class_placed(
        cls, value: dict[PriorityName, PlacementSettings]
    ) -> dict[PriorityName, PlacementSettings]:
        """A config that names some classes keeps the defaults for the others."""
        return {**_default_placement(), **value}

    @field_validator("queues", "checkpoint_every_steps", mode="after")
    @classmethod
    def _keyed_by_modality(cls, value: dict[str, _Value]) -> dict[str, _Value]:
        unknown = sorted(set(value) - set(QUEUE_NAMES))
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))}: not a modality; keys are "
                f"{', '.join(QUEUE_NAMES)}"
            )
        return value

    @field_validator("queues", mode="after")
    @classmethod
    def _every_queue_configured(cls, value: dict[str, QueueSettings]) -> dict[str, QueueSettings]:
        """As placement: naming one queue does not leave the other modalities without one."""
        return {**_default_queues(), **value}

    @field_validator("prices_per_device_hour", mode="after")
    @classmethod
    def _every_pool_priced(cls, value: dict[Pool, float]) -> dict[Pool, float]:
        """As queues: pricing one pool keeps the default price of the other, which would
        otherwise cost nothing in the ledger, the metric and `status`'s on-demand figure."""
        for pool, price in value.items():
            if not (math.isfinite(price) and price >= 0):
                raise ValueError(f"{pool}: {price} is not a price; give 0 or more per hour")
        return {**_default_prices(), **value}


class WorkerSettings(Section):
    # Names its log file, its metrics and its registration: letters, digits, . _ -.
    worker_id: str = "worker-0"

    host: str = "127.0.0.1"
    port: Port = 50060
    # Address the scheduler dials; defaults to host:port.
    advertise_address: str | None = None
    metrics_port: Port | None = 9410
    # As the gateway's: loopback unless chosen otherwise.
    metrics_host: str = "127.0.0.1"
    scheduler_address: str = "127.0.0.1:50052"
    pool: Pool = "on-demand"
    # cpu, cuda, cuda:N or mps: where data mode places its pipelines.
    device: str = "cpu"
    # Registry models this worker hosts; empty hosts every model. From the environment,
    # MEDIAMESH_WORKER__MODELS=a,b also works (NoDecode: not only JSON).
    models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Seconds a draining worker waits for running jobs to reach a checkpoint.
    drain_grace_s: float = Field(25.0, gt=0)
    checkpoint_dir: Path = Path(".mediamesh/artifacts/checkpoints")
    max_message_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024)
    # LoRA adapters kept loaded per model; the least recently used one beyond it is evicted.
    max_loaded_adapters: int = Field(DEFAULT_MAX_LOADED_ADAPTERS, ge=1, le=1024)
    # Single-device models kept loaded at once, by count and by weight bytes (0: no limit,
    # every hosted model loads at start); past either, the least recently used one is
    # evicted when a batch needs a cold one, which then loads (worker/residency.py).
    max_resident_models: int = Field(0, ge=0)
    max_resident_bytes: int = Field(0, ge=0)
    # torch intra-op threads for this worker; 0 leaves torch's default.
    torch_threads: int = Field(0, ge=0)
    # Lets the worker download a hub model that is not in the Hugging Face cache at start
    # (HF_TOKEN honoured); off, such a model fails the start naming `mediamesh models pull`.
    allow_downloads: bool = False
    # Allows running without an internal credential on a non-loopback address.
    insecure: bool = False
    # A plaintext port serving only grpc.health.v1 (see SchedulerSettings.health_port).
    health_port: Port | None = None

    @field_validator("models", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return json_or_csv(value)

    @field_validator("models")
    @classmethod
    def _each_model_once(cls, models: list[str]) -> list[str]:
        twice = sorted({name for name in models if models.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once; list each model once")
        return models

    @property
    def address(self) -> str:
        return self.advertise_address or f"{self.host}:{self.port}"

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        # Another name failed only at the first model's load, as torch's "Invalid device
        # string", or, for a worker of echo alone, not at all.
        if not _DEVICE.fullmatch(value):
            raise ValueError(f"{value[:64]!r} is not a device; write cpu, cuda, cuda:N or mps")
        return value

    @field_validator("worker_id")
    @classmethod
    def _usable_worker_id(cls, value: str) -> str:
        # The scheduler refuses other ids at registration: the worker then retried forever
        # and `up` waited out its ready timeout (or crashed on a "/" in the log file name).
        if not re.fullmatch(WORKER_ID_PATTERN, value):
            raise ValueError(
                f"{value[:64]!r} is not a worker id: 1 to 128 letters, digits, '.', '_' or "
                "'-', starting with a letter or digit"
            )
        return value

    @field_validator("scheduler_address", "advertise_address")
    @classmethod
    def _dialable_addresses(cls, value: str | None) -> str | None:
        return _dialable(value)


# Bind addresses that mean every interface: a client on this host dials loopback instead.
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", "[::]", ""})


class MeshConfig(Section):
    """One file configures the whole mesh; each process takes its own section."""

    models_dir: Path = Path(".mediamesh/models")
    registry_path: Path | None = None
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    internal_auth: InternalAuthSettings = Field(default_factory=InternalAuthSettings)
    internal_tls: InternalTlsSettings = Field(default_factory=InternalTlsSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    # Signed HTTP callbacks about jobs (the scheduler delivers them).
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    # The workers `mediamesh up` starts; `mediamesh worker --worker-id ID` runs one of them.
    workers: list[WorkerSettings] = Field(
        default_factory=lambda: [
            WorkerSettings(worker_id="worker-0", port=50060, metrics_port=9410),
            WorkerSettings(worker_id="worker-1", port=50061, metrics_port=9411),
        ]
    )
    # A worker started on its own (a k8s pod): a list entry cannot be named by an environment
    # variable, a section can (MEDIAMESH_WORKER__WORKER_ID from the pod's name).
    worker: WorkerSettings | None = None

    @field_validator("workers")
    @classmethod
    def _worker_ids_are_unique(cls, workers: list[WorkerSettings]) -> list[WorkerSettings]:
        # `mediamesh worker --worker-id ID` takes the first entry of that id, so a second
        # one's ports went unused, both processes logged to one file, and the scheduler
        # took each for the other registering again.
        seen: dict[str, int] = {}
        for index, worker in enumerate(workers):
            if worker.worker_id in seen:
                raise ValueError(
                    f"workers[{index}].worker_id {worker.worker_id!r} repeats "
                    f"workers[{seen[worker.worker_id]}]'s; each worker needs its own"
                )
            seen[worker.worker_id] = index
        return workers

    @model_validator(mode="after")
    def _clients_dial_this_scheduler(self) -> MeshConfig:
        # A scheduler moved to another port (or host) in this file is where its gateway and
        # workers go, unless they name an address of their own (a Service name, another
        # host): otherwise they dial the default port and wait there, silently, forever.
        target = self.scheduler_dial_address
        sections = [self.gateway, *self.workers, *([self.worker] if self.worker else [])]
        for section in sections:
            if "scheduler_address" not in section.model_fields_set:
                object.__setattr__(section, "scheduler_address", target)
        return self

    @property
    def scheduler_dial_address(self) -> str:
        """Where a client on this host reaches the scheduler this file configures."""
        host = self.scheduler.host
        return f"{'127.0.0.1' if host in _ANY_ADDRESS else host}:{self.scheduler.port}"

    def standalone_worker(self, worker_id: str | None = None) -> WorkerSettings:
        """The settings `mediamesh worker` starts from, before its flags: the `workers` entry
        named `worker_id`, else the `worker` section, else the defaults."""
        named = [w for w in self.workers if worker_id is not None and w.worker_id == worker_id]
        if named:
            return named[0]
        base = self.worker or WorkerSettings(scheduler_address=self.scheduler_dial_address)
        if worker_id is None:
            return base
        return base.model_copy(update={"worker_id": worker_id})


def load_mesh_config(
    path: Path | None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> MeshConfig:
    """The mesh config from `path` (None: defaults), then MEDIAMESH_* variables of `environ`
    (None: this process's environment), then dotted `overrides` (flags), highest last.

    An unset telemetry.otlp_endpoint or telemetry.otlp_export_timeout_s is taken from the
    standard OpenTelemetry variables (OTEL_ENDPOINT_VARIABLES, OTEL_TIMEOUT_VARIABLES) of the
    same `environ`, when one is set.

    Raises ConfigError with one line naming the file line or variable at fault.
    """
    environ = os.environ if environ is None else environ
    config = load_layered(MeshConfig, path, overrides, environ)
    telemetry = _with_otel_variables(config.telemetry, environ)
    if telemetry is config.telemetry:
        return config
    return config.model_copy(update={"telemetry": telemetry})


def _with_otel_variables(
    telemetry: TelemetrySettings, environ: Mapping[str, str]
) -> TelemetrySettings:
    """`telemetry` with the OTLP settings no layer gave taken from the OpenTelemetry
    variables that are set; `telemetry` itself when there are none."""
    given = telemetry.model_fields_set
    update: dict[str, object] = {}
    endpoint = _first_set(environ, OTEL_ENDPOINT_VARIABLES)
    if endpoint is not None and "otlp_endpoint" not in given:
        update["otlp_endpoint"] = endpoint[1]
    timeout = _first_set(environ, OTEL_TIMEOUT_VARIABLES)
    if timeout is not None and "otlp_export_timeout_s" not in given:
        update["otlp_export_timeout_s"] = _otel_timeout_s(*timeout)
    return telemetry.model_copy(update=update) if update else telemetry


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of `names` set in `environ` to more than blanks, with its value stripped (an
    empty variable counts as unset, as the OpenTelemetry spec has it)."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _otel_timeout_s(name: str, value: str) -> float:
    """The milliseconds of the OpenTelemetry variable `name`, in seconds; ConfigError naming
    it when `value` is not a number of milliseconds within the setting's bounds (model_copy
    does not validate)."""
    low_ms, high_ms = (bound * 1000 for bound in OTLP_EXPORT_TIMEOUT_BOUNDS_S)
    try:
        milliseconds = float(value)
    except ValueError:
        milliseconds = math.nan
    # Written so that NaN fails it too.
    if not low_ms <= milliseconds <= high_ms:
        raise ConfigError(
            f"env {name}: {value!r} is not a number of milliseconds from {low_ms:g} to "
            f"{high_ms:g} (the OpenTelemetry unit: 2000 is 2 s)"
        )
    return milliseconds / 1000
