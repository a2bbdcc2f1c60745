from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_UNSPECIFIED: _ClassVar[Priority]
    REALTIME: _ClassVar[Priority]
    STANDARD: _ClassVar[Priority]
    BATCH: _ClassVar[Priority]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    QUEUED: _ClassVar[JobState]
    DISPATCHED: _ClassVar[JobState]
    RUNNING: _ClassVar[JobState]
    SUCCEEDED: _ClassVar[JobState]
    FAILED: _ClassVar[JobState]
    CANCELLED: _ClassVar[JobState]
    EXPIRED: _ClassVar[JobState]
PRIORITY_UNSPECIFIED: Priority
REALTIME: Priority
STANDARD: Priority
BATCH: Priority
JOB_STATE_UNSPECIFIED: JobState
QUEUED: JobState
DISPATCHED: JobState
RUNNING: JobState
SUCCEEDED: JobState
FAILED: JobState
CANCELLED: JobState
EXPIRED: JobState

class GenerateRequest(_message.Message):
    __slots__ = ("model", "prompt", "negative_prompt", "steps", "seed", "width", "height", "num_frames", "guidance_scale", "priority", "timeout_ms", "idempotency_key", "duration_s", "output_format", "output_quality", "fps", "preview_every_steps", "image", "mask_image", "strength", "image_id", "mask_image_id", "adapters", "result_as_url", "webhook", "cache")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_PROMPT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_QUALITY_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MASK_IMAGE_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MASK_IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    RESULT_AS_URL_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    negative_prompt: str
    steps: int
    seed: int
    width: int
    height: int
    num_frames: int
    guidance_scale: float
    priority: Priority
    timeout_ms: int
    idempotency_key: str
    duration_s: float
    output_format: str
    output_quality: int
    fps: int
    preview_every_steps: int
    image: bytes
    mask_image: bytes
    strength: float
    image_id: str
    mask_image_id: str
    adapters: _containers.RepeatedCompositeFieldContainer[AdapterRef]
    result_as_url: bool
    webhook: Webhook
    cache: bool
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., negative_prompt: _Optional[str] = ..., steps: _Optional[int] = ..., seed: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., num_frames: _Optional[int] = ..., guidance_scale: _Optional[float] = ..., priority: _Optional[_Union[Priority, str]] = ..., timeout_ms: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., duration_s: _Optional[float] = ..., output_format: _Optional[str] = ..., output_quality: _Optional[int] = ..., fps: _Optional[int] = ..., preview_every_steps: _Optional[int] = ..., image: _Optional[bytes] = ..., mask_image: _Optional[bytes] = ..., strength: _Optional[float] = ..., image_id: _Optional[str] = ..., mask_image_id: _Optional[str] = ..., adapters: _Optional[_Iterable[_Union[AdapterRef, _Mapping]]] = ..., result_as_url: _Optional[bool] = ..., webhook: _Optional[_Union[Webhook, _Mapping]] = ..., cache: _Optional[bool] = ...) -> None: ...

class AdapterRef(_message.Message):
    __slots__ = ("name", "scale")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    scale: float
    def __init__(self, name: _Optional[str] = ..., scale: _Optional[float] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ("url", "events")
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    url: str
    events: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, url: _Optional[str] = ..., events: _Optional[_Iterable[str]] = ...) -> None: ...

class Preview(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ("position", "eta_s", "queue")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ETA_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    position: int
    eta_s: float
    queue: str
    def __init__(self, position: _Optional[int] = ..., eta_s: _Optional[float] = ..., queue: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("step", "total_steps", "attempt", "preview")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    step: int
    total_steps: int
    attempt: int
    preview: Preview
    def __init__(self, step: _Optional[int] = ..., total_steps: _Optional[int] = ..., attempt: _Optional[int] = ..., preview: _Optional[_Union[Preview, _Mapping]] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("size_bytes", "sha256")
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    size_bytes: int
    sha256: str
    def __init__(self, size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("data", "mime_type", "seed", "artifact", "url", "url_expires_unix_ms")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    URL_EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    seed: int
    artifact: ArtifactRef
    url: str
    url_expires_unix_ms: int
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., seed: _Optional[int] = ..., artifact: _Optional[_Union[ArtifactRef, _Mapping]] = ..., url: _Optional[str] = ..., url_expires_unix_ms: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Notice(_message.Message):
    __slots__ = ("kind", "message", "worker_id", "attempt")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    message: str
    worker_id: str
    attempt: int
    def __init__(self, kind: _Optional[str] = ..., message: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("job_id", "queued", "progress", "result", "error", "notice", "state")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    queued: Queued
    progress: Progress
    result: Result
    error: Error
    notice: Notice
    state: JobState
    def __init__(self, job_id: _Optional[str] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., notice: _Optional[_Union[Notice, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ...) -> None: ...

class ModelLimits(_message.Message):
    __slots__ = ("default_steps", "max_steps", "default_width", "default_height", "max_width", "max_height", "size_multiple", "default_num_frames", "max_num_frames", "default_duration_s", "max_duration_s", "default_guidance_scale", "max_guidance_scale", "max_batch", "max_prompt_chars")
    DEFAULT_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_WIDTH_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_WIDTH_FIELD_NUMBER: _ClassVar[int]
    MAX_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SIZE_MULTIPLE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    MAX_GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_PROMPT_CHARS_FIELD_NUMBER: _ClassVar[int]
    default_steps: int
    max_steps: int
    default_width: int
    default_height: int
    max_width: int
    max_height: int
    size_multiple: int
    default_num_frames: int
    max_num_frames: int
    default_duration_s: float
    max_duration_s: float
    default_guidance_scale: float
    max_guidance_scale: float
    max_batch: int
    max_prompt_chars: int
    def __init__(self, default_steps: _Optional[int] = ..., max_steps: _Optional[int] = ..., default_width: _Optional[int] = ..., default_height: _Optional[int] = ..., max_width: _Optional[int] = ..., max_height: _Optional[int] = ..., size_multiple: _Optional[int] = ..., default_num_frames: _Optional[int] = ..., max_num_frames: _Optional[int] = ..., default_duration_s: _Optional[float] = ..., max_duration_s: _Optional[float] = ..., default_guidance_scale: _Optional[float] = ..., max_guidance_scale: _Optional[float] = ..., max_batch: _Optional[int] = ..., max_prompt_chars: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "modality", "pipeline", "parallelism", "limits", "ready", "mime_type", "devices", "accepted_fields", "output_formats", "preemption", "previews", "inputs", "adapters", "default_strength", "warmup")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODALITY_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FORMATS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    PREVIEWS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_STRENGTH_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    name: str
    modality: str
    pipeline: str
    parallelism: str
    limits: ModelLimits
    ready: bool
    mime_type: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    accepted_fields: _containers.RepeatedScalarFieldContainer[str]
    output_formats: _containers.RepeatedScalarFieldContainer[str]
    preemption: str
    previews: bool
    inputs: _containers.RepeatedScalarFieldContainer[str]
    adapters: _containers.RepeatedCompositeFieldContainer[AdapterInfo]
    default_strength: float
    warmup: str
    def __init__(self, name: _Optional[str] = ..., modality: _Optional[str] = ..., pipeline: _Optional[str] = ..., parallelism: _Optional[str] = ..., limits: _Optional[_Union[ModelLimits, _Mapping]] = ..., ready: _Optional[bool] = ..., mime_type: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ..., accepted_fields: _Optional[_Iterable[str]] = ..., output_formats: _Optional[_Iterable[str]] = ..., preemption: _Optional[str] = ..., previews: _Optional[bool] = ..., inputs: _Optional[_Iterable[str]] = ..., adapters: _Optional[_Iterable[_Union[AdapterInfo, _Mapping]]] = ..., default_strength: _Optional[float] = ..., warmup: _Optional[str] = ...) -> None: ...

class AdapterInfo(_message.Message):
    __slots__ = ("name", "default_scale")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SCALE_FIELD_NUMBER: _ClassVar[int]
    name: str
    default_scale: float
    def __init__(self, name: _Optional[str] = ..., default_scale: _Optional[float] = ...) -> None: ...

class DeletedJob(_message.Message):
    __slots__ = ("job_id", "state", "result_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: JobState
    result_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., result_bytes: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "model", "state", "priority", "tenant", "created_unix_ms", "finished_unix_ms", "attempts", "step", "total_steps", "result", "error", "seed", "worker_id", "batch_id", "prompt", "steps", "width", "height", "num_frames", "fps", "paused", "expires_unix_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    model: str
    state: JobState
    priority: Priority
    tenant: str
    created_unix_ms: int
    finished_unix_ms: int
    attempts: int
    step: int
    total_steps: int
    result: Result
    error: Error
    seed: int
    worker_id: str
    batch_id: str
    prompt: str
    steps: int
    width: int
    height: int
    num_frames: int
    fps: int
    paused: bool
    expires_unix_ms: int
    def __init__(self, job_id: _Optional[str] = ..., model: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., priority: _Optional[_Union[Priority, str]] = ..., tenant: _Optional[str] = ..., created_unix_ms: _Optional[int] = ..., finished_unix_ms: _Optional[int] = ..., attempts: _Optional[int] = ..., step: _Optional[int] = ..., total_steps: _Optional[int] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., seed: _Optional[int] = ..., worker_id: _Optional[str] = ..., batch_id: _Optional[str] = ..., prompt: _Optional[str] = ..., steps: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., num_frames: _Optional[int] = ..., fps: _Optional[int] = ..., paused: _Optional[bool] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...
