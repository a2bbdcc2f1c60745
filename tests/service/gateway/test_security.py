"""The public listener: open only on loopback, TLS, message size limits, deadlines."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.inference import grpc_service_pb2 as pb
from mediamesh.common.generated.inference import grpc_service_pb2_grpc as pb_grpc
from mediamesh.common.generated.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)
from mediamesh.common.registry import load_registry
from mediamesh.common.settings import GatewaySettings, MeshConfig
from mediamesh.gateway.core.tensors import join_bytes_tensor
from mediamesh.gateway.main import InsecureBindError, start_gateway
from tests.conftest import ROOT
from tests.service.conftest import start_mesh, stop_mesh
from tests.service.gateway.conftest import KEY_A, NO_SPOT_WAIT, auth, keyed, run_probe

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("settings", "starts"),
    [
        ({"host": "0.0.0.0"}, False),
        ({"host": "0.0.0.0", "insecure": True}, True),
        ({"host": "0.0.0.0", **keyed()}, True),
        ({"host": "127.0.0.1"}, True),
    ],
)
async def test_no_keys_off_loopback_refuses_to_start_unless_insecure(settings, starts):
    gateway_settings = GatewaySettings(port=0, metrics_port=None, http_port=0, **settings)
    config = MeshConfig(gateway=gateway_settings, workers=[])
    if not starts:
        # The HTTP face shares the gRPC listener's host and keys: it refuses with it.
        with pytest.raises(InsecureBindError, match="--insecure"):
            await start_gateway(config, load_registry())
        return
    gateway = await start_gateway(config, load_registry())
    assert gateway.port > 0
    assert gateway.http_port and gateway.http_port > 0
    await gateway.stop(0)


def test_the_gateway_command_says_why_it_will_not_start(tmp_path: Path):
    config = tmp_path / "mesh.yaml"
    config.write_text("gateway: {host: 0.0.0.0, port: 0, metrics_port: null}\n")
    result = subprocess.run(
        [sys.executable, "-m", "mediamesh.cli.main", "gateway", "--config", str(config)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2
    assert "not loopback" in result.stderr and "--insecure" in result.stderr


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize("fault", ["missing", "mismatched"])
def test_an_unusable_tls_key_is_one_line_naming_it_not_the_port(tmp_path: Path, fault: str):
    cert, key = self_signed(tmp_path)
    if fault == "missing":
        key = tmp_path / "gone.pem"
        expected = f"mediamesh: gateway.tls.key_file: cannot read {key}: No such file or directory"
    else:
        other = tmp_path / "other"
        other.mkdir()
        _, key = self_signed(other)
        expected = "mediamesh: gateway.tls.key_file: does not match gateway.tls.cert_file"
    config = tmp_path / "mesh.yaml"
    config.write_text(
        "gateway: {port: 0, http_port: null, metrics_port: null, "
        f"tls: {{cert_file: {cert}, key_file: {key}}}}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mediamesh.cli.main", "gateway", "--config", str(config)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == expected
    assert "Traceback" not in result.stderr


async def test_tls_on_the_public_listener_for_both_apis(tmp_path: Path, models_dir: Path):
    cert, key = self_signed(tmp_path)
    tls = {"tls": {"cert_file": str(cert), "key_file": str(key)}}
    mesh = await start_mesh(
        tmp_path, models_dir, [["echo"]], gateway={**keyed(), **tls}, scheduler=NO_SPOT_WAIT
    )
    address = f"127.0.0.1:{mesh.gateway.port}"
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(address, credentials) as channel:
            models = await gateway_pb2_grpc.GatewayStub(channel).ListModels(
                gateway_pb2.ListModelsRequest(), metadata=auth(KEY_A)
            )
            assert "echo" in {m.name for m in models.models}
            server = await pb_grpc.GRPCInferenceServiceStub(channel).ServerMetadata(
                pb.ServerMetadataRequest(), metadata=auth(KEY_A)
            )
            assert server.name == "mediamesh"
        async with grpc.aio.insecure_channel(address) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gateway_pb2_grpc.GatewayStub(plain).ListModels(
                    gateway_pb2.ListModelsRequest(), timeout=5
                )
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        report = await run_probe(address, "echo", "--api-key", KEY_A, "--root-cert", str(cert))
        assert report["echo"] == {"sizes": [[16, 16]]}
    finally:
        await stop_mesh(mesh)


async def test_oversized_messages_are_refused_by_gateway_and_scheduler(
    tmp_path: Path, models_dir: Path
):
    mesh = await start_mesh(
        tmp_path,
        models_dir,
        [],
        gateway={"max_message_bytes": MIB},
        scheduler={"max_message_bytes": MIB},
    )
    try:
        huge = "x" * (2 * MIB)
        infer = pb.ModelInferRequest(model_name="echo")
        infer.inputs.add(name="prompt", datatype="BYTES", shape=[1])
        infer.raw_input_contents.append(join_bytes_tensor([huge.encode()]))
        gateway = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
        scheduler = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.scheduler.port}")
        mesh.channels += [gateway, scheduler]
        calls = [
            gateway_pb2_grpc.GatewayStub(gateway).Submit(
                common_pb2.GenerateRequest(model="echo", prompt=huge)
            ),
            pb_grpc.GRPCInferenceServiceStub(gateway).ModelInfer(infer),
            scheduler_pb2_grpc.SchedulerStub(scheduler).Submit(
                scheduler_pb2.SubmitRequest(
                    request=common_pb2.GenerateRequest(model="echo", prompt=huge)
                )
            ),
        ]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not mesh.core.jobs
    finally:
        await stop_mesh(mesh)


async def test_the_call_deadline_becomes_the_job_deadline(tmp_path: Path, models_dir: Path):
    mesh = await start_mesh(tmp_path, models_dir, [])  # no worker: jobs wait in the queue
    try:
        stub = mesh.gateway_stub()
        start = time.time()
        stream = stub.Generate(common_pb2.GenerateRequest(model="echo", prompt="x"), timeout=30)
        plain = await stream.read()  # the first event names the job
        shorter = await stub.Submit(
            common_pb2.GenerateRequest(model="echo", prompt="x", timeout_ms=5000), timeout=30
        )
        unbounded = await stub.Submit(
            common_pb2.GenerateRequest(model="echo", prompt="y"), timeout=30
        )
        assert mesh.core.jobs[plain.job_id].deadline == pytest.approx(start + 30, abs=2)
        assert mesh.core.jobs[shorter.job_id].deadline == pytest.approx(start + 5, abs=2)
        # Submit's own timeout bounds the wait for the job id, not the job.
        assert mesh.core.jobs[unbounded.job_id].deadline is None
        stream.cancel()

        infer = pb.ModelInferRequest(model_name="echo")
        infer.inputs.add(name="prompt", datatype="BYTES", shape=[1])
        infer.raw_input_contents.append(join_bytes_tensor([b"x"]))
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.gateway.port}")
        mesh.channels.append(channel)
        start = time.time()
        call = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(infer, timeout=20)
        for _ in range(100):
            if len(mesh.core.jobs) == 4:
                break
            await asyncio.sleep(0.02)
        (job,) = [
            j
            for j in mesh.core.jobs.values()
            if j.job_id not in (plain.job_id, shorter.job_id, unbounded.job_id)
        ]
        assert job.deadline == pytest.approx(start + 20, abs=2)
        call.cancel()
    finally:
        await stop_mesh(mesh)
