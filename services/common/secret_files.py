"""Files holding credentials (tokens, TLS keys and certificates), read and checked at start.

A file that cannot be read, or a certificate and key gRPC could not use, is one ConfigError
line naming the setting: gRPC itself reports a bad PEM only when it binds, as a port it could
not bind, or on a client's first call.
"""

from __future__ import annotations

import logging
import os
import ssl
import stat
from pathlib import Path

from mediamesh.common.config_loader import ConfigError

log = logging.getLogger("mediamesh.security")


def read_setting_file(path: Path, setting: str) -> bytes:
    """The bytes of the file `setting` names; ConfigError naming it when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None


def warn_if_shared(path: Path, setting: str) -> None:
    """Warns when a secret's file is readable by users other than this process's. Not refused:
    Kubernetes secret volumes and compose secrets are 0644/0444 unless told otherwise, and the
    pod or container is the boundary there."""
    try:
        status = path.stat()
    except OSError:
        return
    mode = stat.S_IMODE(status.st_mode)
    # Group read is how a process reads a file someone else owns in its own group (a
    # Kubernetes secret volume with defaultMode 0440 and the pod's fsGroup): needed, not shared.
    own_group = status.st_gid in {os.getegid(), *os.getgroups()}
    group = bool(mode & 0o040) and (status.st_uid == os.geteuid() or not own_group)
    others = bool(mode & 0o004)
    if group or others:
        who = "group and others" if group and others else "group" if group else "others"
        log.warning(
            "%s: %s is readable by %s (mode %04o); make it readable by this user only "
            "(chmod 600; on a Kubernetes secret volume, whose files root owns, defaultMode "
            "0440 with the pod's fsGroup, as deploy/k8s sets)",
            setting,
            path,
            who,
            mode,
        )


def check_ca(path: Path, setting: str) -> None:
    """ConfigError naming `setting` unless `path` holds at least one PEM certificate."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(f"{setting}: {path} is not a PEM certificate ({_why(exc)})") from None


def check_key_pair(cert: Path, key: Path, cert_setting: str, key_setting: str) -> None:
    """ConfigError naming the setting at fault unless `cert` is a PEM certificate (chain) and
    `key` the unencrypted PEM private key that belongs to it."""
    check_ca(cert, cert_setting)
    try:
        # A password, even empty, keeps OpenSSL from prompting for one on the terminal;
        # gRPC cannot use an encrypted key anyway.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=b"")
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{key_setting}: does not match {cert_setting}") from None
        if exc.reason is None:
            # OpenSSL's "PEM lib": nothing in the file parsed as a key.
            raise ConfigError(
                f"{key_setting}: {key} is not an unencrypted PEM private key"
            ) from None
        raise ConfigError(
            f"{key_setting}: cannot be used with {cert_setting}: {_why(exc)}"
        ) from None


def read_key_pair(
    cert: Path, key: Path, cert_setting: str, key_setting: str
) -> tuple[bytes, bytes]:
    """The PEM bytes of a certificate and its key, each read, the key's sharing warned of,
    and the pair checked (`check_key_pair`); ConfigError naming the setting at fault."""
    pem = read_setting_file(cert, cert_setting), read_setting_file(key, key_setting)
    warn_if_shared(key, key_setting)
    check_key_pair(cert, key, cert_setting, key_setting)
    return pem


def _why(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc.strerror or exc).lower().replace("_", " ")
