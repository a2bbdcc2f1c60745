"""Building the configured artifact store (`scheduler.artifacts.backend`)."""

from __future__ import annotations

from collections.abc import Mapping

from mediamesh.common.settings import SchedulerSettings
from mediamesh.scheduler.store.artifacts import ArtifactStore, LocalArtifactStore


def build_artifact_store(settings: SchedulerSettings, environ: Mapping[str, str]) -> ArtifactStore:
    """The store `settings.artifacts` names; `environ` supplies S3 credentials (the
    standard AWS variables), read by the caller at start-up, never at import."""
    config = settings.artifacts
    if config.backend == "s3":
        # Imported only when configured: a local mesh never loads the S3 client.
        from mediamesh.scheduler.store.s3_artifacts import S3ArtifactStore

        return S3ArtifactStore(config, environ)
    return LocalArtifactStore(settings.artifact_dir)
