"""A Hugging Face hub cache folder built offline from a local model folder.

The layout is the one `huggingface_hub` writes and reads: models--ORG--NAME/ with
snapshots/<commit>/<files> and refs/<branch> holding the commit. Files are copied rather
than linked to blobs/, which the hub library also accepts when reading.
"""

from __future__ import annotations

import shutil
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def add_to_hub_cache(
    cache: Path, repo_id: str, model_dir: Path, commit: str = COMMIT, branch: str = "main"
) -> Path:
    """Puts `model_dir` into `cache` as `repo_id` at `commit`, with `branch` pointing at it;
    returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot, ignore=shutil.ignore_patterns(".complete"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / branch).write_text(commit)
    return snapshot
