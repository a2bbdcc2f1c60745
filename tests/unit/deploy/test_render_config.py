"""deploy/config/render_config.py, the script k8s init containers run to write a pod's config."""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from deploy_support import CONFIG_DIR

from mediamesh.common.settings import load_mesh_config

SCRIPT = CONFIG_DIR / "render_config.py"


def _module():
    spec = importlib.util.spec_from_file_location("render_config", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def render():
    return _module()


def test_worker_gets_the_template_under_its_own_id(render, tmp_path):
    out = tmp_path / "mesh.yaml"
    assert render.main([str(CONFIG_DIR / "mesh-k8s.yaml"), str(out), "--worker-id", "pod-1"]) == 0
    config = load_mesh_config(out)
    (worker,) = config.workers
    assert worker.worker_id == "pod-1"
    template = yaml.safe_load((CONFIG_DIR / "mesh-k8s.yaml").read_text())["workers"][0]
    assert str(worker.checkpoint_dir) == template["checkpoint_dir"]


def test_gateway_auth_is_merged(render, tmp_path):
    auth = tmp_path / "auth.yaml"
    auth.write_text('api_keys: [{sha256: "' + "a" * 64 + '", tenant: t}]\ntenants: {t: {}}\n')
    out = tmp_path / "mesh.yaml"
    args = [str(CONFIG_DIR / "mesh-k8s.yaml"), str(out), "--gateway-auth", str(auth)]
    assert render.main(args) == 0
    config = load_mesh_config(out)
    assert [k.tenant for k in config.gateway.api_keys] == ["t"]
    assert config.gateway.scheduler_address == "mediamesh-scheduler:50052"


def test_rejects_other_keys_in_the_auth_file(render, tmp_path, capsys):
    auth = tmp_path / "auth.yaml"
    auth.write_text("api_keys: []\nscheduler_address: elsewhere:1\n")
    args = [str(CONFIG_DIR / "mesh-k8s.yaml"), str(tmp_path / "o"), "--gateway-auth", str(auth)]
    assert render.main(args) == 2
    assert "scheduler_address" in capsys.readouterr().err


def test_missing_template_is_an_error(render, tmp_path):
    args = [str(CONFIG_DIR / "mesh-k8s.yaml"), str(tmp_path / "o"), "--worker-id", "w"]
    assert render.main([*args, "--template", "nope"]) == 2
