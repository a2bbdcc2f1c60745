"""Option values the request cannot carry are refused by the SDK, naming the option, before
anything is sent; the CLI prints that one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor

from mediamesh.cli.main import main
from mediamesh.common.generated.v1 import common_pb2
from mediamesh.sdk import AsyncClient, Client
from mediamesh.sdk.options import (
    UINT32_MAX,
    WHOLE_NUMBER_RANGES,
    GenerateOptions,
    check_option,
    generate_params,
)
from mediamesh.sdk.types import JobQuery, JobState

# Nothing listens here: every refusal below comes before a connection is tried.
NOWHERE = "127.0.0.1:9"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"steps": -3}, "steps: must be a whole number from 0 to 4294967295, got -3"),
        ({"width": 2**32}, "width: must be a whole number from 0 to 4294967295, got 4294967296"),
        ({"seed": -1}, "seed: must be a whole number from 0 to 9223372036854775807, got -1"),
        # 0 is a limit no job meets, not "no limit" (that is leaving it unset).
        ({"timeout_ms": 0}, "timeout_ms: must be a whole number from 1 to 4294967295, got 0"),
        (
            {"seed": 2**63},
            "seed: must be a whole number from 0 to 9223372036854775807, got 9223372036854775808",
        ),
        ({"guidance_scale": 1e40}, "guidance_scale: must be a number from -3.4028235e+38"),
    ],
)
def test_a_number_out_of_range_is_a_value_error_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        generate_params("flux-tiny", "a fox", options)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"steps": 4.5}, "steps: must be a whole number, got 4.5"),
        ({"steps": True}, "steps: must be a whole number, got True"),
        ({"fps": "12"}, "fps: must be a whole number, got '12'"),
        ({"guidance_scale": "high"}, "guidance_scale: must be a number, got 'high'"),
        ({"negative_prompt": 3}, "negative_prompt: must be a string, got 3"),
        ({"image": "in.png"}, "image: must be bytes, got 'in.png'"),
        ({"cache": "no"}, "cache: must be True or False, got 'no'"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_option(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        generate_params("flux-tiny", "a fox", options)
    assert str(caught.value) == message


def test_values_protobuf_takes_still_pass() -> None:
    options = {
        "steps": np.int64(4),
        "seed": 2**63 - 1,
        "guidance_scale": np.float32(3.5),
        "strength": 1,
        "cache": np.True_,
        "result_as_url": False,
    }
    params = generate_params("flux-tiny", "a fox", options)
    request = common_pb2.GenerateRequest(**params.options)  # type: ignore[arg-type]
    assert (request.steps, request.seed, request.guidance_scale) == (4, 2**63 - 1, 3.5)


def test_every_whole_number_option_fits_its_field() -> None:
    carried = {
        FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
        FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    }
    fields = common_pb2.GenerateRequest.DESCRIPTOR.fields_by_name
    for name in GenerateOptions.__optional_keys__:
        if fields[name].cpp_type not in (
            FieldDescriptor.CPPTYPE_UINT32,
            FieldDescriptor.CPPTYPE_UINT64,
        ):
            continue
        low, high = WHOLE_NUMBER_RANGES.get(name, (0, UINT32_MAX))
        field_low, field_high = carried[fields[name].type]
        assert field_low <= low and high <= field_high, name
        with pytest.raises(ValueError, match=f"^{name}: "):
            check_option(name, high + 1)


async def test_clients_refuse_before_sending() -> None:
    with Client(NOWHERE, timeout_s=1) as client:
        with pytest.raises(ValueError, match=r"^steps: must be a whole number"):
            client.generate("flux-tiny", "a fox", steps=-3)
        with pytest.raises(ValueError, match=r"^seed: must be a whole number"):
            client.submit("flux-tiny", "a fox", seed=-1)
    async with AsyncClient(NOWHERE, timeout_s=1) as aclient:
        with pytest.raises(ValueError, match=r"^steps: must be a whole number"):
            aclient.generate("flux-tiny", "a fox", steps=-3)
        with pytest.raises(ValueError, match=r"^seed: must be a whole number"):
            await aclient.submit("flux-tiny", "a fox", seed=-1)


@pytest.mark.parametrize(
    ("flag", "value", "line"),
    [
        ("--steps", "-3", "mediamesh: steps: must be a whole number from 0 to 4294967295, got -3"),
        (
            "--seed",
            "-1",
            "mediamesh: seed: must be a whole number from 0 to 9223372036854775807, got -1",
        ),
    ],
)
def test_the_cli_prints_the_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, line: str
) -> None:
    argv = ["generate", "--gateway", NOWHERE, "--model", "flux-tiny", "--prompt", "x"]
    code = main([*argv, flag, value, "--out", str(tmp_path / "o.png"), "--quiet"])
    assert code == 1
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (5, {}, "model: must be a string, got 5"),
        (
            "flux-tiny",
            {"adapters": {"style": "a"}},
            "adapters: scale 'a' of 'style' is not a number",
        ),
        (
            "flux-tiny",
            {"adapters": {"style": True}},
            "adapters: scale True of 'style' is not a number",
        ),
        ("flux-tiny", {"adapters": [(3, 0.5)]}, "adapters: name 3 is not a string"),
    ],
)
def test_a_model_or_adapter_of_the_wrong_type_is_a_type_error_naming_it(
    model: object, options: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        generate_params(model, "a fox", options)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_one_state_to_list_is_one_state_not_its_letters() -> None:
    assert JobQuery.of(states="SUCCEEDED").states == (JobState.SUCCEEDED,)
    assert JobQuery.of(states=JobState.FAILED).states == (JobState.FAILED,)
    assert JobQuery.of(states=["queued", "RUNNING"]).states == (JobState.QUEUED, JobState.RUNNING)
