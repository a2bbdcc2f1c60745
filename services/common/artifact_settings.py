"""Where the scheduler keeps results: `scheduler.artifacts` in the mesh config.

Credentials for the S3 backend are not settings: the scheduler's main reads the standard
AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) when it starts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# S3 presigned URLs (SigV4) are valid for at most seven days.
MAX_URL_EXPIRY_S = 7 * 24 * 3600
# SQLite keeps a blob in the row's overflow pages; past a few MiB a file is the better home.
MAX_IN_STORE_BYTES = 16 * 1024 * 1024
# A 1024x1024 PNG of a photo is well over this; thumbnails, audio clips and previews are not.
LOCAL_IN_STORE_BYTES = 256 * 1024


class ArtifactSettings(BaseModel):
    """The artifact store's backend: local disk under `scheduler.artifact_dir`, or an
    S3-compatible bucket (AWS S3, MinIO, Ceph RGW, R2...) that can sign result URLs."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "s3"] = "local"
    bucket: str = ""
    # Key prefix inside the bucket, e.g. "mediamesh/results"; empty puts results at its root.
    prefix: str = ""
    # Endpoint of an S3-compatible service; None is AWS S3 in `region`.
    endpoint_url: str | None = None
    # The same service as clients reach it, when that differs from how the scheduler does
    # (`http://minio:9000` inside Compose, `https://media.example.com` outside): presigned
    # URLs are signed for this host, since a SigV4 signature covers the host it names.
    # None: `endpoint_url`.
    public_endpoint_url: str | None = None
    region: str = "us-east-1"
    # How long a presigned result URL stays valid.
    url_expiry_s: int = Field(3600, ge=1, le=MAX_URL_EXPIRY_S)
    # Results up to this size live in the scheduler's job store, committed with the job's
    # final state, instead of as a file or object each: under load, one file per result
    # cost the scheduler more than everything else it does for a small job. 0: none do.
    # Unset: 256 KiB with the local backend (the results shared one disk with the store
    # anyway), 0 with S3 (a deployment that chose a bucket keeps its results there, not on
    # the scheduler's volume).
    in_store_max_bytes: int | None = Field(None, ge=0, le=MAX_IN_STORE_BYTES)

    @property
    def in_store_limit(self) -> int:
        """`in_store_max_bytes`, with its default for the backend applied."""
        if self.in_store_max_bytes is not None:
            return self.in_store_max_bytes
        return LOCAL_IN_STORE_BYTES if self.backend == "local" else 0

    @model_validator(mode="after")
    def _bucket_for_s3(self) -> ArtifactSettings:
        if self.backend == "s3" and not self.bucket:
            raise ValueError("backend s3 needs a bucket")
        return self

    @model_validator(mode="after")
    def _endpoints_are_urls(self) -> ArtifactSettings:
        for name in ("endpoint_url", "public_endpoint_url"):
            value = getattr(self, name)
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(
                    f"scheduler.artifacts.{name}: {value[:64]!r} is not an http:// or https:// URL"
                )
        if self.public_endpoint_url is not None and self.backend != "s3":
            raise ValueError(
                "scheduler.artifacts.public_endpoint_url: only the s3 backend signs URLs; "
                "remove it or set backend: s3"
            )
        return self
