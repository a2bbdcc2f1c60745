"""pyproject.toml lists every package under services/, since discovery cannot rename a folder."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _listed() -> tuple[dict[str, str], list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return config["package-dir"], config["packages"]


def test_services_is_the_one_top_level_package():
    package_dir, packages = _listed()
    assert package_dir == {"mediamesh": "services"}
    assert {name.split(".")[0] for name in packages} == {"mediamesh"}


def test_every_folder_with_an_init_is_listed():
    _, packages = _listed()
    on_disk = sorted(
        "mediamesh"
        + "".join(f".{part}" for part in init.parent.relative_to(ROOT / "services").parts)
        for init in (ROOT / "services").rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    missing = sorted(set(on_disk) - set(packages))
    stale = sorted(set(packages) - set(on_disk))
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert not stale, f"listed in pyproject.toml but not on disk: {stale}"
