"""Listening sockets whose failure is one line naming the setting that chose the address.

Every listener a service opens (gRPC, its health port, the gateway's HTTP face, metrics)
reports a port it cannot take the same way, as a StartupError that the command prints in one
line. Free of gRPC: the gateway's HTTP face and the metrics module use it too.
"""

from __future__ import annotations

import socket

from mediamesh.common.errors import StartupError


class ListenError(StartupError):
    """`host:port` cannot be listened on. `setting` is the config field that chose it, bare
    (`port`) where the raiser serves any service, then qualified by whoever knows which one."""

    def __init__(
        self, setting: str, host: str, port: int, reason: str, *, section: str | None = None
    ) -> None:
        name = f"{section}.{setting}" if section else setting
        super().__init__(f"{name}: cannot listen on {address(host, port)}: {reason}")
        self.setting = setting
        self.section = section
        self.host = host
        self.port = port
        self.reason = reason

    def in_section(self, section: str) -> ListenError:
        """This error with its setting named as `section` spells it; unchanged when the
        raiser already named one."""
        if self.section is not None:
            return self
        return ListenError(self.setting, self.host, self.port, self.reason, section=section)


def address(host: str, port: int) -> str:
    """`host:port`, an IPv6 host in brackets."""
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def bind_failure(
    setting: str, host: str, port: int, error: OSError, *, section: str | None = None
) -> ListenError:
    """The ListenError for `error`, raised by binding `host:port`: its reason without the
    errno number, which says nothing more to a reader."""
    reason = (error.strerror or str(error)).lower()
    return ListenError(setting, host, port, reason, section=section)


def listening_socket(
    setting: str, host: str, port: int, *, section: str | None = None
) -> socket.socket:
    """A socket bound to `host:port` (0: a free port) and listening, with SO_REUSEADDR as
    servers bind (a connection lingering in TIME_WAIT does not block a restart);
    ListenError when the address cannot be had."""
    bare = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise bind_failure(setting, host, port, exc, section=section) from exc
    return sock


def refuse_taken(setting: str, host: str, port: int) -> None:
    """Raises ListenError when `host:port` is already taken.

    For servers that bind it themselves and, failing, say only that they failed (gRPC
    raises "Failed to bind" after logging a line of its own): binding it first gives the
    reason in the one line. A host name this resolver cannot bind is left to the server.
    """
    if port == 0:
        return
    try:
        listening_socket(setting, host, port).close()
    except ListenError as exc:
        if isinstance(exc.__cause__, socket.gaierror):
            return
        raise
