"""Every client setting is checked where the client is made, naming the setting and what it
may be: a bad one would otherwise fail every call later, in gRPC's words."""

from __future__ import annotations

import math
import re

import pytest

from mediamesh.common.server import KEEPALIVE_OPTIONS
from mediamesh.sdk import Client
from mediamesh.sdk.options import GATEWAY_MIN_PING_INTERVAL_S, ClientSettings


@pytest.mark.parametrize(
    ("setting", "value", "allowed"),
    [
        ("timeout_s", 0, "a number of seconds above 0, or None"),
        ("timeout_s", -1, "a number of seconds above 0, or None"),
        ("timeout_s", math.nan, "a number of seconds above 0, or None"),
        ("timeout_s", math.inf, "a number of seconds above 0, or None"),
        ("stream_timeout_s", -1, "a number of seconds above 0, or None"),
        ("reattach_s", math.nan, "0 (never) or more seconds"),
        ("max_overload_wait_s", -0.5, "0 or more seconds"),
        ("keepalive_s", 5, "from 20 to 2147483 seconds"),
        ("max_message_bytes", 0, "a whole number from 1 to 2147483647"),
        ("overload_retries", -1, "a whole number from 0 to 4294967295"),
    ],
)
def test_a_setting_out_of_range_is_a_value_error_naming_it(
    setting: str, value: object, allowed: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{setting}: must be {re.escape(allowed)}"):
        ClientSettings(**{setting: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("timeout_s", "5"),
        ("stream_timeout_s", True),
        ("keepalive_s", None),
        ("reattach_s", "60"),
        ("max_message_bytes", 1.5),
    ],
)
def test_a_setting_of_another_type_is_a_type_error_naming_it(setting: str, value: object) -> None:
    with pytest.raises(TypeError, match=rf"^{setting}: must be "):
        Client("127.0.0.1:1", **{setting: value})  # type: ignore[arg-type]


def test_the_documented_values_pass() -> None:
    ClientSettings(timeout_s=None, stream_timeout_s=0.5, reattach_s=0, max_overload_wait_s=0)
    ClientSettings(timeout_s=0.004, keepalive_s=20, reattach_s=math.inf, overload_retries=0)


def test_the_keepalive_floor_is_the_gateways_ping_allowance() -> None:
    allowed_ms = dict(KEEPALIVE_OPTIONS)["grpc.http2.min_ping_interval_without_data_ms"]
    assert allowed_ms == GATEWAY_MIN_PING_INTERVAL_S * 1000


@pytest.mark.parametrize("target", ["127.0.0.1:99999", "127.0.0.1:0", "", "  "])
def test_an_address_grpc_would_misread_is_refused_naming_target(target: str) -> None:
    # gRPC dials port 99999 as 34463, someone else's perhaps; an empty one fails every call.
    with pytest.raises(ValueError, match=r"^target: "):
        Client(target)


@pytest.mark.parametrize("target", ["localhost:50051", "[::1]:50051", "unix:/tmp/mesh.sock"])
def test_addresses_grpc_reads_as_meant_pass(target: str) -> None:
    Client(target).close()


def test_a_tls_file_that_is_not_there_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"^ca_file: .*nothing.pem' is not a file"):
        Client("localhost:50051", ca_file=tmp_path / "nothing.pem")
