"""The mesh config's layers: YAML file, MEDIAMESH_* environment variables, flags; and the
one-line errors each layer gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediamesh.cli.main import build_parser, main, worker_settings
from mediamesh.common.settings import ConfigError, MeshConfig, load_mesh_config

HASH = "a" * 64


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mesh.yaml"
    path.write_text(text)
    return path


def _error(path: Path | None, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_mesh_config(path, environ=environ or {})
    message = str(caught.value)
    assert "\n" not in message
    return message


# The file ------------------------------------------------------------------------------------


def test_malformed_yaml_is_one_line_naming_file_and_line(tmp_path: Path):
    path = _file(tmp_path, "scheduler:\n  port: 1\n  host: x\n   store_path: y\n")
    assert _error(path) == (
        f"config {path} line 4: not valid YAML: mapping values are not allowed here"
    )


def test_a_bad_value_names_file_line_and_field(tmp_path: Path):
    path = _file(tmp_path, "gateway:\n  port: 1\nscheduler:\n  port: fifty\n")
    message = _error(path)
    assert message.startswith(f"config {path} line 4: scheduler.port: ")
    assert "valid integer" in message


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("scheduler:\n  queues:\n    image:\n      sla_s: .inf\n", "scheduler.queues.image.sla_s"),
        (
            "scheduler:\n  queues:\n    image:\n      sla_s: 30\n"
            "      class_sla_s: {REALTIME: .nan}\n",
            "scheduler.queues.image.class_sla_s.REALTIME",
        ),
    ],
)
def test_an_infinite_or_nan_number_is_refused_by_name(tmp_path: Path, text: str, field: str):
    # `up` writes the run config as JSON-safe YAML, where .inf is null: taken here, it would
    # pass `up` and then stop every child at its start.
    message = _error(_file(tmp_path, text))
    assert f"{field}: " in message and "finite number" in message


def test_a_missing_field_points_at_its_section(tmp_path: Path):
    path = _file(tmp_path, "scheduler:\n  queues:\n    image: {max_depth: 3}\n")
    assert _error(path).startswith(f"config {path} line 3: scheduler.queues.image.sla_s: ")


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ("gateway:\n  port: 70000\n", 2, "gateway.port", "less than or equal to 65535"),
        ("scheduler:\n  metrics_port: -5\n", 2, "scheduler.metrics_port", "greater than or"),
        ("telemetry:\n  log_level: BANANA\n", 2, "telemetry.log_level", "'INFO'"),
        ("scheduler:\n  queues:\n    imagee: {sla_s: 5}\n", 2, "scheduler.queues", "'imagee'"),
        (
            "scheduler:\n  checkpoint_every_steps: {image: -3}\n",
            2,
            "scheduler.checkpoint_every_steps.image",
            "greater than or equal to 0",
        ),
    ],
)
def test_ports_levels_and_modality_keys_are_checked_when_the_config_loads(
    tmp_path: Path, text: str, line: int, field: str, words: str
):
    path = _file(tmp_path, text)
    message = _error(path)
    assert message.startswith(f"config {path} line {line}: {field}: "), message
    assert words in message, message


def test_naming_one_queue_keeps_the_others_and_a_level_takes_any_case(tmp_path: Path):
    path = _file(
        tmp_path, "scheduler:\n  queues:\n    image: {sla_s: 5}\ntelemetry:\n  log_level: debug\n"
    )
    config = load_mesh_config(path, environ={})
    assert config.scheduler.queues["image"].sla_s == 5
    assert set(config.scheduler.queues) == {"image", "video", "audio"}
    assert config.telemetry.log_level == "DEBUG"


def test_a_top_level_list_is_refused(tmp_path: Path):
    path = _file(tmp_path, "- scheduler\n")
    assert _error(path) == f"config {path} line 1: expected a mapping at the top level"


def test_the_cli_prints_the_same_one_line_for_bad_yaml_and_bad_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    broken = _file(tmp_path, "scheduler: [\n")
    assert main(["scheduler", "--config", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mediamesh: config {broken} line 2: not valid YAML: ")
    assert err.count("\n") == 1 and "Traceback" not in err

    broken.write_text("scheduler:\n  port: fifty\n")
    assert main(["scheduler", "--config", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mediamesh: config {broken} line 2: scheduler.port: ")
    assert err.count("\n") == 1


# The environment -----------------------------------------------------------------------------


def test_a_nested_variable_overrides_one_setting_and_keeps_the_section(tmp_path: Path):
    path = _file(tmp_path, "scheduler:\n  host: 0.0.0.0\n  port: 50052\n")
    config = load_mesh_config(path, environ={"MEDIAMESH_SCHEDULER__PORT": "50062"})
    assert config.scheduler.port == 50062
    assert config.scheduler.host == "0.0.0.0"
    assert type(config) is MeshConfig


def test_deeper_paths_lists_and_mappings(tmp_path: Path):
    environ = {
        "MEDIAMESH_SCHEDULER__QUEUES__IMAGE__SLA_S": "4",
        "MEDIAMESH_GATEWAY__API_KEYS": f'[{{"sha256": "{HASH}", "tenant": "t"}}]',
        "MEDIAMESH_GATEWAY__TENANTS": '{"t": {"burst": 7}}',
        "MEDIAMESH_MODELS_DIR": "/models",
    }
    path = _file(tmp_path, "scheduler:\n  queues:\n    image: {sla_s: 10, max_depth: 5}\n")
    config = load_mesh_config(path, environ=environ)
    assert (config.scheduler.queues["image"].sla_s, config.scheduler.queues["image"].max_depth) == (
        4,
        5,
    )
    assert [(k.sha256, k.tenant) for k in config.gateway.api_keys] == [(HASH, "t")]
    assert config.gateway.tenants["t"].burst == 7
    assert config.models_dir == Path("/models")


def test_variables_of_other_tools_and_commands_are_ignored():
    environ = {
        "MEDIAMESH_CONFIG": "/x.yaml",
        "MEDIAMESH_API_KEY": "k",
        "MEDIAMESH_GATEWAY_ADDRESS": "127.0.0.1:50051",
        "MEDIAMESH_FUZZ_PROFILE": "fuzz-long",
        "OTHER__PORT": "1",
    }
    assert load_mesh_config(None, environ=environ) == load_mesh_config(None, environ={})


def test_a_bad_variable_is_named(tmp_path: Path):
    message = _error(None, {"MEDIAMESH_SCHEDULER__PORT": "fifty"})
    assert message.startswith("env MEDIAMESH_SCHEDULER__PORT: ")
    assert "valid integer" in message


def test_a_bad_value_inside_a_json_variable_is_named_with_its_place():
    environ = {"MEDIAMESH_GATEWAY__API_KEYS": '[{"sha256": "nothex", "tenant": "t"}]'}
    assert _error(None, environ).startswith("env MEDIAMESH_GATEWAY__API_KEYS[0].sha256: ")


def test_a_misspelt_variable_is_named():
    message = _error(None, {"MEDIAMESH_SCHEDULER__PROT": "1"})
    assert message.startswith("env MEDIAMESH_SCHEDULER__PROT: ")
    assert "not permitted" in message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "MEDIAMESH_SCHEDULR__PORT",
            "'schedulr' is not a section; did you mean MEDIAMESH_SCHEDULER__PORT?",
        ),
        ("MEDIAMESH_QQQ__PORT", "'qqq' is not a section; sections are models_dir,"),
        ("MEDIAMESH_WORKER_WORKER_ID", "did you mean MEDIAMESH_WORKER__WORKER_ID?"),
        ("mediamesh_scheduler_port", "did you mean MEDIAMESH_SCHEDULER__PORT?"),
    ],
)
def test_a_variable_for_no_setting_is_refused(name: str, expected: str):
    # These were dropped silently: a pod then ran as the default worker-0.
    message = _error(None, {name: "1"})
    assert message.startswith(f"env {name}: ")
    assert expected in message


def test_a_variable_that_is_not_json_is_named():
    environ = {"MEDIAMESH_GATEWAY__API_KEYS": "[{", "MEDIAMESH_GATEWAY__HOST": "0.0.0.0"}
    assert _error(None, environ) == (
        "env MEDIAMESH_GATEWAY__API_KEYS: not valid JSON (lists and mappings are written as JSON)"
    )


def test_the_process_environment_is_read_when_none_is_given(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEDIAMESH_GATEWAY__PORT", "50099")
    assert load_mesh_config(None).gateway.port == 50099
    assert load_mesh_config(None, environ={}).gateway.port == 50051


# Precedence and the standalone worker ----------------------------------------------------------


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path):
    path = _file(tmp_path, "models_dir: /file\ngateway: {port: 1, host: h}\n")
    environ = {"MEDIAMESH_MODELS_DIR": "/env", "MEDIAMESH_GATEWAY__PORT": "2"}
    config = load_mesh_config(path, {"models_dir": "/flag"}, environ)
    assert config.models_dir == Path("/flag")
    assert (config.gateway.port, config.gateway.host) == (2, "h")


def test_a_placement_from_any_layer_counts_as_set(tmp_path: Path):
    environ = {"MEDIAMESH_SCHEDULER__PLACEMENT__BATCH__PREFER": "on-demand"}
    config = load_mesh_config(None, environ=environ)
    assert "placement" in config.scheduler.model_fields_set
    assert config.scheduler.placement["BATCH"].prefer == "on-demand"
    assert set(config.scheduler.placement) == {"REALTIME", "STANDARD", "BATCH"}
    assert "placement" not in load_mesh_config(None, environ={}).scheduler.model_fields_set


def test_a_pod_names_its_worker_through_the_environment(tmp_path: Path):
    path = _file(tmp_path, "worker:\n  drain_grace_s: 20\n  port: 50060\nworkers: []\n")
    environ = {
        "MEDIAMESH_WORKER__WORKER_ID": "mediamesh-worker-image-abc12",
        "MEDIAMESH_WORKER__MODELS": "flux-tiny, echo",
        "MEDIAMESH_WORKER__POOL": "spot",
    }
    worker = load_mesh_config(path, environ=environ).standalone_worker()
    assert worker.worker_id == "mediamesh-worker-image-abc12"
    assert worker.models == ["flux-tiny", "echo"]
    assert (worker.pool, worker.drain_grace_s, worker.port) == ("spot", 20, 50060)


def test_a_worker_id_of_the_list_picks_its_entry_over_the_worker_section(tmp_path: Path):
    path = _file(
        tmp_path,
        "worker: {drain_grace_s: 20}\nworkers:\n  - {worker_id: w1, port: 50061}\n",
    )
    config = load_mesh_config(path, environ={})
    assert config.standalone_worker("w1").port == 50061
    other = config.standalone_worker("w9")
    assert (other.worker_id, other.drain_grace_s) == ("w9", 20)


def test_models_also_accept_json_from_the_environment():
    environ = {"MEDIAMESH_WORKER__MODELS": '["a", "b"]'}
    worker = load_mesh_config(None, environ=environ).standalone_worker()
    assert worker.models == ["a", "b"]


def test_worker_flags_beat_its_variables_which_beat_the_file(tmp_path: Path):
    path = _file(tmp_path, "worker: {port: 50060, pool: on-demand, device: cpu}\nworkers: []\n")
    environ = {"MEDIAMESH_WORKER__POOL": "spot", "MEDIAMESH_WORKER__PORT": "50070"}
    config = load_mesh_config(path, environ=environ)
    args = build_parser().parse_args(["worker", "--config", str(path), "--port", "50080"])
    worker = worker_settings(config, args)
    assert (worker.port, worker.pool, worker.device) == (50080, "spot", "cpu")


def test_clients_dial_the_scheduler_the_file_configures() -> None:
    # Moving the scheduler's port used to leave its gateway and workers dialling the
    # default one, waiting there without a word.
    moved = MeshConfig.model_validate({"scheduler": {"port": 47452}})
    assert moved.gateway.scheduler_address == "127.0.0.1:47452"
    assert {w.scheduler_address for w in moved.workers} == {"127.0.0.1:47452"}
    assert moved.standalone_worker().scheduler_address == "127.0.0.1:47452"
    everywhere = MeshConfig.model_validate(
        {
            "scheduler": {"host": "0.0.0.0", "port": 1234},
            "workers": [{"worker_id": "a", "scheduler_address": "sched.svc:50052"}, {}],
        }
    )
    assert everywhere.gateway.scheduler_address == "127.0.0.1:1234"
    assert [w.scheduler_address for w in everywhere.workers] == [
        "sched.svc:50052",
        "127.0.0.1:1234",
    ]
    assert MeshConfig().gateway.scheduler_address == "127.0.0.1:50052"


def test_a_repeated_worker_id_is_refused(tmp_path: Path):
    path = _file(
        tmp_path,
        "workers:\n  - {worker_id: w0, port: 50060}\n  - {worker_id: w0, port: 50061}\n",
    )
    message = _error(path, {})
    assert message == (
        f"config {path} line 1: workers: workers[1].worker_id 'w0' repeats workers[0]'s; "
        "each worker needs its own"
    )


def test_a_model_listed_twice_for_one_worker_is_refused(tmp_path: Path):
    path = _file(
        tmp_path,
        "workers:\n  - worker_id: w0\n    port: 50060\n    models: [echo, flux-tiny, echo]\n",
    )
    message = _error(path, {})
    assert message.startswith(f"config {path} line 4: workers.0.models: ")
    assert message.endswith("echo listed more than once; list each model once")


# Values the settings read wrongly before they were checked ---------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # YAML reads off as false, which pydantic took for port 0: a random port.
        ("gateway:\n  http_port: off\n", "gateway.http_port: false is a boolean"),
        ("gateway:\n  port: true\n", "gateway.port: true is a boolean"),
        ("scheduler:\n  max_attempts: on\n", "scheduler.max_attempts: true is a boolean"),
    ],
)
def test_a_boolean_where_a_number_belongs_is_refused(tmp_path: Path, text: str, words: str):
    message = _error(_file(tmp_path, text))
    assert words in message and "line 2" in message


@pytest.mark.parametrize(
    ("worker", "words"),
    [
        ({"worker_id": "a b"}, "workers.0.worker_id: 'a b' is not a worker id"),
        ({"worker_id": "x/y"}, "workers.0.worker_id: 'x/y' is not a worker id"),
        ({"device": "gpu9"}, "workers.0.device: 'gpu9' is not a device"),
        ({"scheduler_address": "x:70000"}, "names port 70000; a port is 1 to 65535"),
        ({"advertise_address": "y:123456"}, "names port 123456; a port is 1 to 65535"),
    ],
)
def test_worker_entries_are_checked_when_the_config_loads(
    tmp_path: Path, worker: dict[str, str], words: str
):
    # Each started a mesh that hung (an id the scheduler refuses), crashed (a "/" in a log
    # file's name), failed at the first load, or dialled another port modulo 65536.
    entry = {"worker_id": "w0", "port": 50060, **worker}
    text = "workers:\n  - " + json.dumps(entry) + "\n"
    assert words in _error(_file(tmp_path, text))


def test_a_variable_cannot_set_one_entry_of_a_list(tmp_path: Path):
    path = _file(tmp_path, "models_dir: /tmp\n")
    message = _error(path, {"MEDIAMESH_WORKERS__0__PORT": "26050"})
    assert message.startswith("env MEDIAMESH_WORKERS__0__PORT: workers is a list")
    assert "MEDIAMESH_WORKERS to the whole list as JSON" in message
    assert str(path) not in message


def test_a_key_given_twice_is_refused_at_its_second_line(tmp_path: Path):
    # PyYAML keeps the last without a word: the second gateway section replaced the first.
    text = "gateway:\n  port: 50051\nscheduler:\n  port: 50052\ngateway:\n  http_port: 8081\n"
    message = _error(_file(tmp_path, text))
    assert message.endswith(
        "line 5: not valid YAML: 'gateway' appears twice in one mapping (first on line 1); "
        "write it once"
    )
