"""Input images are judged from their header before any pixel is decoded."""

from __future__ import annotations

import dataclasses

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.input_images import decode_image, probe_image
from mediamesh.common.input_spec import pipeline_inputs
from mediamesh.common.params import RequestFields, find_model, resolve
from mediamesh.common.registry import load_registry, parse_registry
from tests.input_media import image_bytes, mask_bytes, png_bomb, truncated_png

REGISTRY = load_registry()
LIMIT = 262_144


@pytest.mark.parametrize(
    ("kind", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")]
)
def test_supported_formats_give_size_and_identity(kind: str, mime: str) -> None:
    image = probe_image("image", image_bytes((48, 32), kind=kind), LIMIT)
    assert (image.width, image.height, image.mime_type) == (48, 32, mime)
    assert len(image.sha256) == 64


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "image: empty"),
        (b"not an image at all", "image: cannot be decoded as PNG, JPEG or WebP"),
        (image_bytes(kind="GIF", mode="P", color=3), "image: GIF images are not supported"),
        (image_bytes(kind="BMP"), "image: BMP images are not supported"),
        (image_bytes((1024, 1024)), "1048576 pixels; the limit is 262144 pixels"),
        (png_bomb(5_000, 5_000), "25000000 pixels; the limit is 262144 pixels"),
        (png_bomb(), "the limit of 262144 pixels"),
        (truncated_png(), "image: cannot be decoded"),
    ],
)
def test_bad_images_name_the_field_and_the_limit(data: bytes, words: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        probe_image("image", data, LIMIT)
    assert words in caught.value.message


def test_a_bomb_is_refused_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import ImageFile

    def decode(*_: object) -> None:
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", decode)
    with pytest.raises(InvalidArgument, match="pixels"):
        probe_image("image", png_bomb(20_000, 20_000), LIMIT)


def test_decode_finds_data_broken_past_a_good_header() -> None:
    data = image_bytes(kind="JPEG")
    broken = data[:200] + b"\x00" * 50
    with pytest.raises(InvalidArgument, match="image: cannot be decoded"):
        decode_image("image", broken, LIMIT)
    assert decode_image("image", data, LIMIT).size == (64, 64)


def fields(model: str, **values: object) -> RequestFields:
    return RequestFields(model=model, prompt="a cat", **values)  # type: ignore[arg-type]


def refused(model: str, **values: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        resolve(find_model(REGISTRY, model), fields(model, **values))
    return caught.value.message


def test_inputs_come_from_the_pipeline_signature() -> None:
    assert pipeline_inputs("StableDiffusionXLInpaintPipeline") == ("image", "mask_image")
    assert pipeline_inputs("FluxImg2ImgPipeline") == ("image",)
    assert pipeline_inputs("FluxPipeline") == ()
    assert REGISTRY.get("cogvideox-i2v-tiny").inputs == ("image",)  # type: ignore[union-attr]
    assert REGISTRY.get("sdxl-img2img-tiny").default_strength == 0.6  # type: ignore[union-attr]
    assert REGISTRY.get("flux-tiny").default_strength == 0.0  # type: ignore[union-attr]


def test_an_entry_listing_inputs_its_pipeline_lacks_is_refused() -> None:
    entry = {
        "name": "x",
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": "s",
        "defaults": {"width": 64, "height": 64},
        "limits": {"max_width": 64, "max_height": 64},
        "inputs": ["image"],
    }
    with pytest.raises(ValueError, match="inputs: FluxPipeline takes no image"):
        parse_registry({"models": [entry]})


def test_resolve_sets_image_strength_and_size() -> None:
    params = resolve(
        find_model(REGISTRY, "sdxl-img2img-tiny"),
        fields("sdxl-img2img-tiny", image=image_bytes((96, 48)), strength=0.5),
    )
    assert params.image is not None and (params.image.width, params.image.height) == (96, 48)
    assert (params.width, params.height, params.strength) == (96, 48, 0.5)
    flux = resolve(
        find_model(REGISTRY, "flux-img2img-tiny"), fields("flux-img2img-tiny", image=image_bytes())
    )
    assert flux.strength == 0.6 and (flux.width, flux.height) == (64, 64)


def test_a_low_strength_runs_where_its_pipeline_would_run_a_step() -> None:
    # Flux starts its schedule at a fractional offset rounded down, so 4 steps at strength
    # 0.1 still denoise once; Stable Diffusion XL rounds 4 * 0.1 down to no step at all.
    flux = resolve(
        find_model(REGISTRY, "flux-img2img-tiny"),
        fields("flux-img2img-tiny", image=image_bytes(), strength=0.1),
    )
    assert flux.strength == pytest.approx(0.1)
    assert refused("sdxl-img2img-tiny", image=image_bytes(), strength=0.1) == (
        "strength: 0.1 with 4 steps leaves no denoising step; "
        "StableDiffusionXLImg2ImgPipeline needs steps * strength of at least 1"
    )


def test_too_few_steps_for_the_default_strength_names_steps() -> None:
    # The caller sent no strength (the OpenAI edits route takes none): the model's default
    # is not theirs to change, so the refusal names steps and the fewest that work.
    spec = find_model(REGISTRY, "sdxl-inpaint-tiny")
    request = fields("sdxl-inpaint-tiny", image=image_bytes(), mask_image=mask_bytes(), steps=1)
    with pytest.raises(InvalidArgument) as caught:
        resolve(spec, request)
    assert caught.value.message == (
        f"steps: 1 leaves no denoising step at the model's strength "
        f"{spec.default_strength:g} (StableDiffusionXLInpaintPipeline runs steps * strength "
        "of them); use at least 2 steps"
    )
    # No steps at all is the steps range check's to refuse, with its limits.
    with pytest.raises(InvalidArgument, match=r"^steps: 0 is out of range"):
        resolve(
            spec, fields("sdxl-inpaint-tiny", image=image_bytes(), mask_image=mask_bytes(), steps=0)
        )


@pytest.mark.parametrize(
    ("model", "values", "words"),
    [
        (
            "flux-tiny",
            {"image": image_bytes()},
            "image: model 'flux-tiny' (FluxPipeline) takes no image",
        ),
        ("flux-tiny", {"image_id": "up-1"}, "image_id: model 'flux-tiny' (FluxPipeline)"),
        (
            "sdxl-img2img-tiny",
            {"image_id": "up-1", "mask_image_id": "up-2"},
            "mask_image_id: model 'sdxl-img2img-tiny'",
        ),
        ("flux-tiny", {"strength": 0.5}, "strength: model 'flux-tiny'"),
        ("sdxl-img2img-tiny", {}, "image: required by model 'sdxl-img2img-tiny'"),
        (
            "sdxl-img2img-tiny",
            {"image": image_bytes(), "mask_image": mask_bytes()},
            "mask_image: model",
        ),
        ("sdxl-inpaint-tiny", {"image": image_bytes()}, "mask_image: required"),
        (
            "sdxl-inpaint-tiny",
            {"image": image_bytes(), "mask_image": mask_bytes((32, 64))},
            "mask_image: 32x64 px; it must be the size of image (64x64 px)",
        ),
        (
            "sdxl-img2img-tiny",
            {"image": image_bytes(), "strength": 1.5},
            "strength: 1.5 is out of range; allowed 0 < strength <= 1",
        ),
        (
            "sdxl-img2img-tiny",
            {"image": image_bytes(), "strength": 0.0},
            "strength: 0.0 is out of range",
        ),
        (
            "sdxl-img2img-tiny",
            {"image": image_bytes(), "strength": 0.1},
            "leaves no denoising step",
        ),
        (
            "sdxl-img2img-tiny",
            {"image": image_bytes(), "image_id": "up-1"},
            "image: set image or image_id, not both",
        ),
        ("sdxl-img2img-tiny", {"image": image_bytes((40, 40))}, "multiple of 16"),
        (
            "sdxl-img2img-tiny",
            {"image": png_bomb()},
            "image: declares more pixels than the limit of 262144",
        ),
        (
            "cogvideox-i2v-tiny",
            {"image": image_bytes(), "strength": 0.5},
            "strength: model 'cogvideox-i2v-tiny'",
        ),
    ],
)
def test_bad_requests_name_the_field(model: str, values: dict[str, object], words: str) -> None:
    assert words in refused(model, **values)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not an image at all", "(not an image file)"),
        (b"\x89PNG\r\n\x1a\n and then nothing a PNG has", "(a broken PNG header)"),
        (truncated_png(), "(truncated data)"),
    ],
)
def test_undecodable_bytes_are_explained_without_python_internals(data: bytes, reason: str) -> None:
    for check in (probe_image, decode_image):
        with pytest.raises(InvalidArgument) as caught:
            check("image", data, LIMIT)
        message = caught.value.message
        assert message == f"image: cannot be decoded as PNG, JPEG or WebP {reason}", message
        assert " at 0x" not in message and "Error" not in message


def uploaded(model: str, **values: object) -> str:
    """The refusal of a request whose inputs the scheduler has read from uploads: their ids
    stay set, listed in `from_uploads`."""
    names = frozenset(name for name in ("image", "mask_image") if f"{name}_id" in values)
    with pytest.raises(InvalidArgument) as caught:
        resolve(find_model(REGISTRY, model), fields(model, from_uploads=names, **values))
    return caught.value.message


def test_an_uploaded_input_is_named_by_the_id_field_the_caller_set() -> None:
    broken = uploaded("flux-img2img-tiny", image=b"text, not a picture", image_id="up-1")
    assert broken == "image_id: cannot be decoded as PNG, JPEG or WebP (not an image file)"
    assert uploaded(
        "sdxl-inpaint-tiny",
        image=image_bytes(),
        mask_image=mask_bytes((32, 64)),
        mask_image_id="up-2",
    ).startswith("mask_image_id: 32x64 px; it must be the size of image (64x64 px)")
    assert uploaded("sdxl-img2img-tiny", image=image_bytes((40, 40)), image_id="up-1").startswith(
        "image_id: 40x40 px"
    )
    # The caller setting both is still refused, naming the pair.
    assert refused("sdxl-img2img-tiny", image=image_bytes(), image_id="up-1").startswith(
        "image: set image or image_id, not both"
    )


def test_a_worker_rechecks_the_resolved_inputs() -> None:
    from mediamesh.common.params import check_generation

    spec = find_model(REGISTRY, "flux-img2img-tiny")
    params = resolve(spec, fields("flux-img2img-tiny", image=image_bytes()))
    with pytest.raises(InvalidArgument, match="strength"):
        check_generation(spec, dataclasses.replace(params, strength=2.0))
    with pytest.raises(InvalidArgument, match="image: model 'flux-tiny' takes no image"):
        check_generation(
            find_model(REGISTRY, "flux-tiny"), dataclasses.replace(params, strength=0.0)
        )
