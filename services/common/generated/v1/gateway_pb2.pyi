from mediamesh.common.generated.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobHandle(_message.Message):
    __slots__ = ("job_id", "state", "deduplicated", "job")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: _common_pb2.JobState
    deduplicated: bool
    job: _common_pb2.JobInfo
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., deduplicated: _Optional[bool] = ..., job: _Optional[_Union[_common_pb2.JobInfo, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "models", "page_size", "after_job_id", "oldest_first")
    STATES_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    AFTER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    models: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    after_job_id: str
    oldest_first: bool
    def __init__(self, states: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., models: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., after_job_id: _Optional[str] = ..., oldest_first: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "has_more")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobInfo]
    has_more: bool
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.JobInfo, _Mapping]]] = ..., has_more: _Optional[bool] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_common_pb2.ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[_common_pb2.ModelInfo, _Mapping]]] = ...) -> None: ...

class DownloadRequest(_message.Message):
    __slots__ = ("job_id", "offset")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    offset: int
    def __init__(self, job_id: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class DownloadChunk(_message.Message):
    __slots__ = ("data", "offset", "total_size", "mime_type", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    mime_type: str
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ..., mime_type: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class UploadChunk(_message.Message):
    __slots__ = ("data", "sha256", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    sha256: str
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., sha256: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class UploadHandle(_message.Message):
    __slots__ = ("input_id", "size_bytes", "sha256", "expires_unix_ms")
    INPUT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    input_id: str
    size_bytes: int
    sha256: str
    expires_unix_ms: int
    def __init__(self, input_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., expires_unix_ms: _Optional[int] = ...) -> None: ...
