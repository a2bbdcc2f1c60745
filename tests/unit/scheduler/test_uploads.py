"""The upload store on its own: quota, checksum, format, tenancy, expiry, and a restart."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mediamesh.common.errors import InvalidArgument, MeshError, NotFound, ResourceExhausted
from mediamesh.common.params import RequestFields, find_model, resolve
from mediamesh.common.registry import load_registry
from mediamesh.scheduler.inputs import JobInputs
from mediamesh.scheduler.uploads import UploadLimits, UploadStore
from mediamesh.sdk.uploads import guess_mime, upload_source
from tests.input_media import image_bytes

LIMITS = UploadLimits(ttl_s=60.0, quota_bytes=1000, max_bytes=800)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_sized(size: int, filler: bytes = b"x") -> bytes:
    """`size` bytes that start as a PNG does: all the store looks at."""
    return PNG_SIGNATURE + filler * (size - len(PNG_SIGNATURE))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def put(
    store: UploadStore,
    tenant: str,
    data: bytes,
    sha256: str | None = None,
    mime_type: str = "image/png",
    chunk: int = 100,
) -> str:
    writer = store.begin(tenant, sha256 or hashlib.sha256(data).hexdigest(), mime_type, 0)
    try:
        for start in range(0, len(data), chunk):
            writer.write(data[start : start + chunk])
        return writer.finish().input_id
    except BaseException:
        writer.abort()
        raise


def test_uploads_survive_a_restart_and_expire(tmp_path: Path) -> None:
    clock = Clock()
    store = UploadStore(tmp_path, LIMITS, clock)
    input_id = put(store, "a", png_sized(300))
    again = UploadStore(tmp_path, LIMITS, clock)
    again.load()
    assert again.read(again.get(input_id, "a")) == png_sized(300)
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
    put(store, "a", png_sized(600, b"y"))
    with pytest.raises(ResourceExhausted, match="upload_quota_bytes: tenant 'a' would hold"):
        put(store, "a", png_sized(600, b"y"))
    put(store, "b", png_sized(600, b"y"))  # another tenant's quota
    assert store.usage("a") == 600
    clock.now += 61  # expired uploads no longer count
    put(store, "a", png_sized(600, b"y"))
    assert not list(tmp_path.glob("*.partial"))


def test_checksum_size_and_first_chunk(tmp_path: Path) -> None:
    store = UploadStore(tmp_path, LIMITS, Clock())
    with pytest.raises(MeshError) as caught:
        put(store, "a", png_sized(10, b"z"), sha256="0" * 64)
    assert caught.value.code == "DATA_LOSS"
    with pytest.raises(MeshError, match="max_upload_bytes"):
        put(store, "a", png_sized(900, b"z"))
    with pytest.raises(InvalidArgument, match="sha256: required"):
        store.begin("a", "", "", 0)
    assert store.usage("a") == 0 and not list(tmp_path.glob("*.bin*"))


@pytest.mark.parametrize("declared", ["image/gif", "text/plain", "png", "image/png; x=1"])
def test_a_declared_type_outside_the_input_formats_is_refused_at_the_start(
    tmp_path: Path, declared: str
) -> None:
    store = UploadStore(tmp_path, LIMITS, Clock())
    with pytest.raises(InvalidArgument) as caught:
        store.begin("a", "0" * 64, declared, 0)
    assert caught.value.message == (
        f"mime_type: {declared!r} is not an input format; use one of image/png, image/jpeg, "
        "image/webp, or leave it empty to have it read from the bytes"
    )


def test_the_bytes_must_be_the_declared_format_or_name_it(tmp_path: Path) -> None:
    store = UploadStore(tmp_path, LIMITS, Clock())
    jpeg = image_bytes(kind="JPEG")[:700]
    with pytest.raises(InvalidArgument) as caught:
        put(store, "a", png_sized(300), mime_type="image/jpeg")
    assert caught.value.message == (
        "mime_type: image/jpeg does not match the bytes, which are image/png; "
        "declare image/png or leave mime_type empty"
    )
    with pytest.raises(InvalidArgument, match=r"^data: not a PNG, JPEG or WebP file$"):
        put(store, "a", b"GIF89a" + b"x" * 100, mime_type="")
    with pytest.raises(InvalidArgument, match=r"\(declared as image/png\)$"):
        put(store, "a", b"hello" * 20)
    assert not list(tmp_path.glob("*.bin*")) and store.usage("a") == 0
    # Undeclared, the type is read from the bytes, however few each chunk holds.
    input_id = put(store, "a", jpeg, mime_type="", chunk=1)
    assert store.get(input_id, "a").mime_type == "image/jpeg"


async def test_an_upload_named_by_id_is_reported_by_that_field(tmp_path: Path) -> None:
    store = UploadStore(tmp_path, LIMITS, Clock())
    inputs = JobInputs(tmp_path / "inputs", 64, store)
    spec = find_model(load_registry(), "flux-img2img-tiny")
    with pytest.raises(NotFound) as caught:
        await inputs.with_uploads(RequestFields(spec.name, "x", image_id="up-nope"), "a")
    assert caught.value.message.startswith("image_id: no upload 'up-nope'")

    # A PNG signature passes the upload; the bytes behind it fail the job's checks.
    broken = put(store, "a", png_sized(200))
    fields = await inputs.with_uploads(RequestFields(spec.name, "x", image_id=broken), "a")
    assert fields.image == png_sized(200) and fields.image_id == broken
    with pytest.raises(InvalidArgument) as refused:
        resolve(spec, fields)
    assert refused.value.message.startswith("image_id: cannot be decoded as PNG, JPEG or WebP")

    # A header that passes, pixel data that does not: found only when the job's input is
    # decoded, as it is stored.
    cut = image_bytes(kind="JPEG")[:200] + b"\x00" * 50
    cut_id = put(store, "a", cut, mime_type="image/jpeg")
    fields = await inputs.with_uploads(RequestFields(spec.name, "x", image_id=cut_id), "a")
    params = resolve(spec, fields)
    with pytest.raises(InvalidArgument, match=r"^image_id: cannot be decoded"):
        await inputs.store(spec, params, fields)


def test_sdk_upload_source_hashes_and_names_the_format(tmp_path: Path) -> None:
    path = tmp_path / "in.jpg"
    path.write_bytes(image_bytes(kind="JPEG"))
    source = upload_source(path)
    assert source.mime_type == "image/jpeg"
    assert source.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert guess_mime(image_bytes(kind="WEBP")) == "image/webp"
    assert guess_mime(image_bytes()) == "image/png"
    assert [len(c) for c in upload_source(b"a" * 5).chunks(2)] == [2, 2, 1]
