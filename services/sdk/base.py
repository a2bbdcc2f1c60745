"""What Client and AsyncClient share: how they are configured."""

from __future__ import annotations

from pathlib import Path

from mediamesh.sdk.options import DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TARGET, ClientSettings


def _path(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value)


class ClientBase:
    """Settings of a gateway client.

    target: the gateway's host:port.
    api_key: sent as `authorization: Bearer <key>` when the gateway has API keys.
    tls: use TLS with the system's root certificates; implied by ca_file or cert_file.
    ca_file: PEM file of the CA (or self-signed certificate) to trust instead.
    cert_file, key_file: a client certificate and its key, for a gateway that asks for mTLS.
    timeout_s: deadline of each unary call, retries included (None: no deadline); it also
        bounds how long generate sends its request before the job is accepted (its first
        event), so an unreachable gateway fails it soon after, UNAVAILABLE, naming the address.
        Finite and above 0; so is stream_timeout_s. A bad setting raises ValueError (TypeError
        for a wrong type) naming it, here.
    stream_timeout_s: how long generate and watch wait for the job's end, re-attachments
        included, and the deadline of each download (None: no limit). Only the waiting ends:
        it is kept on this side, never sent with Generate (the gateway would make a call's
        deadline the job's), and running out raises GatewayError DEADLINE_EXCEEDED naming the
        job, which goes on. A job's own limit is the `timeout_ms` option.
    keepalive_s: seconds between keepalive pings on an open call, at least 20: the mesh's
        servers end a connection pinged more often (GOAWAY too_many_pings).
    max_message_bytes: the largest message sent or received (1 to 2**31 - 1).
    retry_on_overload: submit again when submit or generate is answered RESOURCE_EXHAUSTED
        with a retry hint (`grpc-retry-pushback-ms`, else `retry-after-ms`), waiting at least
        the hint, plus a random part that grows with each retry (at most 0.5 s) so that
        callers refused together spread out; for up to max_overload_wait_s of waits in all per
        call, and up to overload_retries tries when that is set (None: the time bounds them).
    reattach_s: how long generate and watch keep re-attaching (a Watch, backing off as the
        channel's retries do) to an accepted job whose stream broke off with the connection
        (UNAVAILABLE), counted from the break and started again by each new event of the job;
        0 never re-attaches.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        api_key: str | None = None,
        tls: bool = False,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
        timeout_s: float | None = 30.0,
        stream_timeout_s: float | None = None,
        keepalive_s: float = 60.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        retry_on_overload: bool = False,
        overload_retries: int | None = None,
        max_overload_wait_s: float = 30.0,
        reattach_s: float = 60.0,
    ) -> None:
        self.settings = ClientSettings(
            target=target,
            api_key=api_key,
            tls=tls,
            ca_file=_path(ca_file),
            cert_file=_path(cert_file),
            key_file=_path(key_file),
            timeout_s=timeout_s,
            stream_timeout_s=stream_timeout_s,
            keepalive_s=keepalive_s,
            max_message_bytes=max_message_bytes,
            retry_on_overload=retry_on_overload,
            overload_retries=overload_retries,
            max_overload_wait_s=max_overload_wait_s,
            reattach_s=reattach_s,
        )
        self._open()

    def _open(self) -> None:
        """Open the channel for self.settings (each client its own kind)."""
        raise NotImplementedError
