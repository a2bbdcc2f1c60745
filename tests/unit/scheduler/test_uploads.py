"""The upload store on its own: quota, checksum, tenancy, expiry, and a restart."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mediamesh.common.errors import InvalidArgument, MeshError, NotFound, ResourceExhausted
from mediamesh.scheduler.uploads import UploadLimits, UploadStore
from mediamesh.sdk.uploads import guess_mime, upload_source
from tests.input_media import image_bytes

LIMITS = UploadLimits(ttl_s=60.0, quota_bytes=1000, max_bytes=800)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def put(store: UploadStore, tenant: str, data: bytes, sha256: str | None = None) -> str:
    writer = store.begin(tenant, sha256 or hashlib.sha256(data).hexdigest(), "image/png", 0)
    try:
        for start in range(0, len(data), 100):
            writer.write(data[start : start + 100])
        return writer.finish().input_id
    except BaseException:
        writer.abort()
        raise


def test_uploads_survive_a_restart_and_expire(tmp_path: Path) -> None:
    clock = Clock()
    store = UploadStore(tmp_path, LIMITS, clock)
    input_id = put(store, "a", b"x" * 300)
    again = UploadStore(tmp_path, LIMITS, clock)
    again.load()
    assert again.read(again.get(input_id, "a")) == b"x" * 300
    with pytest.raises(NotFound, match="not yours"):
        again.get(input_id, "b")
    clock.now += 61
    with pytest.raises(NotFound):
        again.get(input_id, "a")
    assert again.sweep() == [input_id]
    assert list(tmp_path.iterdir()) == []


def test_quota_counts_live_uploads_per_tenant(tmp_path: Path) -> None:
    clock = Clock()
    store = UploadStore(tmp_path, LIMITS, clock)
    put(store, "a", b"y" * 600)
    with pytest.raises(ResourceExhausted, match="upload_quota_bytes: tenant 'a' would hold"):
        put(store, "a", b"y" * 600)
    put(store, "b", b"y" * 600)  # another tenant's quota
    assert store.usage("a") == 600
    clock.now += 61  # expired uploads no longer count
    put(store, "a", b"y" * 600)
    assert not list(tmp_path.glob("*.partial"))


def test_checksum_size_and_first_chunk(tmp_path: Path) -> None:
    store = UploadStore(tmp_path, LIMITS, Clock())
    with pytest.raises(MeshError) as caught:
        put(store, "a", b"z" * 10, sha256="0" * 64)
    assert caught.value.code == "DATA_LOSS"
    with pytest.raises(MeshError, match="max_upload_bytes"):
        put(store, "a", b"z" * 900)
    with pytest.raises(InvalidArgument, match="sha256: required"):
        store.begin("a", "", "", 0)
    assert store.usage("a") == 0 and not list(tmp_path.glob("*.bin*"))


def test_sdk_upload_source_hashes_and_names_the_format(tmp_path: Path) -> None:
    path = tmp_path / "in.jpg"
    path.write_bytes(image_bytes(kind="JPEG"))
    source = upload_source(path)
    assert source.mime_type == "image/jpeg"
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert guess_mime(image_bytes(kind="WEBP")) == "image/webp"
    assert guess_mime(image_bytes()) == "image/png"
    assert [len(c) for c in upload_source(b"a" * 5).chunks(2)] == [2, 2, 1]
