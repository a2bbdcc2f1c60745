"""A prompt longer than every text encoder of its pipeline reads would be cut off without a
word: the worker refuses that job (INVALID_ARGUMENT naming the field, its token count and
the longest window) and runs the rest of its batch. A prompt that fits the longest window
runs even where a shorter encoder cuts its copy (CLIP's pooled prompt on Flux)."""

from __future__ import annotations

from wm_helpers import job_for, of, run

from mediamesh.common.errors import StatusCode
from mediamesh.common.work import JobFailed, JobFinished
from mediamesh.worker.models.prompt_window import token_count


def _words(count: int) -> str:
    return " ".join(["cat"] * count)


def _prompt_of(tokenizer, tokens: int) -> str:
    """A prompt that is exactly `tokens` tokens long for `tokenizer`, specials included."""
    for words in range(1, 400):
        text = _words(words)
        if token_count(tokenizer, text) == tokens:
            return text
    raise AssertionError(f"no prompt of {tokens} tokens")


def test_a_prompt_past_clips_window_is_refused_and_one_at_it_runs(host_for, registry_spec) -> None:
    spec = registry_spec("sdxl-tiny")
    host = host_for("sdxl-tiny")
    tokenizer = host.pipeline.tokenizer
    assert tokenizer.model_max_length == 77
    fits, past = _prompt_of(tokenizer, 77), _prompt_of(tokenizer, 78)
    events = run(
        host,
        [
            job_for(spec, "fits", steps=1, prompt=fits),
            job_for(spec, "past", steps=1, prompt=past),
            job_for(spec, "past-tail", steps=1, prompt=past + " and a dog"),
        ],
    )
    assert len(of(events, "fits", JobFinished)) == 1
    for job_id in ("past", "past-tail"):
        [failed] = of(events, job_id, JobFailed)
        assert failed.code == StatusCode.INVALID_ARGUMENT
    [failed] = of(events, "past", JobFailed)
    assert failed.message == (
        "prompt: 78 tokens; sdxl-tiny reads at most 77 (tokenizer's model_max_length), and the "
        "pipeline would cut the rest off silently; shorten prompt"
    )


def test_a_long_negative_prompt_is_refused_naming_it(host_for, registry_spec) -> None:
    spec = registry_spec("sdxl-tiny")
    host = host_for("sdxl-tiny")
    negative = _prompt_of(host.pipeline.tokenizer, 90)
    job = job_for(spec, "neg", steps=1, guidance_scale=5.0, negative_prompt=negative)
    [failed] = of(run(host, [job]), "neg", JobFailed)
    assert failed.code == StatusCode.INVALID_ARGUMENT
    assert failed.message.startswith("negative_prompt: 90 tokens; sdxl-tiny reads at most 77")


def test_the_longest_window_decides_on_flux(host_for, registry_spec) -> None:
    spec = registry_spec("flux-tiny")
    host = host_for("flux-tiny")
    # The tiny T5 reads 32 tokens, the tiny CLIP 77: a prompt of 60 tokens is cut by T5 only,
    # and CLIP's copy still sees its end, so it runs.
    windows = {window.name: window.limit for window in host.token_windows}
    assert windows == {"tokenizer": 77, "tokenizer_2": 32}
    middle = _prompt_of(host.pipeline.tokenizer, 60)
    assert token_count(host.pipeline.tokenizer_2, middle) > 32
    long = _prompt_of(host.pipeline.tokenizer, 120)
    events = run(
        host,
        [
            job_for(spec, "middle", steps=1, prompt=middle),
            job_for(spec, "long", steps=1, prompt=long),
        ],
    )
    assert len(of(events, "middle", JobFinished)) == 1
    [failed] = of(events, "long", JobFailed)
    assert failed.message.startswith("prompt: 120 tokens; flux-tiny reads at most 77")


def test_a_t5_only_pipeline_refuses_past_its_sequence_length(host_for, registry_spec) -> None:
    spec = registry_spec("pixart-tiny")
    host = host_for("pixart-tiny")
    [window] = host.token_windows
    assert (window.limit, window.source) == (32, "max_sequence_length")
    past = _prompt_of(host.pipeline.tokenizer, 33)
    [failed] = of(run(host, [job_for(spec, "past", steps=1, prompt=past)]), "past", JobFailed)
    assert failed.message.startswith(
        "prompt: 33 tokens; pixart-tiny reads at most 32 (tokenizer's max_sequence_length)"
    )
