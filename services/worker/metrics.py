"""Worker metrics (documented in the README)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

STEP_SECONDS = Histogram(
    "mediamesh_worker_step_seconds",
    "Wall time of one denoising step of a batch.",
    ["model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BATCH_SECONDS = Histogram(
    "mediamesh_worker_batch_seconds",
    "Wall time of a whole batch, encoding included.",
    ["model"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
JOBS = Counter("mediamesh_worker_jobs", "Jobs ended on this worker, by outcome.", ["model", "code"])
CHECKPOINTS = Counter("mediamesh_worker_checkpoints", "Checkpoints written, by reason.", ["reason"])
DEVICE_MEMORY = Gauge("mediamesh_worker_device_memory_bytes", "Device memory in use.", ["device"])
DEVICE_MEMORY_TOTAL = Gauge(
    "mediamesh_worker_device_memory_total_bytes", "Device memory in all.", ["device"]
)
DEVICE_MEMORY_FREE = Gauge(
    "mediamesh_worker_device_memory_free_bytes",
    "Device memory free (on CUDA as the driver reports it, torch.cuda.mem_get_info).",
    ["device"],
)
DEVICE_UTILIZATION = Gauge(
    "mediamesh_worker_device_busy_ratio",
    "1 while a batch runs on the device, 0 when idle (averaged by rate() over time).",
    ["device"],
)
ADAPTER_LOADS = Counter(
    "mediamesh_adapter_loads",
    "LoRA adapters loaded into a model's pipeline (first use, or again after an eviction).",
    ["model"],
)
ADAPTER_LOAD_SECONDS = Histogram(
    "mediamesh_adapter_load_seconds",
    "Wall time of one LoRA adapter load.",
    ["model"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
MODEL_LOADS = Counter(
    "mediamesh_model_loads",
    "Model weight loads on this worker: at start, and each cold start after an eviction.",
    ["model"],
)
MODEL_LOAD_SECONDS = Histogram(
    "mediamesh_model_load_seconds",
    "Wall time of one model load.",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
RESIDENT_MODELS = Gauge(
    "mediamesh_worker_resident_models", "Hosted models whose weights are loaded now."
)
