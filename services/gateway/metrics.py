"""The gateway's own Prometheus metrics (its HTTP face's are in http/request_metrics.py)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

JOB_LINK_STREAMS = Counter(
    "mediamesh_gateway_job_link_streams",
    "JobLink streams the gateway opened to the scheduler: one for its first job, one more "
    "after each break.",
)
JOB_LINK_EXCHANGES = Gauge(
    "mediamesh_gateway_job_link_exchanges", "Jobs the gateway follows over JobLink now."
)
