"""An api_key gRPC metadata cannot carry, and a switch that is not a bool, are refused where
the client is made, naming the setting; the CLI says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.main import main
from mediamesh.sdk import AsyncClient, Client
from mediamesh.sdk.options import ClientSettings


@pytest.mark.parametrize("api_key", ["a\nb", "ключ", "tab\there", "del\x7f"])
def test_an_api_key_metadata_cannot_carry_is_a_value_error_naming_it(api_key: str) -> None:
    for make in (Client, AsyncClient):
        with pytest.raises(ValueError, match=r"^api_key: must be printable ASCII") as caught:
            make("127.0.0.1:9", api_key=api_key)
        assert api_key not in str(caught.value)


def test_a_printable_ascii_api_key_is_taken() -> None:
    assert ClientSettings(api_key="sk-live_0123 ~!").api_key == "sk-live_0123 ~!"


@pytest.mark.parametrize("setting", ["tls", "retry_on_overload"])
@pytest.mark.parametrize("value", ["yes", "no", 1, None])
def test_a_switch_that_is_not_a_bool_is_a_type_error_naming_it(setting: str, value: object) -> None:
    with pytest.raises(TypeError, match=rf"^{setting}: must be True or False, got "):
        ClientSettings(**{setting: value})  # type: ignore[arg-type]


def test_the_cli_names_a_bad_api_key_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEDIAMESH_API_KEY", "a\nb")
    argv = ["generate", "--gateway", "127.0.0.1:9", "--model", "m", "--prompt", "x"]
    assert main([*argv, "--out", str(tmp_path / "o.png"), "--quiet"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mediamesh: api_key: must be printable")
