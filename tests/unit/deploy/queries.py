"""Every PromQL expression the deploy files use, ready to send to a real Prometheus.

`deploy_queries()` reads the KEDA ScaledObjects (deploy/k8s/keda) and the Grafana dashboard
(deploy/grafana) and returns their expressions with Grafana's variables replaced by concrete
values. Self-contained (stdlib and PyYAML only) so an e2e test can import it from anywhere:
`from tests.unit.deploy.queries import deploy_queries`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
KEDA_DIR = DEPLOY / "k8s" / "keda"
DASHBOARD = DEPLOY / "grafana" / "mediamesh-dashboard.json"


def all_values() -> dict[str, str]:
    """What Grafana puts in place of each dashboard variable when "All" is selected: its
    `allValue`, or else the alternation of its listed values, which leaves out any value
    of the label not listed (a refusal's queue "unknown")."""
    found = {}
    for variable in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if not variable.get("includeAll"):
            continue
        listed = [o["value"] for o in variable.get("options", []) if o["value"] != "$__all"]
        found[variable["name"]] = variable.get("allValue") or "|".join(listed)
    return found


# What each dashboard variable stands for when a query runs outside Grafana: "All".
VARIABLE_VALUES: dict[str, str] = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
    **all_values(),
}

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")


@dataclass(frozen=True)
class Query:
    """One expression and where it comes from (`keda:<name>` or `dashboard:<panel title>`)."""

    source: str
    expr: str
    # True where the expression must return exactly one element (KEDA triggers).
    single: bool


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replaces `$var`, `${var}`, `${var:fmt}` and `[[var]]` with concrete values."""
    values = VARIABLE_VALUES if values is None else values

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in values:
            raise KeyError(f"no value for variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def scaled_objects() -> list[dict]:
    docs: list[dict] = []
    for path in sorted(KEDA_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return [d for d in docs if d.get("kind") == "ScaledObject"]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dash: dict | None = None) -> list[dict]:
    """Every panel, including those nested in collapsed rows."""
    dash = dashboard() if dash is None else dash
    out: list[dict] = []
    for panel in dash.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def keda_queries() -> list[Query]:
    out = []
    for obj in scaled_objects():
        for trigger in obj["spec"]["triggers"]:
            if trigger["type"] == "prometheus":
                name = f"keda:{obj['metadata']['name']}"
                out.append(Query(name, substitute(trigger["metadata"]["query"]), single=True))
    return out


def dashboard_queries() -> list[Query]:
    out = []
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            if target.get("expr"):
                source = f"dashboard:{panel.get('title', panel.get('id'))}"
                out.append(Query(source, substitute(target["expr"]), single=False))
    return out


def deploy_queries() -> list[str]:
    """Every PromQL expression used by the ScaledObjects and the dashboard, variables filled."""
    seen: dict[str, None] = {}
    for query in [*keda_queries(), *dashboard_queries()]:
        seen.setdefault(query.expr, None)
    return list(seen)
