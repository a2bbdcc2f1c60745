"""`mediamesh up` with a TLS gateway: it sees the gateway ready (its probes cannot be
plaintext, and it knows no CA the certificate chains to) and the mesh answers over TLS."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.service.pki import SERVER_NAME, make_pki

pytestmark = pytest.mark.e2e


def test_up_is_ready_behind_a_tls_gateway(launch, tmp_path: Path):
    # Signed by a CA `up` is never told about, for a name that is not the address it dials.
    pki = make_pki(tmp_path / "pki")
    tls = {"cert_file": str(pki.cert_file), "key_file": str(pki.key_file)}
    mesh = launch(
        [{"models": ["echo"]}], gateway={"tls": tls}, extra_args=("--ready-timeout", "60")
    )
    ready = [line for line in mesh.output if line.startswith("mediamesh ready:")]
    assert ready and ", http https://127.0.0.1:" in ready[0], mesh.output

    trust = grpc.ssl_channel_credentials(root_certificates=pki.ca_file.read_bytes())
    options = [("grpc.ssl_target_name_override", SERVER_NAME)]
    with grpc.secure_channel(mesh.gateway, trust, options=options) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

    context = ssl.create_default_context(cafile=str(pki.ca_file))
    context.check_hostname = False  # the certificate names SERVER_NAME; its chain is checked
    port = mesh.config["gateway"]["http_port"]
    https = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    https.request("GET", "/readyz")
    assert https.getresponse().status == 200
    https.close()
    # The probes completed their handshakes: the gateway logged no failed one.
    log = (mesh.run_dir / "gateway.log").read_text(errors="replace")
    assert "Handshake failed" not in log
