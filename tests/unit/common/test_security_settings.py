"""Security settings fail closed: the admin scope, internal TLS files, --insecure everywhere,
and a configured credential that is unusable refuses the start in one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mediamesh.cli.main import build_parser, insecure_everywhere, worker_settings
from mediamesh.cli.up import Mesh
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.exposure import is_loopback
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


# Nothing fails open: a credential that is configured but unusable refuses the start ------------


def test_gateway_tls_needs_its_key_with_its_certificate(tmp_path: Path):
    # Alone, cert_file left TLS off: the gateway served plaintext while configured for TLS.
    message = _refused(tmp_path, "gateway:\n  tls: {cert_file: cert.pem}\n")
    assert "line 2: gateway.tls: " in message and "cert_file and key_file go together" in message


@pytest.mark.parametrize("token", ["''", "'   '"])
def test_an_empty_inline_token_is_refused(tmp_path: Path, token: str):
    message = _refused(tmp_path, f"internal_auth:\n  token: {token}\n")
    assert "line 2: internal_auth.token: " in message and "the token is empty" in message


def test_an_empty_token_from_the_environment_is_refused():
    with pytest.raises(ConfigError, match=r"env MEDIAMESH_INTERNAL_AUTH__TOKEN: .*is empty"):
        load_mesh_config(None, environ={"MEDIAMESH_INTERNAL_AUTH__TOKEN": ""})


@pytest.mark.parametrize("content", ["", "\n", "  \n\t"])
def test_an_empty_token_file_is_refused_naming_the_file(tmp_path: Path, content: str):
    token_file = tmp_path / "token"
    token_file.write_text(content)
    token_file.chmod(0o600)
    config = _load(tmp_path, f"internal_auth: {{token_file: {token_file}}}\n")
    expected = rf"^internal_auth.token_file: the token in {token_file} is empty$"
    with pytest.raises(ConfigError, match=expected):
        InternalCredentials.from_config(config)


def test_up_refuses_an_empty_token_file_instead_of_running_unauthenticated(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    config = _load(tmp_path, f"internal_auth: {{token_file: {token_file}}}\n")
    with pytest.raises(ConfigError, match=r"^internal_auth\.token_file: .* is empty"):
        Mesh(config, tmp_path / "run")  # builds the children's command lines, starts nothing
    assert not (tmp_path / "run" / "mesh.yaml").exists()


@pytest.mark.parametrize("token", ["'caf\u00e9-token'", '"tab\\tinside"'])
def test_a_token_gRPC_metadata_cannot_carry_is_refused_at_load(tmp_path: Path, token: str):
    message = _refused(tmp_path, f"internal_auth:\n  token: {token}\n")
    assert "internal_auth.token: " in message and "outside printable ASCII" in message
    assert "caf" not in message  # the secret is never echoed


def test_a_token_file_gRPC_metadata_cannot_carry_is_refused(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("s\u00e9cret\n", encoding="utf-8")
    token_file.chmod(0o600)
    config = _load(tmp_path, f"internal_auth: {{token_file: {token_file}}}\n")
    with pytest.raises(ConfigError, match=r"^internal_auth.token_file: .*outside printable ASCII"):
        InternalCredentials.from_config(config)


def test_a_token_file_is_stripped_and_read(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("  the-token\n")
    token_file.chmod(0o600)
    config = _load(tmp_path, f"internal_auth: {{token_file: {token_file}}}\n")
    assert InternalCredentials.from_config(config).token == "the-token"


def test_a_token_set_inline_and_by_file_is_refused(tmp_path: Path):
    message = _refused(tmp_path, "internal_auth: {token: abc, token_file: /run/token}\n")
    assert "internal_auth: " in message and "set token or token_file, not both" in message


def test_the_same_api_key_twice_is_refused_naming_both_entries(tmp_path: Path):
    keys = [("a", []), ("b", []), ("c", []), ("ops", ["admin"])]
    lines = [
        f"    - {{sha256: '{HASH if i in (1, 3) else str(i) * 64}', tenant: {t}, scopes: {s}}}"
        for i, (t, s) in enumerate(keys)
    ]
    message = _refused(tmp_path, "gateway:\n  api_keys:\n" + "\n".join(lines) + "\n")
    assert "gateway.api_keys[3].sha256: the same key as gateway.api_keys[1]" in message


def test_a_key_whose_tenant_has_no_quotas_among_configured_ones_is_refused(tmp_path: Path):
    text = (
        "gateway:\n"
        f"  api_keys: [{{sha256: '{HASH}', tenant: acme}}]\n"
        "  tenants: {acme-corp: {burst: 5}, other: {}}\n"
    )
    assert (
        "gateway.api_keys[0].tenant: 'acme' has no entry in gateway.tenants "
        "(tenants: acme-corp, other)"
    ) in _refused(tmp_path, text)


def test_without_any_tenant_quotas_every_key_runs_on_the_defaults(tmp_path: Path):
    config = _load(tmp_path, f"gateway: {{api_keys: [{{sha256: '{HASH}', tenant: acme}}]}}\n")
    assert config.gateway.tenants == {}


@pytest.mark.parametrize("host", ["[::1]", "::1", "127.0.0.1", "localhost"])
def test_loopback_spelled_any_way(host: str):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["[::]", "0.0.0.0", "[2001:db8::1]", "example.com"])
def test_not_loopback(host: str):
    assert not is_loopback(host)


# Secrets readable by others are accepted (Kubernetes secret volumes are 0644) but said -------


def test_a_token_file_readable_by_others_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    token_file = tmp_path / "token"
    token_file.write_text("the-token\n")
    token_file.chmod(0o644)
    config = _load(tmp_path, f"internal_auth: {{token_file: {token_file}}}\n")
    with caplog.at_level(logging.WARNING, logger="mediamesh.security"):
        assert InternalCredentials.from_config(config).token == "the-token"
    (record,) = [r for r in caplog.records if "token_file" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "internal_auth.token_file: " in record.getMessage()
    assert "mode 0644" in record.getMessage()
    # 0400 would leave a non-root pod unable to read a root-owned secret file.
    assert "defaultMode 0440 with the pod's fsGroup" in record.getMessage()
    caplog.clear()
    token_file.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="mediamesh.security"):
        InternalCredentials.from_config(config)
    assert not caplog.records


def test_a_short_result_link_secret_is_counted_in_characters_and_not_shown(
    tmp_path: Path,
) -> None:
    secret = "s" * 16
    message = _refused(tmp_path, f"gateway:\n  http:\n    result_link_secret: {secret}\n")
    assert "gateway.http.result_link_secret" in message
    assert "16 characters; the least is 32" in message and "items" not in message
    assert secret not in message


def test_a_worker_flag_with_a_bad_value_is_named_as_the_flag(tmp_path: Path) -> None:
    # It was a pydantic traceback: the flags bypassed the file's one-line errors.
    config = _load(tmp_path, "worker:\n  worker_id: w0\n")
    args = build_parser().parse_args(["worker", "--device", "gpu9"])
    with pytest.raises(ConfigError) as refused:
        worker_settings(config, args)
    assert str(refused.value).startswith("--device: 'gpu9' is not a device")
