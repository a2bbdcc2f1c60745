"""Where the scheduler keeps results: `scheduler.artifacts` in the mesh config.

Credentials for the S3 backend are not settings: the scheduler's main reads the standard
AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) when it starts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# S3 presigned URLs (SigV4) are valid for at most seven days.
MAX_URL_EXPIRY_S = 7 * 24 * 3600


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
    region: str = "us-east-1"
    # How long a presigned result URL stays valid.
    url_expiry_s: int = Field(3600, ge=1, le=MAX_URL_EXPIRY_S)

    @model_validator(mode="after")
    def _bucket_for_s3(self) -> ArtifactSettings:
        if self.backend == "s3" and not self.bucket:
            raise ValueError("backend s3 needs a bucket")
        return self
