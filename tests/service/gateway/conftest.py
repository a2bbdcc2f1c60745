"""A mesh with API keys for two tenants, and helpers to call it as either of them."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.gateway.core.tenancy import hash_key
from tests.conftest import ROOT
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh

KEY_A, KEY_B = "key-of-tenant-a", "key-of-tenant-b"
# BATCH jobs prefer spot workers; the in-process worker is on-demand, so fall back at once.
NO_SPOT_WAIT = {
    "placement": {
        "REALTIME": {"prefer": "on-demand", "allow": ["on-demand"]},
        "STANDARD": {"prefer": "on-demand", "allow": ["on-demand"]},
        "BATCH": {"prefer": "spot", "allow": ["spot", "on-demand"], "fallback_after_s": 0},
    }
}


def keyed(**tenants: dict) -> dict:
    """Gateway settings with KEY_A for tenant a and KEY_B for tenant b, with the quotas given
    by tenant; once one tenant has quotas every key's tenant needs an entry, so the other gets
    the defaults."""
    return {
        "api_keys": [
            {"sha256": hash_key(KEY_A), "tenant": "a"},
            {"sha256": hash_key(KEY_B), "tenant": "b"},
        ],
        "tenants": {"a": {}, "b": {}, **tenants} if tenants else {},
    }


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def echo_mesh_holding(tmp_path: Path, models_dir: Path, held: int) -> InProcessMesh:
    """An echo mesh with API keys whose scheduler keeps `held` ended jobs in memory; the
    older ones are read back from its store."""
    return await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        gateway=keyed(),
        scheduler={**NO_SPOT_WAIT, "ended_jobs_in_memory": held},
    )


async def finished_echo_jobs(mesh: InProcessMesh, api_key: str, count: int) -> list[str]:
    """The ids of `count` echo jobs run to success one after another as `api_key`."""
    stub, ids = mesh.gateway_stub(), []
    for index in range(count):
        request = common_pb2.GenerateRequest(model="echo", prompt=f"p{index}")
        events = [e async for e in stub.Generate(request, metadata=auth(api_key))]
        assert events[-1].state == common_pb2.SUCCEEDED
        ids.append(events[-1].job_id)
    return ids


@pytest.fixture
async def keyed_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await start_mesh(
        tmp_path, models_dir, [["flux-tiny", "echo"]], gateway=keyed(), scheduler=NO_SPOT_WAIT
    )
    yield mesh
    await stop_mesh(mesh)


@pytest.fixture
async def client(http_mesh: InProcessMesh) -> AsyncIterator[httpx.AsyncClient]:
    """A keyless HTTP client of the module's `http_mesh` (each request sends its own key);
    a module of another mesh defines its own `client`."""
    # Imported here, not above: http_support imports this module's keys.
    from tests.service.gateway.http_support import http_client

    async with http_client(http_mesh) as client:
        yield client


async def run_probe(address: str, *args: str) -> dict:
    """tests.service.gateway.triton_probe in its own process (see its docstring for why)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.service.gateway.triton_probe",
        address,
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out)
