"""A keyed mesh with a small inline limit for the SDK, certificates, and a fake gateway."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from mediamesh.common.generated.v1 import gateway_pb2_grpc
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import NO_SPOT_WAIT, keyed

# The smallest inline limit the settings allow: every PNG of flux-tiny comes by Download.
INLINE_LIMIT = 1024


async def sdk_mesh_with(tmp_path: Path, models_dir: Path, **gateway: object) -> InProcessMesh:
    """flux-tiny and echo on one worker, API keys for tenants a and b, no wait for spot."""
    settings = {
        **keyed(),
        "inline_result_limit_bytes": INLINE_LIMIT,
        "download_chunk_bytes": INLINE_LIMIT,
        **gateway,
    }
    return await start_mesh(
        tmp_path, models_dir, [["flux-tiny", "echo"]], gateway=settings, scheduler=NO_SPOT_WAIT
    )


@pytest.fixture
async def sdk_mesh(tmp_path: Path, models_dir: Path) -> AsyncIterator[InProcessMesh]:
    mesh = await sdk_mesh_with(tmp_path, models_dir)
    yield mesh
    await stop_mesh(mesh)


def address_of(mesh: InProcessMesh) -> str:
    return f"127.0.0.1:{mesh.gateway.port}"


@dataclass(frozen=True)
class Certificates:
    """A test CA, a server certificate for localhost/127.0.0.1 and a client one, all PEM."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str, ca: Path, ca_key: Path, extensions: str) -> tuple[Path, Path]:
    cert, key, csr = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text(extensions + "\n")
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext),
    )  # fmt: skip
    return cert, key


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    folder = tmp_path / "pki"
    folder.mkdir()
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=mediamesh test CA",
    )  # fmt: skip
    server = _signed(
        folder,
        "localhost",
        ca,
        ca_key,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth",
    )
    client = _signed(folder, "client", ca, ca_key, "extendedKeyUsage=clientAuth")
    return Certificates(ca, *server, *client)


@dataclass
class FakeServer:
    server: grpc.aio.Server
    address: str


async def start_fake_gateway(
    servicer: gateway_pb2_grpc.GatewayServicer,
    credentials: grpc.ServerCredentials | None = None,
) -> FakeServer:
    """A bare gRPC server with a hand-written Gateway servicer, on a free loopback port."""
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return FakeServer(server, f"127.0.0.1:{port}")
