"""The limit of every string and bytes field a service accepts, declared once.

Pure: each api layer walks a request message and looks every string and bytes field up
here by message and field name (`mediamesh.common.api.bounds`): the gateway for its callers,
the scheduler again for what gateways and workers send it, the worker for the scheduler's
batches. A field without an entry falls under DEFAULT_LIMIT, so nothing is unbounded, and a
test asserts that every field of every request message has an entry of its own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.tenants import TENANT_PATTERN


@dataclass(frozen=True)
class FieldLimit:
    """At most `max_bytes` (UTF-8 bytes for text), and a full match of `pattern` when set."""

    max_bytes: int
    pattern: str | None = None
    # A registry limit (a `LimitParams` field) that bounds the value further once the model
    # is known; `mediamesh.common.params.resolve` checks it.
    per_model: str | None = None

    def check(self, field: str, value: str | bytes) -> None:
        """InvalidArgument naming `field` and the limit when `value` breaks it."""
        # A character is at least one UTF-8 byte: a string this long is over without encoding.
        size = len(value)
        if size <= self.max_bytes and isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
        if size > self.max_bytes:
            raise InvalidArgument(f"{field}: {size} bytes; the limit is {self.max_bytes} bytes")
        if isinstance(value, str) and not self.matches(value):
            raise InvalidArgument(
                f"{field}: {value[:64]!r} does not match the pattern {self.pattern}"
            )

    def matches(self, value: str) -> bool:
        """Whether `value` fits the pattern (always, when there is none)."""
        return self.pattern is None or _compiled(self.pattern).fullmatch(value) is not None


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# Names: model names in the registry, and ids the mesh makes (uuid hex job ids, batch ids
# made of a worker id and a counter). Safe in logs, metric labels and file names.
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
WORKER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
BATCH_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,159}$"
# The longest prompt any registry entry may allow (`limits.max_prompt_chars`); each model's
# own limit is usually far lower.
MAX_PROMPT_CHARS = 16_384
# Largest `batching.max_batch` of a registry entry: the most prompts one KServe call carries.
MAX_BATCH = 256
# `timeout_ms` is a uint32 on the wire: about 49.7 days.
MAX_TIMEOUT_MS = 2**32 - 1
# The largest seed a job may have. The field is a uint64, but a seed must also fit a signed
# 64-bit integer, as the KServe API's INT64 `seed` output reports it.
MAX_SEED = 2**63 - 1
# Triton encodes each BYTES element behind a 4-byte length.
_BYTES_ELEMENT_HEADER = 4

MODEL_NAME = FieldLimit(128, MODEL_NAME_PATTERN)
JOB_ID = FieldLimit(128, JOB_ID_PATTERN)
TENANT = FieldLimit(63, TENANT_PATTERN)
WORKER_ID = FieldLimit(128, WORKER_ID_PATTERN)
BATCH_ID = FieldLimit(160, BATCH_ID_PATTERN)
IDEMPOTENCY_KEY = FieldLimit(256)
# UTF-8 takes at most 4 bytes a character.
PROMPT = FieldLimit(4 * MAX_PROMPT_CHARS, per_model="max_prompt_chars")
ADDRESS = FieldLimit(512)
# W3C trace context headers: `traceparent` is 55 characters, `tracestate` at most 512.
TRACE_HEADER_NAME = FieldLimit(64)
TRACE_HEADER_VALUE = FieldLimit(512)
POOL = FieldLimit(32, r"^[a-z][a-z0-9-]{0,31}$")
PARALLELISM = FieldLimit(16, r"^[a-z]{1,16}$")
# HostedModel.warmup: "", "none", "warming" or "warm".
WARMUP_STATE = FieldLimit(16, r"^[a-z]{0,16}$")
DEVICE_ID = FieldLimit(64)
CHECKPOINT_REF = FieldLimit(4096)
# A format name ("png", "webm", ...); the model's list decides which are allowed.
OUTPUT_FORMAT = FieldLimit(16, r"^[A-Za-z0-9]{0,16}$")
# An input image sent inline; larger ones go through the Upload rpc (chunks of UPLOAD_CHUNK).
INPUT_IMAGE = FieldLimit(8 * 1024 * 1024)
UPLOAD_CHUNK = FieldLimit(4 * 1024 * 1024)
SHA256_HEX = FieldLimit(64, r"^([0-9a-f]{64})?$")
MIME_TYPE = FieldLimit(64, r"^([a-z]+/[a-z0-9.+-]{1,48})?$")
# Upload ids the scheduler makes, like job ids.
INPUT_ID = FieldLimit(128, r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127})?$")
ADAPTER_NAME = MODEL_NAME
WEBHOOK_URL = FieldLimit(2048, r"^https?://[^\s]{1,2040}$")
WEBHOOK_EVENT = FieldLimit(16, r"^(completed|failed|progress)$")
# The Open Inference Protocol (KServe v2) request.
KSERVE_VERSION = FieldLimit(32)
KSERVE_REQUEST_ID = FieldLimit(256)
KSERVE_NAME = FieldLimit(64)
KSERVE_DATATYPE = FieldLimit(16)
KSERVE_PARAMETER_NAME = FieldLimit(64)
KSERVE_PARAMETER_STRING = FieldLimit(256)
# The largest element is an input image (KServe inputs `image`, `mask_image`); the gateway
# holds prompt elements to PROMPT itself (`gateway.core.inference_call`).
KSERVE_ELEMENT = INPUT_IMAGE
KSERVE_RAW_TENSOR = FieldLimit(
    max(
        MAX_BATCH * (_BYTES_ELEMENT_HEADER + PROMPT.max_bytes),
        8 * (_BYTES_ELEMENT_HEADER + INPUT_IMAGE.max_bytes),
    )
)
# Jobs in one page of a job listing (ListJobs, GET /v1/jobs, GET /v1/videos).
MAX_JOB_PAGE_SIZE = 100
# Any string or bytes field with no entry below (a field added without one: tests catch it).
DEFAULT_LIMIT = FieldLimit(1024)

# By message full name, then field name. Map fields are declared on their entry message
# ("<Message>.<Field>Entry", fields `key` and `value`).
REQUEST_LIMITS: Mapping[str, Mapping[str, FieldLimit]] = {
    # mediamesh.v1.Gateway
    "mediamesh.v1.GenerateRequest": {
        "model": MODEL_NAME,
        "prompt": PROMPT,
        "negative_prompt": PROMPT,
        "idempotency_key": IDEMPOTENCY_KEY,
        "output_format": OUTPUT_FORMAT,
        "image": INPUT_IMAGE,
        "mask_image": INPUT_IMAGE,
        "image_id": INPUT_ID,
        "mask_image_id": INPUT_ID,
    },
    "mediamesh.v1.AdapterRef": {"name": ADAPTER_NAME},
    "mediamesh.v1.Webhook": {"url": WEBHOOK_URL, "events": WEBHOOK_EVENT},
    "mediamesh.v1.UploadChunk": {
        "data": UPLOAD_CHUNK,
        "sha256": SHA256_HEX,
        "mime_type": MIME_TYPE,
    },
    "mediamesh.v1.WatchRequest": {"job_id": JOB_ID},
    "mediamesh.v1.CancelRequest": {"job_id": JOB_ID},
    "mediamesh.v1.GetJobRequest": {"job_id": JOB_ID},
    "mediamesh.v1.DeleteJobRequest": {"job_id": JOB_ID},
    "mediamesh.v1.ListJobsRequest": {"models": MODEL_NAME, "after_job_id": JOB_ID},
    "mediamesh.v1.DownloadRequest": {"job_id": JOB_ID},
    # mediamesh.v1.Scheduler
    "mediamesh.v1.SubmitRequest": {"tenant": TENANT},
    "mediamesh.v1.ScopedUploadChunk": {"tenant": TENANT},
    "mediamesh.v1.ScopedJobRequest": {"job_id": JOB_ID, "tenant": TENANT},
    "mediamesh.v1.JobLinkRequest.TraceContextEntry": {
        "key": TRACE_HEADER_NAME,
        "value": TRACE_HEADER_VALUE,
    },
    "mediamesh.v1.ScopedListJobsRequest": {"tenant": TENANT},
    "mediamesh.v1.ScopedModelStatisticsRequest": {"models": MODEL_NAME, "tenant": TENANT},
    "mediamesh.v1.WorkerRegistration": {"worker_id": WORKER_ID, "address": ADDRESS, "pool": POOL},
    "mediamesh.v1.Device": {"id": DEVICE_ID},
    "mediamesh.v1.HostedModel": {
        "name": MODEL_NAME,
        "parallelism": PARALLELISM,
        "device_ids": DEVICE_ID,
        "warmup": WARMUP_STATE,
    },
    "mediamesh.v1.WorkerHeartbeat.MemoryUsedBytesEntry": {"key": DEVICE_ID},
    "mediamesh.v1.LoadedAdapter": {"name": ADAPTER_NAME},
    "mediamesh.v1.ModelAdapters": {"model": MODEL_NAME},
    "mediamesh.v1.BatchesEnded": {"batch_ids": BATCH_ID},
    # mediamesh.v1.Worker
    "mediamesh.v1.RunBatchRequest": {
        "batch_id": BATCH_ID,
        "model": MODEL_NAME,
        "pause_batch_id": BATCH_ID,
    },
    "mediamesh.v1.BatchLinkRequest": {"stop": BATCH_ID},
    "mediamesh.v1.BatchLinkRequest.TraceContextEntry": {
        "key": TRACE_HEADER_NAME,
        "value": TRACE_HEADER_VALUE,
    },
    "mediamesh.v1.JobSpec": {
        "job_id": JOB_ID,
        "prompt": PROMPT,
        "negative_prompt": PROMPT,
        "resume_checkpoint": CHECKPOINT_REF,
        "output_format": OUTPUT_FORMAT,
    },
    "mediamesh.v1.InputRef": {
        "data": INPUT_IMAGE,
        "artifact": CHECKPOINT_REF,
        "sha256": SHA256_HEX,
    },
    "mediamesh.v1.CancelJobsRequest": {"job_ids": JOB_ID},
    # inference.GRPCInferenceService
    "inference.ModelReadyRequest": {"name": MODEL_NAME, "version": KSERVE_VERSION},
    "inference.ModelMetadataRequest": {"name": MODEL_NAME, "version": KSERVE_VERSION},
    "inference.ModelConfigRequest": {"name": MODEL_NAME, "version": KSERVE_VERSION},
    "inference.ModelStatisticsRequest": {"name": MODEL_NAME, "version": KSERVE_VERSION},
    # One repository, named by the empty string: a longer name is unknown anyway.
    "inference.RepositoryIndexRequest": {"repository_name": MODEL_NAME},
    "inference.ModelInferRequest": {
        "model_name": MODEL_NAME,
        "model_version": KSERVE_VERSION,
        "id": KSERVE_REQUEST_ID,
        "raw_input_contents": KSERVE_RAW_TENSOR,
    },
    "inference.ModelInferRequest.ParametersEntry": {"key": KSERVE_PARAMETER_NAME},
    "inference.ModelInferRequest.InferInputTensor": {
        "name": KSERVE_NAME,
        "datatype": KSERVE_DATATYPE,
    },
    "inference.ModelInferRequest.InferInputTensor.ParametersEntry": {"key": KSERVE_PARAMETER_NAME},
    "inference.ModelInferRequest.InferRequestedOutputTensor": {"name": KSERVE_NAME},
    "inference.ModelInferRequest.InferRequestedOutputTensor.ParametersEntry": {
        "key": KSERVE_PARAMETER_NAME
    },
    "inference.InferParameter": {"string_param": KSERVE_PARAMETER_STRING},
    "inference.InferTensorContents": {"bytes_contents": KSERVE_ELEMENT},
}


# Fields a request means nothing without, by message full name: a job's id, empty, would
# otherwise be looked up and answered NOT_FOUND ("no job ''") rather than named as missing.
REQUIRED_FIELDS: Mapping[str, tuple[str, ...]] = {
    name: ("job_id",)
    for name in (
        "mediamesh.v1.WatchRequest",
        "mediamesh.v1.CancelRequest",
        "mediamesh.v1.GetJobRequest",
        "mediamesh.v1.DeleteJobRequest",
        "mediamesh.v1.DownloadRequest",
        "mediamesh.v1.ScopedJobRequest",
    )
}


def limit_of(message: str, field: str) -> FieldLimit:
    """The declared limit of `field` of the message named `message`, else DEFAULT_LIMIT."""
    return REQUEST_LIMITS.get(message, {}).get(field, DEFAULT_LIMIT)
