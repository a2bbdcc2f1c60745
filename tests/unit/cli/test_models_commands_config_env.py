"""`mediamesh models list` and `models pull` read the mesh config that MEDIAMESH_CONFIG names,
as `up` and the client commands do, so they show and pull the registry that mesh serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediamesh.cli.main import build_parser


@pytest.fixture
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        "  - {name: only-mine, modality: image, pipeline: Echo, source: builtin,\n"
        "     defaults: {width: 64, height: 64}, limits: {max_width: 64, max_height: 64}}\n",
        encoding="utf-8",
    )
    config = tmp_path / "mesh.yaml"
    config.write_text(
        f"models_dir: {tmp_path / 'models'}\nregistry_path: {registry}\n", encoding="utf-8"
    )
    monkeypatch.setenv("MEDIAMESH_CONFIG", str(config))
    return config


def test_list_shows_the_registry_of_the_config_in_the_environment(
    own_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["models", "list"])
    assert args.config == own_config
    assert args.handler(args) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert names == ["only-mine"]


def test_pull_looks_names_up_in_that_registry(
    own_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["models", "pull", "only-mine"])
    assert args.handler(args) == 2
    # Found in the config's registry: refused as built in, not as unknown.
    assert capsys.readouterr().err == (
        "mediamesh: only-mine: source builtin is not a hub id; nothing to pull\n"
    )


def test_the_flag_still_wins_and_help_names_the_variable(
    own_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(f"models_dir: {tmp_path / 'models'}\n", encoding="utf-8")
    args = build_parser().parse_args(["models", "list", "--config", str(other)])
    assert args.config == other
    with pytest.raises(SystemExit):
        build_parser().parse_args(["models", "list", "--help"])
    assert "MEDIAMESH_CONFIG" in capsys.readouterr().out


def test_list_says_when_it_cannot_read_a_models_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default models_dir is relative: run elsewhere, no model folder is found.
    config = tmp_path / "mesh.yaml"
    config.write_text(f"models_dir: {tmp_path / 'nowhere'}\n", encoding="utf-8")
    monkeypatch.setenv("MEDIAMESH_CONFIG", str(config))
    args = build_parser().parse_args(["models", "list"])
    assert args.handler(args) == 0
    captured = capsys.readouterr()
    rows = {line.split()[0]: line for line in captured.out.splitlines()[1:]}
    assert " ? " in rows["flux-tiny"] and " ? " not in rows["echo"]
    assert captured.err.startswith("mediamesh: preemption ?: no files to read for ")
    assert "flux-tiny" in captured.err and "echo" not in captured.err
    assert str(tmp_path / "nowhere") in captured.err


def test_list_names_an_absolute_source_apart_from_models_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Such a folder is not under models_dir, nor a tiny model `models build` could make.
    registry = tmp_path / "models.yaml"
    registry.write_text(
        "models:\n"
        "  - {name: mine, modality: image, pipeline: StableDiffusionPipeline,\n"
        f"     source: {tmp_path / 'gone'}, defaults: {{width: 64, height: 64}},\n"
        "     limits: {max_width: 64, max_height: 64}}\n",
        encoding="utf-8",
    )
    config = tmp_path / "mesh.yaml"
    config.write_text(
        f"models_dir: {tmp_path / 'nowhere'}\nregistry_path: {registry}\n", encoding="utf-8"
    )
    monkeypatch.setenv("MEDIAMESH_CONFIG", str(config))
    args = build_parser().parse_args(["models", "list"])
    assert args.handler(args) == 0
    err = capsys.readouterr().err
    assert err.startswith("mediamesh: preemption ?: no files to read at the source of mine")
    assert "models_dir" not in err
