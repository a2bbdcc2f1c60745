"""A GenerateRequest from the HTTP face's JSON or form: an error starts with the path of the
field at fault and says what the field takes."""

from __future__ import annotations

import base64

import pytest

from mediamesh.common.errors import InvalidArgument
from mediamesh.gateway.api.json_plane import _parse_error, request_from_form, request_from_json

FOX = {"model": "flux-tiny", "prompt": "a fox"}
STEPS_RANGE = "steps: must be a whole number from 0 to 4294967295, got"
# Not a whole number at all: no range, since the model's is checked once the value parses.
NOT_WHOLE = "steps: must be a whole number, got"


def refusal(body: dict[str, object]) -> str:
    with pytest.raises(InvalidArgument) as caught:
        request_from_json({**FOX, **body})
    return caught.value.message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"steps": -1}, f"{STEPS_RANGE} -1"),
        ({"steps": 4.5}, f"{NOT_WHOLE} 4.5"),
        ({"steps": float("nan")}, f"{NOT_WHOLE} NaN"),
        ({"steps": "4.5"}, f'{NOT_WHOLE} "4.5"'),
        ({"steps": True}, f"{NOT_WHOLE} true"),
        ({"steps": 2**32}, f"{STEPS_RANGE} 4294967296"),
        ({"seed": -1}, "seed: must be a whole number from 0 to 9223372036854775807, got -1"),
        ({"guidance_scale": 1e40}, "guidance_scale: must be a number from -3.4028235e+38"),
        ({"guidance_scale": "high"}, "guidance_scale: must be a number"),
        ({"cache": "yes"}, 'cache: must be true or false, got "yes"'),
        ({"prompt": 5}, "prompt: must be a string, got 5"),
        ({"image": "!!!"}, 'image: must be base64 (standard or URL-safe alphabet), got "!!!"'),
        ({"priority": "URGENT"}, "priority: must be one of PRIORITY_UNSPECIFIED, REALTIME"),
        ({"webhook": {"url": "https://a.example", "bogus": 1}}, "webhook.bogus: Webhook has no"),
        ({"webhook": {"url": "https://a.example", "events": [1]}}, "webhook.events[0]: must be"),
        ({"webhook": "https://a.example"}, "webhook: must be a JSON object of Webhook fields"),
        ({"adapters": [{"name": "style"}, {"scale": "x"}]}, "adapters[1].scale: must be a number"),
        ({"adapters": [{"name": "style", "weight": 1}]}, "adapters[0].weight: AdapterRef has no"),
        ({"adapters": {"name": "style"}}, "adapters: must be a JSON array"),
        ({"colour": "red"}, "colour: GenerateRequest has no such field"),
        ({"negativePrompt": "x", "negative_prompt": "y"}, "negative_prompt: given twice"),
    ],
)
def test_a_bad_value_names_its_path_and_what_is_allowed(
    body: dict[str, object], message: str
) -> None:
    assert refusal(body).startswith(message)


def test_values_the_json_mapping_allows_still_parse() -> None:
    request = request_from_json(
        {
            **FOX,
            "steps": "4",
            "seed": "9223372036854775807",
            "width": 64.0,
            "guidance_scale": "NaN",
            "negativePrompt": "blur",
            "priority": "BATCH",
            "image": base64.urlsafe_b64encode(b"\xfb\xff").decode().rstrip("="),
            "webhook": None,
            "adapters": [{"name": "style", "scale": 0.5}],
        }
    )
    assert (request.steps, request.seed, request.width) == (4, 2**63 - 1, 64)
    assert request.negative_prompt == "blur" and request.image == b"\xfb\xff"
    assert not request.HasField("webhook") and request.adapters[0].scale == 0.5


def test_form_values_are_checked_the_same_way() -> None:
    with pytest.raises(InvalidArgument, match=r"^steps: must be a whole number, got 4\.5$"):
        request_from_form({**FOX, "steps": "4.5"}, {})
    with pytest.raises(InvalidArgument, match=r"^webhook\.bogus: "):
        request_from_form({**FOX, "webhook": '{"url": "https://a.example", "bogus": 1}'}, {})


@pytest.mark.parametrize(
    ("parser_says", "message"),
    [
        (
            'Failed to parse webhook field: Message type "mediamesh.v1.Webhook" has no field '
            'named "bogus" at "GenerateRequest.webhook".\n Available Fields(except extensions): '
            "\"['url', 'events']\"",
            "webhook.bogus: Webhook has no such field",
        ),
        (
            "Failed to parse adapters field: Couldn't parse float: x at "
            "GenerateRequest.adapters[1].scale.",
            "adapters[1].scale: Couldn't parse float: x",
        ),
        ("Couldn't parse integer: 4.5 at GenerateRequest.steps", "steps: Couldn't parse integer"),
        ("Failed to parse steps field: Value out of range: -1.", "steps: Value out of range: -1"),
    ],
)
def test_what_the_parser_still_refuses_names_the_path_first(parser_says: str, message: str) -> None:
    assert _parse_error(parser_says).startswith(message)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("steps", "9" * 5000, "steps: a number of more than 4300 digits"),
        ("guidance_scale", "9" * 5000, "guidance_scale: a number of more than 4300 digits"),
        ("webhook", "[" * 3000 + "]" * 3000, "webhook: JSON nested more than 64 levels deep"),
        (
            "webhook",
            '{"url": "https://a.example", "url": "https://b.example"}',
            "webhook.url: given twice in one JSON object; give it once",
        ),
        ("steps", "four", "steps: 'four' is not a number; a form sends this field as JSON"),
        # The form of the CLI's --adapter and KServe's parameter is not this field's.
        (
            "adapters",
            "style:0.5",
            "adapters: 'style:0.5' is not a JSON array of objects with keys name, scale; "
            "a form sends this field as JSON",
        ),
    ],
)
def test_form_values_the_parser_alone_would_fail_on_are_refused_by_name(
    name: str, text: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        request_from_form({**FOX, name: text}, {})
    assert caught.value.message == message
