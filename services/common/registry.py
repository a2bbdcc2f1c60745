"""The model registry: which models exist, how they run and what callers may ask of them.

Every service reads the same registry file. The gateway validates requests against its
limits, the scheduler takes modality, batching and cost from it, and workers load from it.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from mediamesh.common.adapters import AdapterSpec
from mediamesh.common.entry_fit import check_entry_fits
from mediamesh.common.gpu_options import GpuOptions, check_load_options
from mediamesh.common.input_spec import InputName, check_inputs, pipeline_inputs
from mediamesh.common.limits import MAX_BATCH, MAX_PROMPT_CHARS, MODEL_NAME_PATTERN
from mediamesh.common.output_formats import (
    FORMATS_BY_MODALITY,
    FPS_RANGE,
    GIF_MAX_FPS,
    MIME_TYPES,
)
from mediamesh.common.parallelism_spec import ParallelismSpec
from mediamesh.common.pipeline_fields import (
    call_parameters,
    cfg_guidance_floor,
    signature_fields,
)
from mediamesh.common.preview_spec import PreviewSpec
from mediamesh.common.step_cache import StepCacheSpec
from mediamesh.common.true_cfg import released_fields
from mediamesh.common.warmup import WarmupShape, exceeds
from mediamesh.common.yaml_lines import line_of, read_nodes

Modality = Literal["image", "video", "audio"]
OutputFormat = Literal[
    "png", "jpeg", "webp", "mp4", "webm", "gif", "wav", "flac", "ogg", "mp3", "opus", "aac"
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Numbers(Strict):
    """Sections of numbers alone, read with YAML's own types: a lax model reads `steps:
    true` as 1 and `max_batch: "4"` as 4, where each is a mistake to name."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BatchingSpec(Numbers):
    """How the scheduler groups compatible jobs of this model."""

    mode: Literal["dynamic", "static", "none"] = "dynamic"
    max_batch: int = Field(4, ge=1, le=MAX_BATCH)
    # Dynamic: the oldest job waits at most this long for company. Static: optional cap.
    max_wait_ms: int | None = Field(50, ge=0)


class DefaultParams(Numbers):
    steps: int = Field(4, ge=1)
    width: int = Field(0, ge=0)
    height: int = Field(0, ge=0)
    num_frames: int = Field(0, ge=0)
    duration_s: float = Field(0.0, ge=0)
    guidance_scale: float = Field(3.5, ge=0)
    # How far an image-input model moves from its input when a request leaves it unset.
    strength: float = Field(0.8, gt=0, le=1)


# The size multiple of an image or video entry that sets none.
DEFAULT_SIZE_MULTIPLE = 16


class LimitParams(Numbers):
    max_steps: int = Field(50, ge=1)
    max_width: int = Field(0, ge=0)
    max_height: int = Field(0, ge=0)
    # Width and height must be multiples of this; 0 where size does not apply (audio),
    # as max_width and max_height are 0 there. Image and video entries need at least 1.
    size_multiple: int = Field(DEFAULT_SIZE_MULTIPLE, ge=0)
    max_num_frames: int = Field(0, ge=0)
    # Video models that need (num_frames - 1) % frame_multiple == 0: Wan 4 (its VAE's
    # temporal compression), CogVideoX 8 (its VAE decodes N frames only from an odd number
    # of latent frames, (N - 1) / 4 + 1; other counts come back padded, 5 as 8).
    frame_multiple: int = Field(1, ge=1)
    max_duration_s: float = Field(0.0, ge=0)
    max_guidance_scale: float = Field(20.0, ge=0)
    max_prompt_chars: int = Field(2000, ge=1, le=MAX_PROMPT_CHARS)
    # Most pixels (width * height) of an input image or mask; checked from the image's
    # header, before it is decoded.
    max_input_pixels: int = Field(4096 * 4096, ge=1)


class OutputSpec(Strict):
    """How results are encoded: the default format, the formats a request may choose."""

    # Default encoding; unset takes the first of `formats`.
    format: OutputFormat | None = None
    # Formats a request may choose; empty allows every format of the model's modality.
    formats: tuple[OutputFormat, ...] = ()
    # Video frames per second, unless a request sets `fps`. Strict per field, as Numbers is
    # per section (`fps: true` is a mistake, not 1): a strict `formats` would refuse a list.
    fps: int = Field(8, ge=FPS_RANGE[0], le=FPS_RANGE[1], strict=True)
    # Lossy image quality (jpeg, webp), unless a request sets `output_quality`.
    quality: int = Field(90, ge=1, le=100, strict=True)

    @model_validator(mode="after")
    def _fps_the_default_format_plays(self) -> OutputSpec:
        if self.format == "gif" and self.fps > GIF_MAX_FPS:
            raise ValueError(
                f"output.fps: {self.fps} is past {GIF_MAX_FPS}, the most a gif plays at in a "
                "browser (its delays are hundredths of a second)"
            )
        return self

    @property
    def mime_type(self) -> str:
        """MIME type of results in the default format."""
        return MIME_TYPES[self.format or "png"]


class CostSpec(Numbers):
    """Prior for the device-seconds a job takes, refined online from measured step times."""

    # Seconds of one denoising step for one job at one megapixel-frame.
    step_s_per_megapixel: float = Field(0.5, gt=0)
    # Fixed seconds per job (encoding, decoding, text encoders).
    overhead_s: float = Field(0.05, ge=0)


# Request fields that shape what a model makes. The rest of a request (model, priority,
# timeout_ms, idempotency_key) is about the job, and every model takes it.
MODEL_FIELDS = (
    "prompt",
    "negative_prompt",
    "steps",
    "seed",
    "width",
    "height",
    "num_frames",
    "guidance_scale",
    "duration_s",
    "strength",
)
_COMMON_FIELDS = frozenset({"prompt", "steps", "seed", "guidance_scale"})
# Fields a modality can use at all; an entry's accepted fields stay within its modality's.
_MODALITY_FIELDS: dict[str, frozenset[str]] = {
    "image": _COMMON_FIELDS | {"negative_prompt", "width", "height", "strength"},
    "video": _COMMON_FIELDS | {"negative_prompt", "width", "height", "num_frames", "strength"},
    "audio": _COMMON_FIELDS | {"negative_prompt", "duration_s"},
}
# What the built-in Echo model uses: its step count, its seed (the colour) and its size. It
# stands in for an image pipeline in tests, and like any model it refuses what it would
# ignore (a negative prompt, guidance); `prompt` is required of every request.
ECHO_FIELDS = frozenset({"prompt", "steps", "seed", "width", "height"})
# What each pipeline family's call takes when diffusers is not installed where the registry
# is read. Flux is guidance-distilled: it has no negative prompt.
_FAMILY_FIELDS: dict[str, frozenset[str]] = {
    "FluxPipeline": _MODALITY_FIELDS["image"] - {"negative_prompt", "strength"},
    "WanPipeline": _MODALITY_FIELDS["video"] - {"strength"},
    "StableAudioPipeline": _MODALITY_FIELDS["audio"],
    "Echo": ECHO_FIELDS,
}
# A pipeline's negative prompt is only the unconditional half of classifier-free guidance
# when its class gates that guidance on `guidance_scale > N` (`do_classifier_free_guidance`,
# read by `pipeline_fields.cfg_guidance_floor`): at guidance_scale <= N it would be dropped,
# so a request that has one is refused (`params.check_negative_prompt`). Flux gates on the
# entry's `true_cfg_scale` (`common.true_cfg`), not on guidance_scale, so it is not refused.
# Where diffusers is not installed, these families (all `guidance_scale > 1`) stand in.
CFG_GUIDANCE_FLOOR = 1.0
NEGATIVE_PROMPT_NEEDS_CFG = frozenset(
    {
        "StableDiffusionPipeline",
        "StableDiffusionImg2ImgPipeline",
        "StableDiffusionInpaintPipeline",
        "StableDiffusionXLPipeline",
        "StableDiffusionXLImg2ImgPipeline",
        "StableDiffusionXLInpaintPipeline",
        "StableDiffusion3Pipeline",
        "StableDiffusion3Img2ImgPipeline",
        "StableDiffusion3InpaintPipeline",
        "PixArtAlphaPipeline",
        "PixArtSigmaPipeline",
        "WanPipeline",
        "WanImageToVideoPipeline",
        "WanVideoToVideoPipeline",
        "CogVideoXPipeline",
        "CogVideoXImageToVideoPipeline",
        "CogVideoXVideoToVideoPipeline",
        "StableAudioPipeline",
        "AudioLDM2Pipeline",
    }
)


# Pipeline call arguments that come from the request or that the worker owns (progress,
# cancellation, per-job noise, output decoding); a registry entry cannot fix them.
RESERVED_CALL_ARGUMENTS = frozenset(
    {
        "prompt",
        "negative_prompt",
        "num_inference_steps",
        "guidance_scale",
        "height",
        "width",
        "num_frames",
        "audio_end_in_s",
        "audio_length_in_s",
        "generator",
        "latents",
        "output_type",
        "return_dict",
        "callback",
        "callback_steps",
        "callback_on_step_end",
        "callback_on_step_end_tensor_inputs",
        "num_images_per_prompt",
        "num_videos_per_prompt",
        "num_waveforms_per_prompt",
    }
)


def family_fields(
    pipeline: str, modality: str, call_kwargs: dict[str, Any] | None = None
) -> frozenset[str]:
    """The request fields a pipeline takes: read from its class's `__call__` signature in
    the installed diffusers (no weights, no torch), else from the table above, else its
    modality's fields without a negative prompt (an entry can list `accepted_fields`).
    Fields the entry's `call_kwargs` switch on are added (Flux true CFG, `common.true_cfg`)."""
    possible = _MODALITY_FIELDS.get(modality, _COMMON_FIELDS)
    released = released_fields(pipeline, call_kwargs)
    from_signature = signature_fields(pipeline)
    if from_signature is not None:
        return (from_signature | released) & possible
    known = _FAMILY_FIELDS.get(pipeline)
    if known is not None:
        return known | released
    return possible - {"negative_prompt", "strength"}


def negative_prompt_cfg_floor(pipeline: str) -> float | None:
    """The guidance_scale above which `pipeline` reads a negative prompt, from its class in
    the installed diffusers, else NEGATIVE_PROMPT_NEEDS_CFG; None when no guidance_scale
    gate is found (true CFG, CFG always on, an inline test) or its call takes no
    guidance_scale, so no request could turn CFG on."""
    parameters = call_parameters(pipeline)
    if parameters is None:
        return CFG_GUIDANCE_FLOOR if pipeline in NEGATIVE_PROMPT_NEEDS_CFG else None
    if "guidance_scale" not in parameters:
        return None
    return cfg_guidance_floor(pipeline)


class ModelSpec(Strict):
    name: str = Field(min_length=1, pattern=MODEL_NAME_PATTERN)
    modality: Modality
    pipeline: str = Field(min_length=1)
    source: str = Field(min_length=1)
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    quantization: Literal["none", "int8-dynamic"] = "none"
    batching: BatchingSpec = Field(default_factory=BatchingSpec)
    defaults: DefaultParams = Field(default_factory=DefaultParams)
    limits: LimitParams = Field(default_factory=LimitParams)
    output: OutputSpec = Field(default_factory=OutputSpec)
    cost: CostSpec = Field(default_factory=CostSpec)
    # Request fields this model uses (see MODEL_FIELDS); a request setting any other is
    # refused, never silently dropped. Unset: derived from the pipeline family.
    accepted_fields: frozenset[str] = frozenset()
    # Fixed keyword arguments added to every pipeline call (e.g. `max_sequence_length`).
    # They may not set what requests or the worker control (see RESERVED_CALL_ARGUMENTS).
    call_kwargs: dict[str, Any] = Field(default_factory=dict)
    # Hub checkpoints: the branch, tag or commit to load (None: the default branch), and
    # the weight file variant (e.g. "fp16"), both passed to `from_pretrained` and used by
    # `mediamesh models pull` (see `common.hub`).
    revision: str | None = Field(None, min_length=1, max_length=256)
    variant: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    # LoRA adapters requests may apply to this model, by unique name (common/adapters.py).
    adapters: tuple[AdapterSpec, ...] = ()
    # Latent previews on progress events (request field preview_every_steps).
    preview: PreviewSpec = Field(default_factory=PreviewSpec)
    # Step cache applied at load (None: every step runs in full); a request can opt out.
    cache: StepCacheSpec | None = None
    # Compile, attention backend, VAE tiling/slicing and offload, applied at load.
    gpu: GpuOptions = Field(default_factory=GpuOptions)
    # Shapes a worker runs once after loading, before it reports ready.
    warmup: tuple[WarmupShape, ...] = ()
    # Input images the model takes, all required (see `common.input_spec`). Unset: what the
    # pipeline's call takes.
    inputs: tuple[InputName, ...] = ()

    @field_validator("pipeline")
    @classmethod
    def _a_class_not_a_picker(cls, value: str) -> str:
        # An AutoPipeline picks its class from a folder at load: the registry, which reads
        # the call's fields from the class named here, could say nothing true of it, and
        # the worker refused it only after `up` had started the mesh.
        if value.startswith("AutoPipeline"):
            raise ValueError(
                f"{value} picks a class from the folder when it loads; name that class "
                "(the folder's model_index.json `_class_name`, such as "
                "StableDiffusionPipeline or StableDiffusionImg2ImgPipeline)"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _pipeline_inputs(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("inputs") is None:
            pipeline = data.get("pipeline")
            found = pipeline_inputs(pipeline) if isinstance(pipeline, str) else None
            data = {**data, "inputs": found or ()}
        return data

    @model_validator(mode="after")
    def _inputs_fit_pipeline(self) -> ModelSpec:
        check_inputs(self.pipeline, self.inputs)
        return self

    @property
    def negative_prompt_needs_cfg(self) -> bool:
        """True when the model uses a negative prompt only with classifier-free guidance,
        that is with guidance_scale above `negative_prompt_cfg_floor`."""
        return self.negative_prompt_cfg_floor is not None

    @property
    def negative_prompt_cfg_floor(self) -> float | None:
        """The guidance_scale a negative prompt needs to be above to take effect; None when
        the model takes none, or uses it whatever the guidance."""
        if "negative_prompt" not in self.accepted_fields:
            return None
        return negative_prompt_cfg_floor(self.pipeline)

    @property
    def default_strength(self) -> float:
        """The strength of an image request that sets none; 0 for a model without one."""
        takes = "image" in self.inputs and "strength" in self.accepted_fields
        return self.defaults.strength if takes else 0.0

    @model_validator(mode="before")
    @classmethod
    def _family_accepted_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("accepted_fields"):
            pipeline, modality = data.get("pipeline"), data.get("modality")
            if isinstance(pipeline, str) and isinstance(modality, str):
                fixed = data.get("call_kwargs")
                fields = family_fields(
                    pipeline, modality, fixed if isinstance(fixed, dict) else None
                )
                data = {**data, "accepted_fields": fields}
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_size_multiple_for_audio(cls, data: Any) -> Any:
        # Audio has no width or height: its size multiple is 0, like its max_width, so that
        # ListModels reports no size rule for it. The image default (16) is taken as unset,
        # as a dumped older entry carries it; any other value is refused, never ignored.
        if not isinstance(data, dict) or data.get("modality") != "audio":
            return data
        limits = data.get("limits") or {}
        if isinstance(limits, LimitParams):
            limits = limits.model_dump()
        if not isinstance(limits, dict):
            return data
        given = limits.get("size_multiple", DEFAULT_SIZE_MULTIPLE)
        if given not in (0, DEFAULT_SIZE_MULTIPLE):
            raise ValueError(
                f"limits.size_multiple: audio models have no width or height; leave "
                f"limits.size_multiple unset (got {given})"
            )
        return {**data, "limits": {**limits, "size_multiple": 0}}

    @model_validator(mode="after")
    def _size_multiple_for_pictures(self) -> ModelSpec:
        if self.modality != "audio" and self.limits.size_multiple < 1:
            raise ValueError(
                f"limits.size_multiple: {self.modality} models need a size multiple of at "
                f"least 1, got {self.limits.size_multiple}"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _modality_output_formats(cls, data: Any) -> Any:
        # The modality decides which formats exist, so the entry's own list and default are
        # filled in here, before the frozen OutputSpec is built.
        if not isinstance(data, dict) or data.get("modality") not in FORMATS_BY_MODALITY:
            return data
        output = data.get("output") or {}
        if not isinstance(output, dict):
            return data
        formats = output.get("formats") or FORMATS_BY_MODALITY[data["modality"]]
        if not output.get("format") and isinstance(formats, list | tuple) and formats:
            output = {**output, "format": formats[0]}
        return {**data, "output": {**output, "formats": formats}}

    @model_validator(mode="after")
    def _output_formats_fit(self) -> ModelSpec:
        possible = FORMATS_BY_MODALITY[self.modality]
        beyond = [fmt for fmt in self.output.formats if fmt not in possible]
        if beyond:
            raise ValueError(
                f"output.formats: {', '.join(beyond)} cannot encode {self.modality}; "
                f"choose from {', '.join(possible)}"
            )
        if self.output.format not in self.output.formats:
            raise ValueError(
                f"output.format: {self.output.format} is not one of output.formats "
                f"({', '.join(self.output.formats)})"
            )
        return self

    @model_validator(mode="after")
    def _output_settings_fit_modality(self) -> ModelSpec:
        # Compared with the defaults, not with what the YAML wrote: a dumped spec carries both.
        unset = OutputSpec()
        if self.modality != "video" and self.output.fps != unset.fps:
            raise ValueError(
                f"output.fps: {self.modality} models have no frame rate; only video entries "
                "take output.fps"
            )
        if self.modality != "image" and self.output.quality != unset.quality:
            raise ValueError(
                f"output.quality: {self.modality} models have no encoder quality; only image "
                "entries (jpeg, webp) take output.quality"
            )
        return self

    @property
    def output_formats(self) -> tuple[str, ...]:
        """Formats a request may choose for this model, the default first."""
        default = self.default_output_format
        return (default, *(fmt for fmt in self.output.formats if fmt != default))

    @property
    def default_output_format(self) -> str:
        """The format of a request that names none."""
        return self.output.format or FORMATS_BY_MODALITY[self.modality][0]

    @model_validator(mode="after")
    def _accepted_fields_known(self) -> ModelSpec:
        possible = _MODALITY_FIELDS[self.modality]
        beyond = sorted(self.accepted_fields - possible)
        if beyond:
            raise ValueError(
                f"accepted_fields: {', '.join(beyond)} cannot apply to {self.modality} models; "
                f"choose from {', '.join(f for f in MODEL_FIELDS if f in possible)}"
            )
        if "prompt" not in self.accepted_fields:
            raise ValueError("accepted_fields: must include prompt")
        unused = sorted(self.accepted_fields - ECHO_FIELDS) if self.pipeline == "Echo" else []
        if unused:
            raise ValueError(
                f"accepted_fields: the builtin Echo does not use {', '.join(unused)}; "
                f"it uses {', '.join(f for f in MODEL_FIELDS if f in ECHO_FIELDS)}"
            )
        return self

    @model_validator(mode="after")
    def _adapter_names_unique(self) -> ModelSpec:
        names = [a.name for a in self.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"adapters: {', '.join(twice)} named more than once")
        if self.adapters and self.parallelism.mode != "data":
            # Refused at start: the parallel hosts cannot apply adapters per batch.
            raise ValueError(
                f"adapters: LoRA adapters need parallelism.mode data, not {self.parallelism.mode}"
            )
        return self

    @model_validator(mode="after")
    def _preview_decoder_for_pictures(self) -> ModelSpec:
        # Audio previews are heat maps of the latents: neither decoder would ever run.
        if self.modality == "audio" and (self.preview.vae or self.preview.rgb_factors):
            field = "preview.vae" if self.preview.vae else "preview.rgb_factors"
            raise ValueError(
                f"{field}: audio previews are heat maps of the latents, never RGB; "
                f"leave {field} unset"
            )
        return self

    @model_validator(mode="after")
    def _preview_vae_in_data_mode(self) -> ModelSpec:
        # Only the single-device host loads a preview autoencoder; a parallel host would
        # quietly fall back to the linear projection the entry asked to replace.
        if self.preview.vae and self.parallelism.mode != "data":
            raise ValueError(
                f"preview.vae: a preview autoencoder needs parallelism.mode data, not "
                f"{self.parallelism.mode}; leave preview.vae unset to preview by projection"
            )
        return self

    @model_validator(mode="after")
    def _load_options_fit(self) -> ModelSpec:
        sized = self
        if not self.limits.size_multiple:
            # The warm-up check holds widths to the size multiple with `%`; an audio entry's
            # shapes have no width (0, and max_width 0 refuses any other), so any multiple
            # passes them, and 1 keeps that check from dividing by 0.
            unit = self.limits.model_copy(update={"size_multiple": 1})
            sized = self.model_copy(update={"limits": unit})
        check_load_options(sized)
        return self

    @model_validator(mode="after")
    def _call_kwargs_leave_controls_alone(self) -> ModelSpec:
        taken = sorted(set(self.call_kwargs) & RESERVED_CALL_ARGUMENTS)
        if taken:
            raise ValueError(
                f"call_kwargs: {', '.join(taken)} are set per request or by the worker"
            )
        return self

    @model_validator(mode="after")
    def _fits_its_pipeline(self) -> ModelSpec:
        known = signature_fields(self.pipeline) is not None
        family = family_fields(self.pipeline, self.modality, self.call_kwargs) if known else None
        check_entry_fits(self, family)
        return self

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> ModelSpec:
        d, lim = self.defaults, self.limits
        checks = [
            ("steps", d.steps, lim.max_steps),
            ("width", d.width, lim.max_width),
            ("height", d.height, lim.max_height),
            ("num_frames", d.num_frames, lim.max_num_frames),
            ("duration_s", d.duration_s, lim.max_duration_s),
            ("guidance_scale", d.guidance_scale, lim.max_guidance_scale),
        ]
        for field, value, limit in checks:
            if value > limit:
                raise ValueError(
                    f"defaults.{field}={value} {exceeds(f'limits.max_{field}', limit)}"
                )
        if self.modality in ("image", "video") and (d.width == 0 or d.height == 0):
            raise ValueError("defaults.width and defaults.height are required for image and video")
        if self.modality == "video" and d.num_frames == 0:
            raise ValueError("defaults.num_frames is required for video")
        if self.modality == "video":
            multiple = lim.frame_multiple
            for field, frames in (
                ("defaults.num_frames", d.num_frames),
                ("limits.max_num_frames", lim.max_num_frames),
            ):
                if (frames - 1) % multiple:
                    below = 1 + (frames - 1) // multiple * multiple
                    raise ValueError(
                        f"{field}={frames} is not a count the model makes: (num_frames - 1) "
                        f"must be a multiple of limits.frame_multiple ({multiple}); "
                        f"use {below} or {below + multiple}"
                    )
        if self.modality == "audio" and d.duration_s == 0:
            raise ValueError("defaults.duration_s is required for audio")
        return self

    def resolved_source(self, models_dir: Path) -> str:
        """Expands `{models_dir}` so one registry works wherever the models were built."""
        return self.source.replace("{models_dir}", str(models_dir))


class Registry(Strict):
    # At least one: a mesh of none would start ready and refuse every request.
    models: list[ModelSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Registry:
        seen: set[str] = set()
        for spec in self.models:
            if spec.name in seen:
                raise ValueError(f"model name {spec.name!r} appears twice")
            seen.add(spec.name)
        return self

    def get(self, name: str) -> ModelSpec | None:
        return next((m for m in self.models if m.name == name), None)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]


class RegistryError(ValueError):
    """A registry file that cannot be used, with the entry and field at fault."""


# The shipped registry, read as package data so it is found in an installed wheel as well.
DEFAULT_REGISTRY = files("mediamesh.common") / "defaults" / "models.yaml"


def _describe(error: ValidationError, raw: dict[str, Any], document: yaml.Node | None) -> str:
    lines = []
    entries = raw.get("models") if isinstance(raw, dict) else None
    for item in error.errors():
        loc = list(item["loc"])
        where = ".".join(str(p) for p in loc) or "models"
        if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int) and entries:
            entry = entries[loc[1]] if loc[1] < len(entries) else {}
            name = entry.get("name", f"#{loc[1]}") if isinstance(entry, dict) else f"#{loc[1]}"
            field = ".".join(str(p) for p in loc[2:]) or "(entry)"
            where = f"model {name!r} field {field}"
        line = line_of(document, loc or ["models"])
        at = f"line {line}: " if line else ""
        # pydantic's prefix for an error a validator raised says nothing to a reader.
        message = str(item["msg"]).removeprefix("Value error, ")
        lines.append(f"{at}{where}: {message}")
    return "; ".join(lines)


def parse_registry(
    raw: object, origin: str = "registry", document: yaml.Node | None = None
) -> Registry:
    """The registry in `raw`; RegistryError naming `origin`, and each fault's entry, field
    and (given the file's `document` node tree) line."""
    if not isinstance(raw, dict) or "models" not in raw:
        raise RegistryError(f"{origin}: expected a mapping with a 'models' list")
    try:
        return Registry.model_validate(raw)
    except ValidationError as exc:
        raise RegistryError(f"{origin}: {_describe(exc, raw, document)}") from None


def load_registry(path: Path | None = None) -> Registry:
    """Load and validate a registry file (the shipped default when `path` is None)."""
    if path is None:
        with as_file(DEFAULT_REGISTRY) as shipped:
            return load_registry(shipped)
    try:
        raw, document = read_nodes(path.read_text())
    except OSError as exc:
        raise RegistryError(f"cannot read registry {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RegistryError(f"registry {path} is not valid YAML: {exc}") from None
    return parse_registry(raw, str(path), document)
