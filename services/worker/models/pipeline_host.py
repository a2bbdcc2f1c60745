"""One host for any diffusers pipeline class: request fields map onto its call signature.

The pipeline's `__call__` decides what is passed: the prompt always, and the negative
prompt, steps, guidance, size, frame count and audio length when it takes them (the same
mapping `common.pipeline_fields` gives the gateway). Progress, cancellation and preemption
hang on `callback_on_step_end`, or on the older `callback`/`callback_steps` hook for
pipelines that only have that one (AudioLDM2, PixArt, Stable Audio). Family differences are
declared in `quirks`. Outputs are read by modality and handed to `encode`, which is where
the output format is chosen; the step callback is where previews are taken.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from diffusers import DiffusionPipeline

from mediamesh.common.pipeline_fields import OUTPUT_ATTRIBUTE
from mediamesh.common.registry import ModelSpec
from mediamesh.common.shown_numbers import shown
from mediamesh.common.work import JobParams
from mediamesh.worker.models.diffusion import DiffusionHost
from mediamesh.worker.models.encode import encode_result
from mediamesh.worker.models.inputs import image_arguments
from mediamesh.worker.models.made_size import check_made_size
from mediamesh.worker.models.memory import ModelLoadError
from mediamesh.worker.models.progress import StepTracker
from mediamesh.worker.models.prompt_window import overlong, token_windows
from mediamesh.worker.models.quirks import GUIDANCE_BY_EMBEDDING, quirks_for
from mediamesh.worker.models.step_boundaries import StepBoundaries
from mediamesh.worker.models.step_cache import StepCache, cache_for_call

# The output attribute of each modality's pipeline result.
_DURATION_PARAMETERS = ("audio_end_in_s", "audio_length_in_s")


def made_output(result: Any, modality: str) -> Any:
    """What a pipeline call made, from its output object: its images (Kandinsky 5's image
    pipelines name them `image`), frames or audios."""
    names = OUTPUT_ATTRIBUTE[modality]
    found = [name for name in names if getattr(result, name, None) is not None]
    return getattr(result, found[0] if found else names[0])


class PipelineHost(DiffusionHost):
    """Runs any diffusers pipeline whose call offers a per-step hook."""

    def __init__(
        self,
        spec: ModelSpec,
        pipeline: DiffusionPipeline,
        *,
        device: str,
        checkpoint_dir: Path,
        device_ids: list[str] | None = None,
    ) -> None:
        super().__init__(
            spec, pipeline, device=device, checkpoint_dir=checkpoint_dir, device_ids=device_ids
        )
        self.quirks = quirks_for(spec.pipeline)
        self.parameters = inspect.signature(type(pipeline).__call__).parameters
        if not {"callback_on_step_end", "callback"} & set(self.parameters):
            raise ModelLoadError(
                f"model {spec.name!r}: {type(pipeline).__name__}.__call__ has neither "
                "callback_on_step_end nor callback, so steps cannot be observed or stopped"
            )
        self.step_cache = StepCache(spec, pipeline, self.denoiser) if spec.cache else None
        # A guidance-distilled UNet (LCM and the like) takes guidance as an embedding, and
        # its pipeline then never runs classifier-free guidance, whatever the scale: the
        # negative prompt, only CFG's unconditional half, would be dropped.
        unet_config = getattr(getattr(pipeline, "unet", None), "config", None)
        self.guidance_distilled = spec.negative_prompt_needs_cfg and (
            getattr(unet_config, "time_cond_proj_dim", None) is not None
        )
        # A Flux-style pipeline passes guidance_scale only to the transformer's guidance
        # embedding; a checkpoint without one (FLUX.1-schnell style) would ignore it.
        transformer_config = getattr(getattr(pipeline, "transformer", None), "config", None)
        self.guidance_ignored = (
            type(pipeline).__name__ in GUIDANCE_BY_EMBEDDING
            and "guidance_scale" in spec.accepted_fields
            and getattr(transformer_config, "guidance_embeds", None) is False
        )
        self.token_windows = token_windows(
            pipeline, self._sequence_tokenizer(), self._sequence_length()
        )

    # Family hooks -------------------------------------------------------------------

    def validate(self, jobs: list[JobParams]) -> str | None:
        attribute = self.quirks.frame_multiple_attribute
        if attribute is None:
            return None
        # The pipeline would silently round the frame count; a caller must get what it asked.
        family = int(getattr(self.pipeline, attribute, 4)) * self.quirks.frame_multiple_factor
        # The entry's own rule may be stricter, never looser, than the family's.
        multiple = math.lcm(family, self.spec.limits.frame_multiple or 1)
        frames = jobs[0].generation.num_frames
        if frames < 1 or (frames - 1) % multiple != 0:
            return f"{self.spec.name} needs (num_frames - 1) % {multiple} == 0, got {frames}"
        return None

    def refusal(self, job: JobParams) -> str | None:
        generation = job.generation
        if generation.negative_prompt and self.guidance_distilled:
            return (
                f"negative_prompt: {self.spec.name}'s UNet is guidance-distilled "
                "(time_cond_proj_dim is set), so it runs no classifier-free guidance and "
                "would drop a negative prompt; leave negative_prompt unset"
            )
        # A job carries its resolved guidance only: one at the entry's default is what an
        # unset guidance_scale resolves to, and runs; only another value was asked for.
        if self.guidance_ignored and generation.guidance_scale != self.spec.defaults.guidance_scale:
            return (
                f"guidance_scale: {self.spec.name}'s transformer has no guidance embedding "
                f"(guidance_embeds is false, a FLUX.1-schnell-style checkpoint), so "
                f"{self.spec.pipeline} would ignore guidance_scale "
                f"{shown(generation.guidance_scale)}; leave guidance_scale unset"
            )
        for field in ("prompt", "negative_prompt"):
            reason = overlong(field, getattr(generation, field), self.token_windows, self.spec.name)
            if reason:
                return reason
        return None

    def group_key(self, job: JobParams) -> tuple[Any, ...]:
        # Duration conditions audio models, and an empty negative prompt is passed as none
        # (some pipelines then use zero embeddings): either would differ between neighbours.
        key: tuple[Any, ...] = (bool(job.generation.negative_prompt), job.generation.use_cache)
        if self.spec.modality == "audio":
            key += (job.generation.duration_s,)
        # One strength per pipeline call, and a mask for all of a call's images or none.
        key += (job.generation.strength, job.generation.mask_image is not None)
        return key

    @property
    def denoiser(self) -> torch.nn.Module:
        for name in ("transformer", "unet"):
            module = getattr(self.pipeline, name, None)
            if isinstance(module, torch.nn.Module):
                return module
        raise ModelLoadError(f"model {self.spec.name!r}: pipeline has no transformer or unet")

    def generate(
        self,
        jobs: list[JobParams],
        generators: list[torch.Generator],
        latents: torch.Tensor | None,
        tracker: StepTracker,
    ) -> Any:
        arguments = self.call_arguments(jobs, generators)
        # With a strength the loop runs only the tail of the schedule, as long as this call
        # makes it; without, the job's own steps.
        tail = "strength" in arguments
        arguments.update(self._step_hook(tracker, tail))
        first = jobs[0].generation
        with (
            self._resumed_latents(latents, generators),
            self._counted_tail(tracker, tail),
            cache_for_call(self.step_cache, first.use_cache, first.steps),
        ):
            result = self.pipeline(**arguments)
        return made_output(result, self.spec.modality)

    def encode(self, output: Any, index: int, job: JobParams) -> tuple[bytes, str]:
        item = output[index]
        if isinstance(item, torch.Tensor):
            item = item.float().cpu().numpy()
        check_made_size(self.spec, item, job.generation)
        rate = self.sample_rate() if self.spec.modality == "audio" else 0
        return encode_result(self.spec, item, job.generation, rate)

    # Call construction --------------------------------------------------------------

    def call_arguments(
        self, jobs: list[JobParams], generators: list[torch.Generator]
    ) -> dict[str, Any]:
        """The pipeline call for one group, without the step hook."""
        first = jobs[0].generation
        takes = self.parameters
        arguments: dict[str, Any] = dict(self.spec.call_kwargs)
        arguments.update(
            prompt=[job.generation.prompt for job in jobs],
            num_inference_steps=first.steps,
            generator=generators,
            output_type="np",
        )
        accepted = self.spec.accepted_fields
        if "negative_prompt" in takes and "negative_prompt" in accepted and first.negative_prompt:
            arguments["negative_prompt"] = [job.generation.negative_prompt for job in jobs]
        if "guidance_scale" in takes:
            arguments["guidance_scale"] = first.guidance_scale
        if "height" in takes and "width" in takes and first.width and first.height:
            arguments.update(height=first.height, width=first.width)
        if "num_frames" in takes and first.num_frames:
            arguments["num_frames"] = first.num_frames
        for name in _DURATION_PARAMETERS:
            if name in takes and first.duration_s:
                arguments[name] = first.duration_s
                break
        arguments.update(image_arguments(self.spec, takes, jobs))
        if "max_sequence_length" in takes and "max_sequence_length" not in arguments:
            budget = self._sequence_budget()
            if budget is not None:
                arguments["max_sequence_length"] = budget
        return arguments

    def _sequence_tokenizer(self) -> str | None:
        """The tokenizer whose length the call's `max_sequence_length` sets."""
        return self.quirks.sequence_tokenizer or _last_tokenizer(self.pipeline)

    def _sequence_length(self) -> int | None:
        """The `max_sequence_length` every call passes (None: the call takes none)."""
        fixed = self.spec.call_kwargs.get("max_sequence_length")
        if isinstance(fixed, int):
            return fixed
        if "max_sequence_length" not in self.parameters:
            return None
        return self._sequence_budget()

    def _sequence_budget(self) -> int | None:
        """The call's default sequence length, cut to what the text encoder's tokenizer
        declares (tiny and some real tokenizers are shorter than the pipeline default)."""
        default = self.parameters["max_sequence_length"].default
        name = self._sequence_tokenizer()
        tokenizer = getattr(self.pipeline, name, None) if name else None
        declared = getattr(tokenizer, "model_max_length", None)
        if not isinstance(default, int):
            return declared if isinstance(declared, int) else None
        if isinstance(declared, int) and declared < default:
            return declared
        return default

    def _step_hook(self, tracker: StepTracker, tail: bool) -> dict[str, Any]:
        """The call's step callback. Which loop iterations end a step is decided at the
        first one: only then has this call counted its steps (see `_counted_tail`); before
        the call the pipeline object still holds the previous call's counts."""
        key = self.quirks.latents_key
        scheduler = self.pipeline.scheduler
        found: list[StepBoundaries] = []

        def boundaries(pipe: Any) -> StepBoundaries:
            if not found:
                if tail and tracker.call_steps is None:
                    # A pipeline without `get_timesteps`: its loop length, set by this call.
                    tracker.call_steps = _loop_length(pipe)
                found.append(StepBoundaries(scheduler, tracker.total_steps - tracker.start_step))
            return found[0]

        if "callback_on_step_end" in self.parameters:

            def on_step_end(
                pipe: Any, index: int, _t: Any, tensors: dict[str, torch.Tensor]
            ) -> dict[str, torch.Tensor]:
                step = boundaries(pipe).completed(index, pipe)
                if step is not None:
                    tracker.on_step(step, tensors[key])
                return {}

            return {
                "callback_on_step_end": on_step_end,
                "callback_on_step_end_tensor_inputs": [key],
            }

        def on_step(index: int, _t: Any, latents: torch.Tensor) -> None:
            step = boundaries(self.pipeline).completed(index)
            if step is not None:
                tracker.on_step(step, latents)

        return {"callback": on_step, "callback_steps": 1}

    @contextmanager
    def _counted_tail(self, tracker: StepTracker, tail: bool) -> Iterator[None]:
        """Records in `tracker.call_steps` the steps this call's loop runs from its image.

        Img2img and inpainting pipelines cut the schedule in `get_timesteps(steps, strength,
        ...)`, which returns the kept timesteps and their count of steps, the total of their
        own progress bar. Its rounding is the family's (4 steps at 0.6: 2 on SDXL, which
        rounds the kept steps down, 3 on Flux and SD3, which round the skipped ones down),
        and second-order or warm-up schedulers run more loop iterations than steps, so the
        count is taken from the call rather than worked out from the job.
        """
        pipeline = self.pipeline
        original = getattr(pipeline, "get_timesteps", None)
        if not tail or not callable(original):
            yield
            return

        def get_timesteps(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            count = result[-1] if isinstance(result, tuple) and result else None
            if tracker.call_steps is None and type(count) is int and count > 0:
                tracker.call_steps = count
            return result

        pipeline.get_timesteps = get_timesteps
        try:
            yield
        finally:
            vars(pipeline).pop("get_timesteps", None)

    @contextmanager
    def _resumed_latents(
        self, latents: torch.Tensor | None, generators: list[torch.Generator]
    ) -> Iterator[None]:
        """Hands a resumed group's saved latents to the denoising loop untouched.

        Pipelines scale or pack latents passed in as if they were fresh noise, so the
        pipeline's own `prepare_latents` runs (it also returns extras such as Flux's image
        ids) and its latents are swapped for the saved ones. The generators are put back
        afterwards: the saved state is where a stochastic sampler continues drawing.
        """
        if latents is None:
            yield
            return
        pipeline = self.pipeline
        original = pipeline.prepare_latents
        resumed = latents

        def prepare_latents(*args: Any, **kwargs: Any) -> Any:
            states = [generator.get_state() for generator in generators]
            prepared = original(*args, **kwargs)
            for generator, state in zip(generators, states, strict=True):
                generator.set_state(state)
            if isinstance(prepared, tuple):
                return (resumed.to(prepared[0].dtype), *prepared[1:])
            return resumed.to(prepared.dtype)

        pipeline.prepare_latents = prepare_latents
        try:
            yield
        finally:
            vars(pipeline).pop("prepare_latents", None)

    def sample_rate(self) -> int:
        """Audio samples per second of the pipeline's decoder."""
        vae_rate = getattr(self.pipeline.vae, "sampling_rate", None)
        if isinstance(vae_rate, int):
            return vae_rate
        vocoder = getattr(self.pipeline, "vocoder", None)
        if vocoder is None:
            raise ModelLoadError(f"model {self.spec.name!r}: no sampling rate on vae or vocoder")
        return int(vocoder.config.sampling_rate)


def _loop_length(pipeline: Any) -> int | None:
    """The running call's count of loop iterations (`_num_timesteps`), if it keeps one."""
    length = getattr(pipeline, "_num_timesteps", None)
    return length if isinstance(length, int) and length > 0 else None


def _last_tokenizer(pipeline: DiffusionPipeline) -> str | None:
    for name in ("tokenizer_3", "tokenizer_2", "tokenizer"):
        if getattr(pipeline, name, None) is not None:
            return name
    return None
