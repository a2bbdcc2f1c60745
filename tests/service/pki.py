"""A throwaway certificate authority for tests, made with the openssl command line."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

# The name every internal certificate carries; clients expect it (internal_tls.server_name)
# whatever address they dial, as they do on Kubernetes where workers are dialled by pod IP.
SERVER_NAME = "mediamesh-internal"
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pki:
    """A CA and one certificate it signed, usable as server and client certificate."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def internal_tls(self) -> dict[str, str]:
        """The `internal_tls` settings for mutual TLS with this CA."""
        return {
            "ca_file": str(self.ca_file),
            "cert_file": str(self.cert_file),
            "key_file": str(self.key_file),
            "server_name": SERVER_NAME,
        }


def make_pki(folder: Path) -> Pki:
    """A new CA in `folder` and a certificate for SERVER_NAME (server and client use)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", f"/CN=test CA {folder.name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "req", *_EC, "-keyout", "node.key", "-out", "node.csr", "-subj", f"/CN={SERVER_NAME}",
        cwd=folder,
    )  # fmt: skip
    (folder / "node.ext").write_text(
        f"subjectAltName=DNS:{SERVER_NAME}\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "basicConstraints=CA:FALSE\n"
    )
    _openssl(
        "x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "node.crt", "-days", "1", "-extfile", "node.ext",
        cwd=folder,
    )  # fmt: skip
    return Pki(folder / "ca.crt", folder / "node.crt", folder / "node.key")
