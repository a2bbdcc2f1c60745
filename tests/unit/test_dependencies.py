"""Every third-party import in the product is declared in pyproject.toml, and
constraints.txt pins what pyproject.toml and the generated stubs allow.

A module-level import needs a distribution in [project.dependencies]. An optional extra's
package (matplotlib in `sim`, deepspeed in `deepspeed`, grpcio-tools in `dev`) may only be
imported inside a function, in a file that guards it with `except ImportError` and a hint
naming the extra to install, so a plain `pip install mediamesh` never fails on it.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "services"
FIRST_PARTY = {"mediamesh"}


@dataclass(frozen=True)
class Import:
    """One import statement of a third-party top-level name."""

    path: Path
    line: int
    name: str
    # Inside a function body: runs only when called.
    lazy: bool
    # The source of an enclosing try whose handler catches ImportError, if any.
    guard: str | None


class _Imports(ast.NodeVisitor):
    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.found: list[Import] = []
        self._functions = 0
        self._guards: list[str] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h) for h in node.handlers)
        if guarded:
            self._guards.append(ast.get_source_segment(self.source, node) or "")
        for statement in node.body:
            self.visit(statement)
        if guarded:
            self._guards.pop()
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    def _add(self, node: ast.stmt, module: str) -> None:
        name = module.split(".")[0]
        if name in sys.stdlib_module_names or name in FIRST_PARTY:
            return
        guard = self._guards[-1] if self._guards else None
        self.found.append(Import(self.path, node.lineno, name, self._functions > 0, guard))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._add(node, node.module)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(n, ast.Name) and n.id in {"ImportError", "ModuleNotFoundError"} for n in names
    )


@cache
def product_imports() -> tuple[Import, ...]:
    found: list[Import] = []
    for path in sorted(PRODUCT.rglob("*.py")):
        source = path.read_text()
        visitor = _Imports(path.relative_to(ROOT), source)
        visitor.visit(ast.parse(source, str(path)))
        found.extend(visitor.found)
    return tuple(found)


@cache
def declared() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Canonical distribution names: the required ones, and those of each extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> frozenset[str]:
        return frozenset(canonicalize_name(Requirement(r).name) for r in requirements)

    extras = {e: names(r) for e, r in project.get("optional-dependencies", {}).items()}
    return names(project["dependencies"]), extras


@cache
def _providers() -> dict[str, list[str]]:
    return packages_distributions()


def distributions(import_name: str) -> set[str]:
    """The installed distributions that provide a top-level import name."""
    return {canonicalize_name(d) for d in _providers().get(import_name, [])}


def test_the_scan_sees_the_imports_it_must_judge():
    names = {i.name for i in product_imports()}
    assert {"grpc", "pydantic", "yaml", "torch", "matplotlib", "deepspeed"} <= names


@pytest.mark.parametrize("name", sorted({i.name for i in product_imports()}), ids=lambda name: name)
def test_every_import_is_declared(name: str):
    required, extras = declared()
    imports = [i for i in product_imports() if i.name == name]
    where = ", ".join(sorted({f"{i.path}:{i.line}" for i in imports}))
    providers = distributions(name)
    assert providers, f"{name} ({where}) is imported but no installed distribution provides it"
    if providers & required:
        return
    in_extras = sorted(e for e, names in extras.items() if providers & names)
    assert in_extras, (
        f"{name} ({where}) is provided by {sorted(providers)}, which pyproject.toml does not "
        "declare: add it to [project.dependencies] or to an extra"
    )
    eager = [f"{i.path}:{i.line}" for i in imports if not i.lazy]
    assert not eager, (
        f"{name} comes only with the extra {in_extras} but is imported at module level at "
        f"{eager}: import it inside the function that needs it"
    )
    for path in {i.path for i in imports}:
        hints = [
            i.guard
            for i in product_imports()
            if i.path == path and i.name == name and i.guard is not None
        ]
        assert any(f"mediamesh[{e}]" in g for g in hints for e in in_extras), (
            f"{path}: {name} (extra {in_extras}) needs a `try: import {name}` whose "
            f"`except ImportError` names `pip install 'mediamesh[{in_extras[0]}]'`"
        )


# constraints.txt ------------------------------------------------------------------------------

STUBS = PRODUCT / "common" / "generated"


@cache
def pins() -> dict[str, Version]:
    """constraints.txt as canonical name -> pinned version; fails on anything pip would not
    take as a constraint (extras, markers, ranges) or on a name pinned twice."""
    found: dict[str, Version] = {}
    for number, raw in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"constraints.txt:{number}: {line} is not a pin"
        assert not requirement.extras and requirement.marker is None, (
            f"constraints.txt:{number}: pip constraints take no extras or markers"
        )
        name = canonicalize_name(requirement.name)
        assert name not in found, f"constraints.txt:{number}: {name} is pinned twice"
        found[name] = Version(specifier.version)
    return found


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {}).values()
    return [Requirement(r) for r in [*project["dependencies"], *(r for e in extras for r in e)]]


def test_every_declared_distribution_is_pinned_within_its_specifier():
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins(), f"{requirement} is declared but constraints.txt does not pin it"
        assert requirement.specifier.contains(pins()[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins()[name]}, outside pyproject's {requirement}"
        )


def test_grpc_and_protobuf_floors_and_pins_match_the_generated_stubs():
    grpc_stub = next(STUBS.rglob("*_pb2_grpc.py")).read_text()
    generated_by = Version(re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", grpc_stub)[1])
    message_stub = next(STUBS.rglob("*_pb2.py")).read_text()
    gencode = re.search(r"Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),", message_stub)
    protobuf_gencode = Version(".".join(gencode.groups()))
    floors = {canonicalize_name(r.name): r.specifier for r in _requirements()}
    assert pins()["grpcio-tools"] == generated_by
    assert f">={generated_by}" in {str(s) for s in floors["grpcio"]}
    assert f">={protobuf_gencode}" in {str(s) for s in floors["protobuf"]}
    # The stubs refuse a protobuf of another major version.
    assert not floors["protobuf"].contains(f"{protobuf_gencode.major + 1}.0.0")
    assert pins()["protobuf"].major == protobuf_gencode.major
    assert pins()["protobuf"] >= protobuf_gencode and pins()["grpcio"] >= generated_by
