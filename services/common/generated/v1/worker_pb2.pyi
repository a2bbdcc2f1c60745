from mediamesh.common.generated.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobSpec(_message.Message):
    __slots__ = ("job_id", "prompt", "negative_prompt", "steps", "seed", "width", "height", "num_frames", "guidance_scale", "duration_s", "deadline_unix_ms", "resume_checkpoint", "checkpoint_every_steps", "output_format", "output_quality", "fps", "preview_every_steps", "image", "mask_image", "strength", "adapters", "use_cache")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_PROMPT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_SCALE_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    RESUME_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_QUALITY_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MASK_IMAGE_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    USE_CACHE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    prompt: str
    negative_prompt: str
    steps: int
    seed: int
    width: int
    height: int
    num_frames: int
    guidance_scale: float
    duration_s: float
    deadline_unix_ms: int
    resume_checkpoint: str
    checkpoint_every_steps: int
    output_format: str
    output_quality: int
    fps: int
    preview_every_steps: int
    image: InputRef
    mask_image: InputRef
    strength: float
    adapters: _containers.RepeatedCompositeFieldContainer[_common_pb2.AdapterRef]
    use_cache: bool
    def __init__(self, job_id: _Optional[str] = ..., prompt: _Optional[str] = ..., negative_prompt: _Optional[str] = ..., steps: _Optional[int] = ..., seed: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., num_frames: _Optional[int] = ..., guidance_scale: _Optional[float] = ..., duration_s: _Optional[float] = ..., deadline_unix_ms: _Optional[int] = ..., resume_checkpoint: _Optional[str] = ..., checkpoint_every_steps: _Optional[int] = ..., output_format: _Optional[str] = ..., output_quality: _Optional[int] = ..., fps: _Optional[int] = ..., preview_every_steps: _Optional[int] = ..., image: _Optional[_Union[InputRef, _Mapping]] = ..., mask_image: _Optional[_Union[InputRef, _Mapping]] = ..., strength: _Optional[float] = ..., adapters: _Optional[_Iterable[_Union[_common_pb2.AdapterRef, _Mapping]]] = ..., use_cache: _Optional[bool] = ...) -> None: ...

class InputRef(_message.Message):
    __slots__ = ("data", "artifact", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    artifact: str
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., artifact: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class RunBatchRequest(_message.Message):
    __slots__ = ("batch_id", "model", "jobs", "pause_batch_id")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    model: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    pause_batch_id: str
    def __init__(self, batch_id: _Optional[str] = ..., model: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., pause_batch_id: _Optional[str] = ...) -> None: ...

class BatchLinkRequests(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[BatchLinkRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[BatchLinkRequest, _Mapping]]] = ...) -> None: ...

class BatchLinkRequest(_message.Message):
    __slots__ = ("run", "stop", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    run: RunBatchRequest
    stop: str
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, run: _Optional[_Union[RunBatchRequest, _Mapping]] = ..., stop: _Optional[str] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BatchLinkEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[BatchLinkEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[BatchLinkEvent, _Mapping]]] = ...) -> None: ...

class BatchLinkEvent(_message.Message):
    __slots__ = ("batch_id", "accepted", "event", "end")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    accepted: bool
    event: BatchEvent
    end: BatchEnd
    def __init__(self, batch_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., event: _Optional[_Union[BatchEvent, _Mapping]] = ..., end: _Optional[_Union[BatchEnd, _Mapping]] = ...) -> None: ...

class BatchEnd(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class JobOutput(_message.Message):
    __slots__ = ("data", "mime_type", "seed")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    seed: int
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., seed: _Optional[int] = ...) -> None: ...

class Preempted(_message.Message):
    __slots__ = ("checkpoint", "step")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    checkpoint: str
    step: int
    def __init__(self, checkpoint: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class Checkpointed(_message.Message):
    __slots__ = ("checkpoint", "step")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    checkpoint: str
    step: int
    def __init__(self, checkpoint: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class BatchEvent(_message.Message):
    __slots__ = ("job_id", "progress", "output", "error", "preempted", "checkpointed", "notice", "step_seconds", "fitted_batch", "more_job_ids")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTED_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    MORE_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    progress: _common_pb2.Progress
    output: JobOutput
    error: _common_pb2.Error
    preempted: Preempted
    checkpointed: Checkpointed
    notice: _common_pb2.Notice
    step_seconds: float
    fitted_batch: int
    more_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., output: _Optional[_Union[JobOutput, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., preempted: _Optional[_Union[Preempted, _Mapping]] = ..., checkpointed: _Optional[_Union[Checkpointed, _Mapping]] = ..., notice: _Optional[_Union[_common_pb2.Notice, _Mapping]] = ..., step_seconds: _Optional[float] = ..., fitted_batch: _Optional[int] = ..., more_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelJobsRequest(_message.Message):
    __slots__ = ("job_ids",)
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelJobsResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cancelled: _Optional[_Iterable[str]] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("grace_s", "exit")
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    grace_s: float
    exit: bool
    def __init__(self, grace_s: _Optional[float] = ..., exit: _Optional[bool] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("preempted",)
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    preempted: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, preempted: _Optional[_Iterable[str]] = ...) -> None: ...

class WorkerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatusResponse(_message.Message):
    __slots__ = ("worker_id", "pool", "models", "running_jobs", "draining")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pool: str
    models: _containers.RepeatedScalarFieldContainer[str]
    running_jobs: _containers.RepeatedScalarFieldContainer[str]
    draining: bool
    def __init__(self, worker_id: _Optional[str] = ..., pool: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ..., running_jobs: _Optional[_Iterable[str]] = ..., draining: _Optional[bool] = ...) -> None: ...
