"""How local commands find a running `mediamesh up`, and what `up` builds or refuses to start."""

from __future__ import annotations

import stat
from pathlib import Path

import grpc
import pytest
import yaml

from mediamesh.cli.api.mesh_client import scheduler_address
from mediamesh.cli.client_commands import why_unreachable
from mediamesh.cli.local_models import hosted_names, models_to_build
from mediamesh.cli.main import build_parser
from mediamesh.cli.run_dir import DEFAULT_RUN_DIR, local_config, run_config_path, write_private
from mediamesh.cli.up import Mesh
from mediamesh.common.errors import StartupError
from mediamesh.common.registry import parse_registry
from mediamesh.common.settings import MeshConfig, WorkerSettings


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_up_writes_its_run_config_readable_by_its_user_only(tmp_path: Path):
    run_dir = tmp_path / "run"
    mesh = Mesh(MeshConfig(), run_dir)  # builds the children's command lines, starts nothing
    assert mesh.config_path == run_config_path(run_dir)
    assert mode(mesh.config_path) == 0o600
    token = yaml.safe_load(mesh.config_path.read_text())["internal_auth"]["token"]
    assert token and len(token) > 20  # minted for this run


def test_the_run_config_carries_every_secret_as_the_children_must_read_it(tmp_path: Path):
    webhooks = {"secrets": {"default": "whsec-default", "acme": "whsec-acme"}}
    config = MeshConfig.model_validate({"webhooks": webhooks})
    mesh = Mesh(config, tmp_path / "run")
    written = yaml.safe_load(mesh.config_path.read_text())
    assert written["webhooks"]["secrets"] == webhooks["secrets"]
    # What a child loads from it signs with the configured secrets, not with their mask.
    child = MeshConfig.model_validate(written)
    assert {k: v.get_secret_value() for k, v in child.webhooks.secrets.items()} == {
        "default": "whsec-default",
        "acme": "whsec-acme",
    }
    assert child.internal_auth.resolve() == mesh.config.internal_auth.resolve()


def test_a_run_config_left_readable_by_others_is_replaced_with_a_private_one(tmp_path: Path):
    path = tmp_path / "mesh.yaml"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "internal_auth: {token: secret}\n")
    assert mode(path) == 0o600
    assert path.read_text() == "internal_auth: {token: secret}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["mesh.yaml"]  # no staging file left


def test_local_commands_read_the_run_config_unless_given_one(tmp_path: Path):
    explicit = tmp_path / "other.yaml"
    assert local_config(explicit, tmp_path) == explicit
    assert local_config(None, tmp_path) is None  # no `mediamesh up` ran here: defaults
    write_private(run_config_path(tmp_path), "{}\n")
    assert local_config(None, tmp_path) == tmp_path / "mesh.yaml"
    assert local_config(explicit, tmp_path) == explicit


@pytest.mark.parametrize("command", ["status", "top", "drain"])
def test_status_top_and_drain_default_to_up_s_run_dir(command: str, monkeypatch):
    monkeypatch.delenv("MEDIAMESH_CONFIG", raising=False)
    args = build_parser().parse_args([command])
    assert args.run_dir == DEFAULT_RUN_DIR == build_parser().parse_args(["up"]).run_dir
    assert args.config is None


class _Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def test_a_status_that_fails_names_the_address_the_reason_and_where_a_config_was_sought(
    tmp_path: Path,
):
    run_dir = tmp_path / "run"
    args = build_parser().parse_args(["status", "--run-dir", str(run_dir)])
    for code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE):
        text = why_unreachable(_Refused(code, "no token"), args)
        default = scheduler_address(MeshConfig())
        assert text.startswith(f"scheduler unreachable at {default}: {code.name} (no token)")
        assert (
            f"no mesh config: neither --config nor a `mediamesh up` run directory at {run_dir},"
            in text
        )
        assert "pass --run-dir or --config" in text
    # With the run directory found, its scheduler's address and the refusal, nothing more.
    run_dir.mkdir()
    write_private(run_config_path(run_dir), "scheduler: {port: 6123}\n")
    assert why_unreachable(_Refused(grpc.StatusCode.UNAUTHENTICATED), args) == (
        "scheduler unreachable at 127.0.0.1:6123: UNAUTHENTICATED"
    )
    drain = build_parser().parse_args(["drain", "--address", "127.0.0.1:7001"])
    assert why_unreachable(
        _Refused(grpc.StatusCode.UNAVAILABLE), drain, "worker", drain.address
    ).startswith("worker unreachable at 127.0.0.1:7001: UNAVAILABLE")


def entry(name: str, source: str) -> dict[str, object]:
    return {
        "name": name,
        "modality": "image",
        "pipeline": "FluxPipeline",
        "source": source,
        "defaults": {"steps": 4, "width": 64, "height": 64},
        "limits": {"max_steps": 50, "max_width": 512, "max_height": 512},
        "output": {"format": "png"},
    }


REGISTRY = parse_registry(
    {
        "models": [
            entry("flux-tiny", "{models_dir}/flux-tiny"),
            entry("mine", "{models_dir}/mine"),
            entry("hub", "someone/a-model"),
        ]
    }
)


def workers(*models: list[str]) -> list[WorkerSettings]:
    return [WorkerSettings(worker_id=f"w{i}", models=m) for i, m in enumerate(models)]


def test_a_worker_without_a_model_list_hosts_every_model():
    config = MeshConfig(workers=workers(["flux-tiny"], []))
    assert hosted_names(config, REGISTRY) == {"flux-tiny", "mine", "hub"}
    assert hosted_names(MeshConfig(workers=workers(["hub"])), REGISTRY) == {"hub"}


def test_up_builds_only_tiny_models_and_names_a_missing_one_it_cannot_build(tmp_path: Path):
    config = MeshConfig(models_dir=tmp_path, workers=workers([]))
    with pytest.raises(StartupError) as raised:
        models_to_build(config, REGISTRY, {"flux-tiny"})
    message = str(raised.value)
    assert "'mine'" in message and str(tmp_path / "mine") in message
    assert "remove the entry" in message and "\n" not in message

    (tmp_path / "mine").mkdir()  # the user's own model, put where the entry says
    assert models_to_build(config, REGISTRY, {"flux-tiny"}) == ["flux-tiny"]
    only_hub = MeshConfig(models_dir=tmp_path / "empty", workers=workers(["hub"]))
    assert models_to_build(only_hub, REGISTRY, {"flux-tiny"}) == []


def test_status_dials_the_gateway_s_scheduler_address_when_the_scheduler_listens_everywhere():
    local = MeshConfig.model_validate({"scheduler": {"host": "127.0.0.1", "port": 6001}})
    assert scheduler_address(local) == "127.0.0.1:6001"
    pod = MeshConfig.model_validate(
        {
            "scheduler": {"host": "0.0.0.0", "port": 50052, "insecure": True},
            "gateway": {"scheduler_address": "mediamesh-scheduler:50052"},
        }
    )
    assert scheduler_address(pod) == "mediamesh-scheduler:50052"


def test_status_prints_small_costs_to_three_significant_digits():
    from mediamesh.cli.status_table import money_text

    assert [money_text(v) for v in (0.0, 0.000167, 0.0000601, 0.00999, 0.0123, 12.345)] == [
        "0.00",
        "0.000167",
        "0.0000601",
        "0.00999",
        "0.01",
        "12.35",
    ]


def test_a_refused_token_from_a_users_config_points_at_up_s_run_dir(tmp_path: Path):
    # `mediamesh up` writes the internal token into the config in its run directory; the
    # user's own file has none, so the scheduler refuses a status read through it.
    mine = tmp_path / "mesh.yaml"
    mine.write_text("scheduler: {port: 6124}\n")
    args = build_parser().parse_args(["status", "--config", str(mine)])
    text = why_unreachable(_Refused(grpc.StatusCode.UNAUTHENTICATED), args)
    assert text.startswith("scheduler unreachable at 127.0.0.1:6124: UNAUTHENTICATED; ")
    assert f"pass --run-dir (default {args.run_dir}) instead of --config" in text
    assert "--run-dir" not in why_unreachable(_Refused(grpc.StatusCode.UNAVAILABLE), args)
