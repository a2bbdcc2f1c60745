"""preview_every_steps: resolved against the model, carried to the worker and back to callers."""

from __future__ import annotations

import pytest

from mediamesh.common.api.requests import request_fields
from mediamesh.common.api.worker_wire import batch_event, job_params, job_spec, worker_events
from mediamesh.common.errors import InvalidArgument
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.common.params import RequestFields, check_generation, resolve
from mediamesh.common.registry import ModelSpec, RegistryError, load_registry, parse_registry
from mediamesh.common.work import JobParams, Preview, StepDone
from mediamesh.scheduler.api.convert import generate_event, model_info
from mediamesh.scheduler.core.jobs import JobState
from mediamesh.scheduler.events import WatchEvent

REGISTRY = load_registry()


def spec(name: str) -> ModelSpec:
    found = REGISTRY.get(name)
    assert found is not None
    return found


def without_previews(model: ModelSpec) -> ModelSpec:
    return model.model_copy(update={"preview": model.preview.model_copy(update={"enabled": False})})


def _refusal(model: ModelSpec, **fields: object) -> str:
    with pytest.raises(InvalidArgument) as caught:
        resolve(model, RequestFields(model.name, "a fox", **fields))  # type: ignore[arg-type]
    return caught.value.message


def test_previews_are_off_unless_asked_and_kept_when_asked() -> None:
    flux = spec("flux-tiny")
    assert resolve(flux, RequestFields("flux-tiny", "a fox")).preview_every_steps == 0
    asked = resolve(flux, RequestFields("flux-tiny", "a fox", steps=6, preview_every_steps=3))
    assert asked.preview_every_steps == 3


def test_an_interval_beyond_the_steps_is_refused_naming_the_field() -> None:
    message = _refusal(spec("sdxl-tiny"), steps=4, preview_every_steps=5)
    assert message.startswith("preview_every_steps:") and "0..4" in message


def test_a_model_without_previews_refuses_them_but_takes_zero() -> None:
    echo = without_previews(spec("echo"))
    message = _refusal(echo, preview_every_steps=1)
    assert message.startswith("preview_every_steps:") and "no latent previews" in message
    assert resolve(echo, RequestFields("echo", "a fox", preview_every_steps=0)).steps == 1


def test_the_worker_check_refuses_previews_the_model_does_not_make() -> None:
    params = resolve(spec("flux-tiny"), RequestFields("flux-tiny", "x", preview_every_steps=1))
    with pytest.raises(InvalidArgument, match="preview_every_steps"):
        check_generation(without_previews(spec("flux-tiny")), params)


def test_every_shipped_family_has_previews_and_an_entry_can_turn_them_off() -> None:
    assert all(model.preview.enabled for model in REGISTRY.models)
    entry = {
        "name": "quiet",
        "modality": "image",
        "pipeline": "Echo",
        "source": "builtin",
        "defaults": {"width": 16, "height": 16},
        "limits": {"max_width": 64, "max_height": 64},
        "preview": {"enabled": False},
    }
    quiet = parse_registry({"models": [entry]}).models[0]
    assert not quiet.preview.enabled
    assert not model_info(quiet, []).previews and model_info(spec("sdxl-tiny"), []).previews
    with pytest.raises(RegistryError, match="vae or rgb_factors"):
        parse_registry({"models": [{**entry, "preview": {"vae": "x", "rgb_factors": [[1, 0, 0]]}}]})


def test_the_field_travels_from_request_to_worker_and_the_preview_back() -> None:
    request = common_pb2.GenerateRequest(model="flux-tiny", prompt="x", preview_every_steps=2)
    fields = request_fields(request)
    assert fields.preview_every_steps == 2
    assert request_fields(common_pb2.GenerateRequest(model="m")).preview_every_steps is None
    params = JobParams("j", resolve(spec("flux-tiny"), fields))
    assert job_params(job_spec(params, 0)).generation.preview_every_steps == 2

    preview = Preview(b"\x00webp", "image/webp")
    sent = batch_event(StepDone("j", 2, 4, 0.1, preview))
    assert worker_events(sent) == [StepDone("j", 2, 4, 0.1, preview)]
    plain = batch_event(StepDone("j", 1, 4, 0.1))
    assert not plain.progress.HasField("preview")
    assert worker_events(plain) == [StepDone("j", 1, 4, 0.1)]


def test_watchers_get_the_preview_on_its_progress_event() -> None:
    preview = Preview(b"pixels", "image/png")
    event = WatchEvent("j", JobState.RUNNING, "progress", step=2, total_steps=4, preview=preview)
    message = generate_event(event, None, 0)
    assert message.progress.preview.data == b"pixels"
    assert message.progress.preview.mime_type == "image/png"
    bare = generate_event(WatchEvent("j", JobState.RUNNING, "progress", step=1), None, 0)
    assert not bare.progress.HasField("preview")


def test_a_preview_autoencoder_needs_the_data_mode() -> None:
    flux = next(m for m in REGISTRY.models if m.name == "flux-tiny")
    entry = flux.model_dump(mode="json", exclude={"adapters"})
    entry["preview"] = {"vae": "{models_dir}/taef1"}
    assert parse_registry({"models": [entry]}).models[0].preview.vae
    modes = {
        "tensor": {"size": 2, "devices": ["cpu", "cpu"]},
        "pipeline": {"devices": ["cpu", "cpu"]},
        "context": {"ulysses": 2, "ring": 1},
    }
    for mode, layout in modes.items():
        entry["parallelism"] = {"mode": mode, **layout}
        with pytest.raises(RegistryError, match=f"preview.vae: .*not {mode}"):
            parse_registry({"models": [entry]})
