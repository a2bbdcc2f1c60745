"""Writes one pod's mesh config from the shared one; run by the k8s init containers.

The shared config (ConfigMap mediamesh-config, key mesh.yaml) cannot hold two things:
- secrets: the gateway's `api_keys` and `tenants` live in the mediamesh-secrets Secret
  (key gateway-auth.yaml) and are merged into the `gateway` section here;
- per-pod worker settings: worker pods get generated names, and `mediamesh worker` takes the
  settings it has no flag or env var for (checkpoint_dir, drain_grace_s, torch_threads, ...)
  from the `workers` entry whose worker_id is its own. The template entry is copied under
  the pod's name, and it becomes the only entry.

    python render_config.py BASE OUT --gateway-auth FILE
    python render_config.py BASE OUT --worker-id ID [--template NAME]

Needs only Python and PyYAML (both in the mediamesh image).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

GATEWAY_AUTH_KEYS = {"api_keys", "tenants"}


def merge_gateway_auth(config: dict, auth: dict) -> dict:
    unknown = set(auth) - GATEWAY_AUTH_KEYS
    if unknown:
        raise ValueError(
            f"gateway auth file: only api_keys and tenants belong here, not {sorted(unknown)}"
        )
    gateway = dict(config.get("gateway") or {})
    gateway.update(auth)
    return {**config, "gateway": gateway}


def worker_from_template(config: dict, worker_id: str, template: str) -> dict:
    entries = config.get("workers") or []
    found = [w for w in entries if w.get("worker_id") == template]
    if len(found) != 1:
        raise ValueError(
            f"expected one workers entry with worker_id {template!r}, found {len(found)}"
        )
    return {**config, "workers": [{**found[0], "worker_id": worker_id}]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the shared mesh.yaml")
    parser.add_argument("out", type=Path, help="where to write this pod's mesh.yaml")
    parser.add_argument("--gateway-auth", type=Path, help="YAML with api_keys and tenants")
    parser.add_argument("--worker-id", help="this worker's id (the pod name)")
    parser.add_argument("--template", default="k8s-template", help="workers entry to copy")
    args = parser.parse_args(argv)

    config = yaml.safe_load(args.base.read_text()) or {}
    try:
        if args.gateway_auth is not None:
            config = merge_gateway_auth(config, yaml.safe_load(args.gateway_auth.read_text()) or {})
        if args.worker_id:
            config = worker_from_template(config, args.worker_id, args.template)
    except ValueError as exc:
        print(f"render_config: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(yaml.safe_dump(config, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
