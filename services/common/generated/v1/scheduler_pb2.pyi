from mediamesh.common.generated.v1 import common_pb2 as _common_pb2
from mediamesh.common.generated.v1 import gateway_pb2 as _gateway_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitRequest(_message.Message):
    __slots__ = ("request", "tenant", "deadline_unix_ms", "tenant_weight", "max_queued_jobs", "max_running_jobs", "final_only", "result_quota_bytes")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TENANT_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    FINAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    RESULT_QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    request: _common_pb2.GenerateRequest
    tenant: str
    deadline_unix_ms: int
    tenant_weight: float
    max_queued_jobs: int
    max_running_jobs: int
    final_only: bool
    result_quota_bytes: int
    def __init__(self, request: _Optional[_Union[_common_pb2.GenerateRequest, _Mapping]] = ..., tenant: _Optional[str] = ..., deadline_unix_ms: _Optional[int] = ..., tenant_weight: _Optional[float] = ..., max_queued_jobs: _Optional[int] = ..., max_running_jobs: _Optional[int] = ..., final_only: _Optional[bool] = ..., result_quota_bytes: _Optional[int] = ...) -> None: ...

class JobLinkRequests(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[JobLinkRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[JobLinkRequest, _Mapping]]] = ...) -> None: ...

class JobLinkRequest(_message.Message):
    __slots__ = ("exchange_id", "submit", "stop", "cancel", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    exchange_id: int
    submit: SubmitRequest
    stop: bool
    cancel: bool
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, exchange_id: _Optional[int] = ..., submit: _Optional[_Union[SubmitRequest, _Mapping]] = ..., stop: _Optional[bool] = ..., cancel: _Optional[bool] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JobLinkEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[JobLinkEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[JobLinkEvent, _Mapping]]] = ...) -> None: ...

class JobLinkEvent(_message.Message):
    __slots__ = ("exchange_id", "event", "status")
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    exchange_id: int
    event: _common_pb2.GenerateEvent
    status: ExchangeStatus
    def __init__(self, exchange_id: _Optional[int] = ..., event: _Optional[_Union[_common_pb2.GenerateEvent, _Mapping]] = ..., status: _Optional[_Union[ExchangeStatus, _Mapping]] = ...) -> None: ...

class ExchangeStatus(_message.Message):
    __slots__ = ("code", "message", "retry_after_ms")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    retry_after_ms: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class ScopedUploadChunk(_message.Message):
    __slots__ = ("chunk", "tenant", "quota_bytes")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    chunk: _gateway_pb2.UploadChunk
    tenant: str
    quota_bytes: int
    def __init__(self, chunk: _Optional[_Union[_gateway_pb2.UploadChunk, _Mapping]] = ..., tenant: _Optional[str] = ..., quota_bytes: _Optional[int] = ...) -> None: ...

class ScopedListJobsRequest(_message.Message):
    __slots__ = ("query", "tenant", "admin")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    query: _gateway_pb2.ListJobsRequest
    tenant: str
    admin: bool
    def __init__(self, query: _Optional[_Union[_gateway_pb2.ListJobsRequest, _Mapping]] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class ScopedJobRequest(_message.Message):
    __slots__ = ("job_id", "tenant", "offset", "admin", "final_only")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    FINAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant: str
    offset: int
    admin: bool
    final_only: bool
    def __init__(self, job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., offset: _Optional[int] = ..., admin: _Optional[bool] = ..., final_only: _Optional[bool] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("id", "memory_bytes", "free_bytes")
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    id: str
    memory_bytes: int
    free_bytes: int
    def __init__(self, id: _Optional[str] = ..., memory_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ...) -> None: ...

class HostedModel(_message.Message):
    __slots__ = ("name", "parallelism", "device_ids", "adapters", "warmup", "resident", "load_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    parallelism: str
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    adapters: _containers.RepeatedCompositeFieldContainer[LoadedAdapter]
    warmup: str
    resident: bool
    load_seconds: float
    def __init__(self, name: _Optional[str] = ..., parallelism: _Optional[str] = ..., device_ids: _Optional[_Iterable[str]] = ..., adapters: _Optional[_Iterable[_Union[LoadedAdapter, _Mapping]]] = ..., warmup: _Optional[str] = ..., resident: _Optional[bool] = ..., load_seconds: _Optional[float] = ...) -> None: ...

class LoadedAdapter(_message.Message):
    __slots__ = ("name", "load_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LOAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    load_seconds: float
    def __init__(self, name: _Optional[str] = ..., load_seconds: _Optional[float] = ...) -> None: ...

class ModelAdapters(_message.Message):
    __slots__ = ("model", "adapters")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    model: str
    adapters: _containers.RepeatedCompositeFieldContainer[LoadedAdapter]
    def __init__(self, model: _Optional[str] = ..., adapters: _Optional[_Iterable[_Union[LoadedAdapter, _Mapping]]] = ...) -> None: ...

class WorkerRegistration(_message.Message):
    __slots__ = ("worker_id", "address", "pool", "devices", "models", "capacity", "draining")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    address: str
    pool: str
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    models: _containers.RepeatedCompositeFieldContainer[HostedModel]
    capacity: int
    draining: bool
    def __init__(self, worker_id: _Optional[str] = ..., address: _Optional[str] = ..., pool: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., models: _Optional[_Iterable[_Union[HostedModel, _Mapping]]] = ..., capacity: _Optional[int] = ..., draining: _Optional[bool] = ...) -> None: ...

class WorkerHeartbeat(_message.Message):
    __slots__ = ("draining", "running_batches", "memory_used_bytes", "adapters", "residency")
    class MemoryUsedBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_BATCHES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    RESIDENCY_FIELD_NUMBER: _ClassVar[int]
    draining: bool
    running_batches: int
    memory_used_bytes: _containers.ScalarMap[str, int]
    adapters: _containers.RepeatedCompositeFieldContainer[ModelAdapters]
    residency: _containers.RepeatedCompositeFieldContainer[HostedModel]
    def __init__(self, draining: _Optional[bool] = ..., running_batches: _Optional[int] = ..., memory_used_bytes: _Optional[_Mapping[str, int]] = ..., adapters: _Optional[_Iterable[_Union[ModelAdapters, _Mapping]]] = ..., residency: _Optional[_Iterable[_Union[HostedModel, _Mapping]]] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "batches_ended")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    BATCHES_ENDED_FIELD_NUMBER: _ClassVar[int]
    register: WorkerRegistration
    heartbeat: WorkerHeartbeat
    batches_ended: BatchesEnded
    def __init__(self, register: _Optional[_Union[WorkerRegistration, _Mapping]] = ..., heartbeat: _Optional[_Union[WorkerHeartbeat, _Mapping]] = ..., batches_ended: _Optional[_Union[BatchesEnded, _Mapping]] = ...) -> None: ...

class BatchesEnded(_message.Message):
    __slots__ = ("batch_ids",)
    BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    batch_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, batch_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SchedulerMessage(_message.Message):
    __slots__ = ("registered", "heartbeat_interval_s", "heartbeat_misses_allowed", "settled")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MISSES_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    registered: bool
    heartbeat_interval_s: float
    heartbeat_misses_allowed: int
    settled: BatchesSettled
    def __init__(self, registered: _Optional[bool] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_misses_allowed: _Optional[int] = ..., settled: _Optional[_Union[BatchesSettled, _Mapping]] = ...) -> None: ...

class BatchesSettled(_message.Message):
    __slots__ = ("batch_ids",)
    BATCH_IDS_FIELD_NUMBER: _ClassVar[int]
    batch_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, batch_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueStatus(_message.Message):
    __slots__ = ("name", "depth", "depth_by_priority", "work_s", "oldest_wait_s", "sla_s", "running", "paused")
    class DepthByPriorityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_BY_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WORK_S_FIELD_NUMBER: _ClassVar[int]
    OLDEST_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    SLA_S_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    depth: int
    depth_by_priority: _containers.ScalarMap[str, int]
    work_s: float
    oldest_wait_s: float
    sla_s: float
    running: int
    paused: int
    def __init__(self, name: _Optional[str] = ..., depth: _Optional[int] = ..., depth_by_priority: _Optional[_Mapping[str, int]] = ..., work_s: _Optional[float] = ..., oldest_wait_s: _Optional[float] = ..., sla_s: _Optional[float] = ..., running: _Optional[int] = ..., paused: _Optional[int] = ...) -> None: ...

class WorkerSummary(_message.Message):
    __slots__ = ("worker_id", "pool", "devices", "models", "load_s", "state", "address", "adapters", "warming")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LOAD_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    WARMING_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pool: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    models: _containers.RepeatedScalarFieldContainer[str]
    load_s: float
    state: str
    address: str
    adapters: _containers.RepeatedCompositeFieldContainer[ModelAdapters]
    warming: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, worker_id: _Optional[str] = ..., pool: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ..., models: _Optional[_Iterable[str]] = ..., load_s: _Optional[float] = ..., state: _Optional[str] = ..., address: _Optional[str] = ..., adapters: _Optional[_Iterable[_Union[ModelAdapters, _Mapping]]] = ..., warming: _Optional[_Iterable[str]] = ...) -> None: ...

class CostSummary(_message.Message):
    __slots__ = ("cost", "on_demand_cost", "device_seconds_by_pool", "device_seconds_by_model", "device_seconds_by_tenant")
    class DeviceSecondsByPoolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class DeviceSecondsByModelEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class DeviceSecondsByTenantEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    COST_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_COST_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SECONDS_BY_POOL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SECONDS_BY_MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SECONDS_BY_TENANT_FIELD_NUMBER: _ClassVar[int]
    cost: float
    on_demand_cost: float
    device_seconds_by_pool: _containers.ScalarMap[str, float]
    device_seconds_by_model: _containers.ScalarMap[str, float]
    device_seconds_by_tenant: _containers.ScalarMap[str, float]
    def __init__(self, cost: _Optional[float] = ..., on_demand_cost: _Optional[float] = ..., device_seconds_by_pool: _Optional[_Mapping[str, float]] = ..., device_seconds_by_model: _Optional[_Mapping[str, float]] = ..., device_seconds_by_tenant: _Optional[_Mapping[str, float]] = ...) -> None: ...

class MeshStatus(_message.Message):
    __slots__ = ("queues", "workers", "cost", "jobs_by_state", "result_bytes_by_tenant", "models")
    class JobsByStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ResultBytesByTenantEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    JOBS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_BYTES_BY_TENANT_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueStatus]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerSummary]
    cost: CostSummary
    jobs_by_state: _containers.ScalarMap[str, int]
    result_bytes_by_tenant: _containers.ScalarMap[str, int]
    models: _containers.RepeatedCompositeFieldContainer[ModelStatistics]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueStatus, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerSummary, _Mapping]]] = ..., cost: _Optional[_Union[CostSummary, _Mapping]] = ..., jobs_by_state: _Optional[_Mapping[str, int]] = ..., result_bytes_by_tenant: _Optional[_Mapping[str, int]] = ..., models: _Optional[_Iterable[_Union[ModelStatistics, _Mapping]]] = ...) -> None: ...

class ScopedModelStatisticsRequest(_message.Message):
    __slots__ = ("models", "tenant", "admin")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    admin: bool
    def __init__(self, models: _Optional[_Iterable[str]] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class PhaseDuration(_message.Message):
    __slots__ = ("count", "ns")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NS_FIELD_NUMBER: _ClassVar[int]
    count: int
    ns: int
    def __init__(self, count: _Optional[int] = ..., ns: _Optional[int] = ...) -> None: ...

class BatchSizeStatistics(_message.Message):
    __slots__ = ("batch_size", "compute_input", "compute_infer", "compute_output")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INPUT_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INFER_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    compute_input: PhaseDuration
    compute_infer: PhaseDuration
    compute_output: PhaseDuration
    def __init__(self, batch_size: _Optional[int] = ..., compute_input: _Optional[_Union[PhaseDuration, _Mapping]] = ..., compute_infer: _Optional[_Union[PhaseDuration, _Mapping]] = ..., compute_output: _Optional[_Union[PhaseDuration, _Mapping]] = ...) -> None: ...

class ModelStatistics(_message.Message):
    __slots__ = ("model", "last_inference_unix_ms", "inference_count", "execution_count", "success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "batch_sizes")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LAST_INFERENCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INPUT_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INFER_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    model: str
    last_inference_unix_ms: int
    inference_count: int
    execution_count: int
    success: PhaseDuration
    fail: PhaseDuration
    queue: PhaseDuration
    compute_input: PhaseDuration
    compute_infer: PhaseDuration
    compute_output: PhaseDuration
    batch_sizes: _containers.RepeatedCompositeFieldContainer[BatchSizeStatistics]
    def __init__(self, model: _Optional[str] = ..., last_inference_unix_ms: _Optional[int] = ..., inference_count: _Optional[int] = ..., execution_count: _Optional[int] = ..., success: _Optional[_Union[PhaseDuration, _Mapping]] = ..., fail: _Optional[_Union[PhaseDuration, _Mapping]] = ..., queue: _Optional[_Union[PhaseDuration, _Mapping]] = ..., compute_input: _Optional[_Union[PhaseDuration, _Mapping]] = ..., compute_infer: _Optional[_Union[PhaseDuration, _Mapping]] = ..., compute_output: _Optional[_Union[PhaseDuration, _Mapping]] = ..., batch_sizes: _Optional[_Iterable[_Union[BatchSizeStatistics, _Mapping]]] = ...) -> None: ...

class ModelStatisticsReply(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelStatistics]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelStatistics, _Mapping]]] = ...) -> None: ...
