"""Bracketed form names, as the openai client flattens a nested `extra_body` value into a
multipart body, fold back into the JSON value of their field, each leaf typed by the
GenerateRequest field it lands in."""

from __future__ import annotations

import json

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.api.form_nesting import bracketed_field, folded_fields


def folded(*pairs: tuple[str, str]) -> dict[str, object]:
    return {name: json.loads(text) for name, text in folded_fields(pairs).items()}


def test_an_array_of_objects_starts_a_new_object_at_a_key_the_last_one_holds() -> None:
    assert folded(
        ("adapters[][name]", "style"),
        ("adapters[][scale]", "0.5"),
        ("adapters[][name]", "123"),
    ) == {"adapters": [{"name": "style", "scale": 0.5}, {"name": "123"}]}


def test_objects_and_arrays_of_text_nest_and_text_fields_stay_text() -> None:
    assert folded(
        ("webhook[url]", "https://hooks.example.com/x"),
        ("webhook[events][]", "SUCCEEDED"),
        ("webhook[events][]", "FAILED"),
    ) == {"webhook": {"url": "https://hooks.example.com/x", "events": ["SUCCEEDED", "FAILED"]}}


def test_a_value_that_is_not_what_its_field_takes_is_left_for_the_parser_to_name() -> None:
    # `scale` that is no number stays text; the request's parser then refuses it by path.
    assert folded(("adapters[][scale]", "big")) == {"adapters": [{"scale": "big"}]}
    assert folded(("no_such[x]", "1")) == {"no_such": {"x": "1"}}


@pytest.mark.parametrize(
    "pairs",
    [
        (("webhook[url]", "a"), ("webhook[url]", "b")),
        (("webhook[url]", "a"), ("webhook[url][x]", "b")),
        (("adapters[][name]", "a"), ("adapters[name]", "b")),
    ],
)
def test_two_names_for_one_value_are_refused_naming_the_second(
    pairs: tuple[tuple[str, str], ...],
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        folded_fields(pairs)
    assert refused.value.message.startswith(f"{pairs[1][0]}: ")


def test_only_bracketed_names_are_nested() -> None:
    assert bracketed_field("adapters[][name]") == "adapters"
    assert bracketed_field("webhook[url]") == "webhook"
    assert bracketed_field("prompt") is None
    assert bracketed_field("x[") is None
