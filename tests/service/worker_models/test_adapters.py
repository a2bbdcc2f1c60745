"""LoRA adapters per job on the tiny Flux and SDXL: applied, equal to the fused adapter,
split into separate pipeline calls by set, and evicted least recently used; a hub adapter
loads from the cache without the network, a LoRA of another family fails its job naming it,
and a pipeline without LoRA support refuses adapters when it loads."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from wm_helpers import job_for, of, png_pixels, run

from mediamesh.common.errors import StatusCode
from mediamesh.common.generation import AdapterScale
from mediamesh.common.registry import ModelSpec
from mediamesh.common.work import JobFailed, JobFinished
from mediamesh.worker.hosting import load_host
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.tiny_adapters import ensure_tiny_adapters
from tests.hub_cache import add_to_hub_cache

# A job with an adapter at scale 1 and the same job on the pipeline with that adapter fused
# into its weights differ by at most this many 8-bit levels (CPU float32). Fusing adds
# B @ A into each weight once, instead of computing the LoRA branch per call: the same sum
# in a different order, so only float rounding separates them.
FUSED_TOLERANCE = 1
# An adapter at scale 1 must move some pixel by clearly more than rounding.
VISIBLE_CHANGE = 3


def _host(spec: ModelSpec, models_dir: Path, tmp_path: Path, max_loaded: int = 8) -> DiffusionHost:
    host = load_host(
        spec,
        models_dir=models_dir,
        device="cpu",
        checkpoint_dir=tmp_path,
        max_loaded_adapters=max_loaded,
    )
    assert isinstance(host, DiffusionHost)
    return host


def _pixels(
    host: DiffusionHost, job_id: str, adapters: tuple[AdapterScale, ...] = ()
) -> np.ndarray:
    job = job_for(host.spec, job_id, seed=7, adapters=adapters)
    events = run(host, [job])
    assert of(events, job_id, JobFailed) == []
    (finished,) = of(events, job_id, JobFinished)
    return png_pixels(finished.data)


@pytest.mark.parametrize("model", ["flux-tiny", "sdxl-tiny"])
def test_adapter_changes_the_image_and_matches_it_fused(
    model: str, models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    spec = registry_spec(model)
    host = _host(spec, models_dir, tmp_path)
    plain = _pixels(host, "plain")
    styled = _pixels(host, "styled", (AdapterScale("style", 1.0),))
    assert np.abs(styled - plain).max() > VISIBLE_CHANGE
    # Back to no adapter: LoRA is disabled, not merely scaled, so the image is the plain one.
    assert np.array_equal(_pixels(host, "plain-again"), plain)
    assert host.adapters is not None and host.adapters.loads == 1
    host.close()

    fused = _host(spec, models_dir, tmp_path)
    source = spec.adapters[0].resolved_source(models_dir)
    fused.pipeline.load_lora_weights(source, adapter_name="style")
    fused.pipeline.fuse_lora(lora_scale=1.0, adapter_names=["style"])
    fused.pipeline.unload_lora_weights()
    difference = np.abs(_pixels(fused, "fused") - styled).max()
    fused.close()
    assert difference <= FUSED_TOLERANCE, difference


def test_adapter_sets_in_one_batch_run_as_separate_calls(
    models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    host = _host(registry_spec("flux-tiny"), models_dir, tmp_path)
    alone_plain = _pixels(host, "p")
    alone_styled = _pixels(host, "s", (AdapterScale("style", 1.0),))
    mixed = [
        job_for(host.spec, "p", seed=7),
        job_for(host.spec, "s", seed=7, adapters=(AdapterScale("style", 1.0),)),
    ]
    events = run(host, mixed)
    (plain,) = of(events, "p", JobFinished)
    (styled,) = of(events, "s", JobFinished)
    assert np.array_equal(png_pixels(plain.data), alone_plain)
    assert np.array_equal(png_pixels(styled.data), alone_styled)
    host.close()


def test_eviction_under_pressure_reloads_and_stays_correct(
    models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    spec = registry_spec("flux-tiny")
    roomy = _host(spec, models_dir, tmp_path)
    expected = {
        name: _pixels(roomy, f"ref-{name}", (AdapterScale(name, 1.0),))
        for name in ("style", "style2")
    }
    roomy.close()

    host = _host(spec, models_dir, tmp_path, max_loaded=1)
    cache = host.adapters
    assert cache is not None
    for round_ in range(2):
        for name in ("style", "style2"):
            pixels = _pixels(host, f"{name}-{round_}", (AdapterScale(name, 1.0),))
            assert np.array_equal(pixels, expected[name]), name
            assert [n for n, _ in cache.loaded()] == [name]
    # Alternating with room for one: every job loads its adapter again.
    assert cache.loads == 4
    assert set(host.pipeline.get_list_adapters()["transformer"]) == {"style2"}
    host.close()


def test_two_adapters_at_scales_in_one_job(models_dir: Path, registry_spec, tmp_path: Path) -> None:
    host = _host(registry_spec("flux-tiny"), models_dir, tmp_path)
    one = _pixels(host, "one", (AdapterScale("style", 1.0),))
    both = _pixels(host, "both", (AdapterScale("style", 1.0), AdapterScale("style2", -0.8)))
    assert np.abs(both - one).max() > VISIBLE_CHANGE
    assert host.adapters is not None
    assert [n for n, _ in host.adapters.loaded()] == ["style", "style2"]
    host.close()


def test_tiny_adapters_are_deterministic_and_added_to_a_built_model(
    models_dir: Path, tmp_path: Path
) -> None:
    # A models folder built before adapters existed gets them on the next build.
    shutil.copytree(models_dir / "flux-tiny", tmp_path / "flux-tiny")
    written = ensure_tiny_adapters(tmp_path, "flux-tiny")
    assert [p.name for p in written] == ["flux-tiny-lora-style", "flux-tiny-lora-style2"]
    for folder in written:
        (weights,) = folder.glob("*.safetensors")
        assert weights.read_bytes() == (models_dir / folder.name / weights.name).read_bytes()
    style, style2 = (next(f.glob("*.safetensors")).read_bytes() for f in written)
    assert style != style2
    assert ensure_tiny_adapters(tmp_path, "wan-tiny") == []


def _offering(spec: ModelSpec, *adapters: dict) -> ModelSpec:
    return ModelSpec.model_validate({**spec.model_dump(), "adapters": list(adapters)})


def test_a_pulled_hub_adapter_loads_from_the_cache_without_the_network(
    models_dir: Path, registry_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import diffusers.loaders.lora_base
    import huggingface_hub.constants

    add_to_hub_cache(tmp_path / "cache", "tiny-org/flux-lora", models_dir / "flux-tiny-lora-style")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("asked the hub")

    # What diffusers calls to guess a hub repository's weights file.
    monkeypatch.setattr(diffusers.loaders.lora_base, "model_info", no_network)
    flux = registry_spec("flux-tiny")
    local = _host(flux, models_dir, tmp_path)
    expected = _pixels(local, "local", (AdapterScale("style", 1.0),))
    local.close()
    spec = _offering(flux, {"name": "hubby", "source": "tiny-org/flux-lora"})
    host = _host(spec, models_dir, tmp_path)
    assert np.array_equal(_pixels(host, "hub", (AdapterScale("hubby", 1.0),)), expected)
    host.close()


def test_a_lora_of_another_family_fails_its_job_naming_it_and_the_rest_still_apply(
    models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    flux = registry_spec("flux-tiny")
    spec = _offering(
        flux,
        {"name": "style", "source": "{models_dir}/flux-tiny-lora-style"},
        {"name": "wrongfam", "source": "{models_dir}/sdxl-tiny-lora-style"},
    )
    host = _host(spec, models_dir, tmp_path)
    _pixels(host, "warm", (AdapterScale("style", 1.0),))
    job = job_for(spec, "wrong", seed=7, adapters=(AdapterScale("wrongfam", 1.0),))
    (failed,) = of(run(host, [job]), "wrong", JobFailed)
    expected = (
        f"adapter 'wrongfam' of model 'flux-tiny' (source {models_dir}/sdxl-tiny-lora-style) "
        "matched none of the model's layers; is it a LoRA for this model family?"
    )
    assert failed.message == expected
    # The job's configuration is at fault, not the worker: not INTERNAL.
    assert failed.code == StatusCode.FAILED_PRECONDITION
    assert host.adapters is not None and [n for n, _ in host.adapters.loaded()] == ["style"]
    _pixels(host, "after", (AdapterScale("style", 1.0),))
    host.close()


def test_a_pipeline_without_lora_support_refuses_adapters_when_it_loads(
    models_dir: Path, registry_spec, tmp_path: Path
) -> None:
    spec = _offering(
        registry_spec("stable-audio-tiny"),
        {"name": "style", "source": "{models_dir}/flux-tiny-lora-style"},
    )
    with pytest.raises(ModelLoadError) as raised:
        _host(spec, models_dir, tmp_path)
    assert str(raised.value) == (
        "model 'stable-audio-tiny' field adapters: pipeline StableAudioPipeline cannot load "
        "LoRA adapters; remove `adapters` from the entry"
    )
