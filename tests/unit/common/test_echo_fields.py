"""The builtin Echo takes only the fields it uses."""

from __future__ import annotations

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.common.params import RequestFields, resolve
from mediamesh.common.registry import ECHO_FIELDS, RegistryError, load_registry, parse_registry
from mediamesh.scheduler.api.convert import model_info

ECHO = load_registry().get("echo")
assert ECHO is not None


def test_echo_lists_only_what_it_uses() -> None:
    assert ECHO.accepted_fields == {"prompt", "steps", "seed", "width", "height"} == ECHO_FIELDS
    listed = list(model_info(ECHO, []).accepted_fields)
    assert listed == ["prompt", "steps", "seed", "width", "height"]


@pytest.mark.parametrize(("field", "value"), [("negative_prompt", "blur"), ("guidance_scale", 3.0)])
def test_a_field_echo_would_ignore_is_refused(field: str, value: object) -> None:
    with pytest.raises(InvalidArgument) as caught:
        resolve(ECHO, RequestFields("echo", "a fox", **{field: value}))  # type: ignore[arg-type]
    assert caught.value.message == (
        f"{field}: model 'echo' (Echo) does not use it; leave it unset "
        "(it accepts prompt, steps, seed, width, height)"
    )
    # What it uses still works.
    used = RequestFields("echo", "a fox", steps=2, seed=3, width=8, height=8)
    assert resolve(ECHO, used).seed == 3


def test_an_echo_entry_cannot_claim_fields_it_ignores() -> None:
    entry = ECHO.model_dump(mode="json")
    entry["accepted_fields"] = ["prompt", "steps", "guidance_scale"]
    with pytest.raises(RegistryError, match="the builtin Echo does not use guidance_scale"):
        parse_registry({"models": [entry]})
    entry["accepted_fields"] = ["prompt", "steps"]
    assert parse_registry({"models": [entry]}).models[0].accepted_fields == {"prompt", "steps"}
