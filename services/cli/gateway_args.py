"""The flags every client command shares to reach a gateway: address, API key and TLS."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TypedDict

# Where client commands find a gateway without --gateway or MEDIAMESH_GATEWAY_ADDRESS.
DEFAULT_GATEWAY = "127.0.0.1:50051"


def add_gateway_arguments(cmd: argparse.ArgumentParser) -> None:
    """--gateway, --api-key and the TLS/mTLS flags, read by `gateway_options`."""
    cmd.add_argument(
        "--gateway",
        default=os.environ.get("MEDIAMESH_GATEWAY_ADDRESS", DEFAULT_GATEWAY),
        help="the gateway's host:port (env MEDIAMESH_GATEWAY_ADDRESS; default: %(default)s)",
    )
    # The key itself stays out of --help, which would print one taken from the environment.
    cmd.add_argument(
        "--api-key",
        default=os.environ.get("MEDIAMESH_API_KEY"),
        help="API key sent as `authorization: Bearer` (env MEDIAMESH_API_KEY; default: none)",
    )
    cmd.add_argument("--tls", action="store_true", help="TLS with the system's root certificates")
    # --ca-cert: the name `mediamesh batch` took before it had the mTLS flags.
    cmd.add_argument(
        "--ca-file", "--ca-cert", type=Path, help="TLS, trusting this CA certificate (PEM)"
    )
    cmd.add_argument("--cert-file", type=Path, help="client certificate for mTLS (PEM)")
    cmd.add_argument("--key-file", type=Path, help="key of the client certificate (PEM)")


class GatewayOptions(TypedDict):
    """Keyword arguments of the SDK's clients."""

    api_key: str | None
    tls: bool
    ca_file: Path | None
    cert_file: Path | None
    key_file: Path | None


def gateway_options(args: argparse.Namespace) -> GatewayOptions:
    """The SDK client's options for the flags `add_gateway_arguments` adds."""
    return GatewayOptions(
        api_key=args.api_key,
        tls=args.tls,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
    )
