"""Security settings fail closed: the admin scope, internal TLS files, --insecure everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.main import build_parser, insecure_everywhere, worker_settings
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.settings import ConfigError, MeshConfig, load_mesh_config
from mediamesh.gateway.core.tenancy import Tenancy, hash_key

HASH = "a" * 64


def _load(tmp_path: Path, text: str) -> MeshConfig:
    path = tmp_path / "mesh.yaml"
    path.write_text(text)
    return load_mesh_config(path, environ={})


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    return str(caught.value)


def test_only_a_key_with_the_admin_scope_authenticates_as_admin():
    config = MeshConfig.model_validate(
        {
            "gateway": {
                "api_keys": [
                    {"sha256": hash_key("plain"), "tenant": "a"},
                    {"sha256": hash_key("root"), "tenant": "ops", "scopes": ["admin"]},
                ]
            }
        }
    )
    tenancy = Tenancy(config.gateway, lambda: 0.0)
    plain, admin = (tenancy.authenticate(f"Bearer {key}") for key in ("plain", "root"))
    assert (plain.tenant, plain.admin) == ("a", False)
    assert (admin.tenant, admin.admin) == ("ops", True)


def test_internal_tls_needs_its_key_with_its_certificate(tmp_path: Path):
    assert "cert_file and key_file" in _refused(
        tmp_path, "internal_tls: {ca_file: ca.pem, cert_file: cert.pem}\n"
    )


def test_an_unreadable_internal_tls_file_fails_the_start_in_one_line(tmp_path: Path):
    config = _load(tmp_path, f"internal_tls: {{ca_file: {tmp_path / 'missing.pem'}}}\n")
    with pytest.raises(ConfigError, match=r"^internal_tls.ca_file: cannot read .*missing.pem"):
        InternalCredentials.from_config(config)


def test_only_a_token_or_mutual_tls_authenticates_callers():
    assert not InternalCredentials().authenticates
    assert InternalCredentials(token="t").authenticates
    # TLS without a CA encrypts but lets any client in.
    assert not InternalCredentials(cert=b"c", key=b"k").authenticates
    assert InternalCredentials(ca=b"a", cert=b"c", key=b"k").authenticates


def test_insecure_reaches_each_service_from_its_command_line():
    parser = build_parser()
    config = MeshConfig()
    assert parser.parse_args(["scheduler", "--insecure"]).insecure
    assert not parser.parse_args(["scheduler"]).insecure
    assert worker_settings(config, parser.parse_args(["worker", "--insecure"])).insecure
    assert not worker_settings(config, parser.parse_args(["worker"])).insecure
    assert parser.parse_args(["up", "--insecure"]).insecure
    everywhere = insecure_everywhere(config)
    assert everywhere.gateway.insecure and everywhere.scheduler.insecure
    assert everywhere.workers and all(w.insecure for w in everywhere.workers)
