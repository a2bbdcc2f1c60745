"""TLS files are read and checked at start: one line naming the field, never a traceback or
a port gRPC "could not bind"."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.secret_files import warn_if_shared
from mediamesh.common.server import public_tls
from mediamesh.common.settings import ConfigError, MeshConfig, TlsSettings


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate and its key, owner-only as a key should be."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


@pytest.fixture
def pems(tmp_path: Path) -> dict[str, Path]:
    cert, key = _self_signed(tmp_path, "a")
    other_cert, other_key = _self_signed(tmp_path, "b")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a PEM file\n")
    junk.chmod(0o600)
    return {
        "cert": cert,
        "key": key,
        "other_key": other_key,
        "other_cert": other_cert,
        "junk": junk,
    }


def _gateway_tls(cert: Path, key: Path) -> TlsSettings:
    return TlsSettings(cert_file=cert, key_file=key)


def test_a_matching_pair_serves_tls(pems: dict[str, Path]):
    assert public_tls(_gateway_tls(pems["cert"], pems["key"])) is not None


@pytest.mark.parametrize("missing", ["cert_file", "key_file"])
def test_a_missing_gateway_tls_file_is_one_line_naming_it(
    pems: dict[str, Path], tmp_path: Path, missing: str
):
    files = {"cert_file": pems["cert"], "key_file": pems["key"], missing: tmp_path / "gone.pem"}
    with pytest.raises(ConfigError) as caught:
        public_tls(TlsSettings(**files))
    assert str(caught.value) == (
        f"gateway.tls.{missing}: cannot read {tmp_path / 'gone.pem'}: No such file or directory"
    )


@pytest.mark.parametrize(
    ("cert", "key", "expected"),
    [
        ("cert", "other_key", "^gateway.tls.key_file: does not match gateway.tls.cert_file$"),
        ("cert", "junk", "^gateway.tls.key_file: .*junk.pem is not an unencrypted PEM private key"),
        ("junk", "key", "^gateway.tls.cert_file: .*junk.pem is not a PEM certificate"),
        ("key", "key", "^gateway.tls.cert_file: .*a.key is not a PEM certificate"),
    ],
)
def test_an_unusable_gateway_pair_names_the_field_not_the_port(
    pems: dict[str, Path], cert: str, key: str, expected: str
):
    with pytest.raises(ConfigError, match=expected):
        public_tls(_gateway_tls(pems[cert], pems[key]))


def _internal(**files: Path) -> MeshConfig:
    return MeshConfig.model_validate({"internal_tls": {k: str(v) for k, v in files.items()}})


def test_internal_tls_with_a_matching_pair_and_its_ca(pems: dict[str, Path]):
    config = _internal(ca_file=pems["cert"], cert_file=pems["cert"], key_file=pems["key"])
    assert InternalCredentials.from_config(config).mutual


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"ca_file": "cert", "cert_file": "cert", "key_file": "other_key"},
            "^internal_tls.key_file: does not match internal_tls.cert_file$",
        ),
        ({"ca_file": "junk"}, "^internal_tls.ca_file: .*junk.pem is not a PEM certificate"),
        ({"ca_file": "key"}, "^internal_tls.ca_file: .*a.key is not a PEM certificate"),
        (
            {"cert_file": "junk", "key_file": "key"},
            "^internal_tls.cert_file: .*junk.pem is not a PEM certificate",
        ),
        (
            {"ca_file": "cert", "cert_file": "cert", "key_file": "junk"},
            "^internal_tls.key_file: .*junk.pem is not an unencrypted PEM private key",
        ),
    ],
)
def test_unusable_internal_tls_files_name_the_field(
    pems: dict[str, Path], files: dict[str, str], expected: str
):
    config = _internal(**{field: pems[name] for field, name in files.items()})
    with pytest.raises(ConfigError, match=expected):
        InternalCredentials.from_config(config)


@pytest.mark.parametrize("section", ["gateway", "internal_tls"])
def test_a_key_readable_by_others_is_a_warning_not_a_refusal(
    pems: dict[str, Path], caplog: pytest.LogCaptureFixture, section: str
):
    pems["key"].chmod(0o640)
    with caplog.at_level(logging.WARNING, logger="mediamesh.security"):
        if section == "gateway":
            assert public_tls(_gateway_tls(pems["cert"], pems["key"])) is not None
        else:
            config = _internal(cert_file=pems["cert"], key_file=pems["key"])
            assert InternalCredentials.from_config(config).cert is not None
    setting = "gateway.tls.key_file" if section == "gateway" else "internal_tls.key_file"
    (message,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert message.startswith(f"{setting}: ") and "by group (mode 0640)" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner takes root")
def test_a_key_read_through_the_own_group_is_not_shared(
    pems: dict[str, Path], caplog: pytest.LogCaptureFixture
):
    # A Kubernetes secret volume: root's file, mode 0440, in the pod's fsGroup, read by the pod's
    # (here: another) user through that group. Seen from a process that is not the owner.
    os.chown(pems["key"], 12345, os.getegid())
    pems["key"].chmod(0o440)
    with caplog.at_level(logging.WARNING, logger="mediamesh.security"):
        warn_if_shared(pems["key"], "gateway.tls.key_file")
    assert not caplog.records
    pems["key"].chmod(0o444)
    with caplog.at_level(logging.WARNING, logger="mediamesh.security"):
        warn_if_shared(pems["key"], "gateway.tls.key_file")
    (message,) = [r.getMessage() for r in caplog.records]
    assert "readable by others (mode 0444)" in message
