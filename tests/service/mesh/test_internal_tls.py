"""Internal channels over mutual TLS: gateway -> scheduler, scheduler <-> worker and the CLI
carry a certificate the mesh's CA signed; a caller without one is refused at the handshake."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from bench.launcher import free_port
from mediamesh.cli.api.mesh_client import mesh_status
from mediamesh.common.api.health import is_serving, serving_status
from mediamesh.common.credentials import InternalCredentials
from mediamesh.common.generated.v1 import (
    common_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.pki import SERVER_NAME, make_pki

NAME_OVERRIDE = [("grpc.ssl_target_name_override", SERVER_NAME)]


async def _refused(call) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    raise AssertionError("the call without a client certificate succeeded")


async def test_the_mesh_speaks_mutual_tls_and_refuses_callers_without_a_certificate(
    tmp_path: Path, models_dir: Path
):
    pki = make_pki(tmp_path / "pki")
    stranger = make_pki(tmp_path / "stranger")  # a certificate from another CA
    health_port = free_port()
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [["echo"]],
        internal_tls=pki.internal_tls(),
        scheduler={"health_port": health_port},
    )
    try:
        # The worker attached over mTLS; the gateway submits and follows over mTLS; the
        # scheduler ran the batch on the worker over mTLS.
        assert set(mesh.core.units) == {"w0"}
        events = [
            e
            async for e in mesh.gateway_stub().Generate(
                common_pb2.GenerateRequest(model="echo", prompt="x"), timeout=30
            )
        ]
        assert events[-1].state == common_pb2.SUCCEEDED

        scheduler = f"127.0.0.1:{mesh.scheduler.port}"
        worker = f"127.0.0.1:{mesh.workers[0].port}"
        no_cert = grpc.ssl_channel_credentials(root_certificates=pki.ca_file.read_bytes())
        wrong_ca = grpc.ssl_channel_credentials(
            root_certificates=pki.ca_file.read_bytes(),
            private_key=stranger.key_file.read_bytes(),
            certificate_chain=stranger.cert_file.read_bytes(),
        )
        channels = [
            grpc.aio.insecure_channel(scheduler),
            grpc.aio.secure_channel(scheduler, no_cert, options=NAME_OVERRIDE),
            grpc.aio.secure_channel(scheduler, wrong_ca, options=NAME_OVERRIDE),
        ]
        worker_channels = [
            grpc.aio.insecure_channel(worker),
            grpc.aio.secure_channel(worker, no_cert, options=NAME_OVERRIDE),
        ]
        mesh.channels += [*channels, *worker_channels]
        for channel in channels:
            call = scheduler_pb2_grpc.SchedulerStub(channel).GetStatus(
                scheduler_pb2.GetStatusRequest(), timeout=10
            )
            assert await _refused(call) == grpc.StatusCode.UNAVAILABLE
        for channel in worker_channels:
            call = worker_pb2_grpc.WorkerStub(channel).Cancel(
                worker_pb2.CancelJobsRequest(job_ids=["x"]), timeout=10
            )
            assert await _refused(call) == grpc.StatusCode.UNAVAILABLE

        # The CLI's clients carry the config's certificate.
        status = await asyncio.to_thread(mesh_status, mesh.config, scheduler)
        assert [w.worker_id for w in status.workers] == ["w0"]
        credentials = InternalCredentials.from_config(mesh.config)
        assert await asyncio.to_thread(is_serving, scheduler, 5.0, credentials)
        assert not await asyncio.to_thread(is_serving, scheduler, 5.0)
        # Probes that cannot present a certificate (the kubelet's) ask the health-only port.
        health = f"127.0.0.1:{health_port}"
        assert await asyncio.to_thread(serving_status, health) == "SERVING"
        health_channel = grpc.aio.insecure_channel(health)
        mesh.channels.append(health_channel)
        call = scheduler_pb2_grpc.SchedulerStub(health_channel).GetStatus(
            scheduler_pb2.GetStatusRequest(), timeout=10
        )
        assert await _refused(call) == grpc.StatusCode.UNIMPLEMENTED  # health only
    finally:
        await stop_mesh(mesh)
