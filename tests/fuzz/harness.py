"""Send any bytes to any rpc from hypothesis's thread, and judge what the server answered.

Requests travel through a generic channel with identity serializers, so bytes that are no
valid protobuf reach the server as they are. The mesh stays on the test's event loop while
hypothesis runs in a worker thread (`asyncio.to_thread`) with grpcio's blocking client: the
asyncio client cannot say what a server answered a client-streaming call that it ended while
requests were still being written (it reports INTERNAL "Internal error from Core" for its
own failed write instead, grpc/grpc#36066), and the blocking one keeps the server's status.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
from google.protobuf.descriptor import MethodDescriptor

Metadata = tuple[tuple[str, str], ...]
# What a server may never answer for a request, however malformed: both mean "a bug here".
UNDELIBERATE = frozenset({grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL})
# Generous for a loaded 2-core machine: an echo job takes milliseconds.
CALL_TIMEOUT_S = 10.0
# A stream that has answered and then stays quiet this long is waiting, not hung: stop there.
IDLE_S = 1.0
MAX_REPLIES = 64


def _same(data: bytes) -> bytes:
    return data


def path_of(method: MethodDescriptor) -> str:
    """The rpc's HTTP/2 path, /package.Service/Method."""
    return f"/{method.containing_service.full_name}/{method.name}"


@dataclass(frozen=True)
class Call:
    """One fuzzed call: the rpc, its request messages (one unless client-streaming), metadata."""

    method: MethodDescriptor
    requests: tuple[bytes, ...]
    metadata: Metadata = ()

    def __repr__(self) -> str:
        shown = [r[:200] + (b"..." if len(r) > 200 else b"") for r in self.requests]
        sizes = [len(r) for r in self.requests]
        return f"Call({path_of(self.method)}, sizes={sizes}, {shown!r}, {self.metadata!r})"


@dataclass
class Answer:
    """How the server answered: its status, the replies read, and whether it answered at all
    (`silent`: neither a reply nor a status within CALL_TIMEOUT_S)."""

    code: grpc.StatusCode
    details: str
    replies: list[bytes] = field(default_factory=list)
    silent: bool = False


@dataclass
class Probe:
    """Calls rpcs on blocking `channels` (by service full name) and judges the answers."""

    channels: dict[str, grpc.Channel]
    # Checks of each reply's content, by rpc path: an error carried inside a reply.
    reply_checks: dict[str, Callable[[bytes], None]] = field(default_factory=dict)

    def call(self, call: Call) -> Answer:
        """Make `call`, wait for its answer and assert that it is a deliberate one."""
        answer = self._call(call)
        assert not answer.silent, f"no answer within {CALL_TIMEOUT_S} s to {call!r}"
        assert answer.code not in UNDELIBERATE, f"{answer.code.name}: {answer.details!r}"
        check = self.reply_checks.get(path_of(call.method))
        if check is not None:
            for reply in answer.replies:
                check(reply)
        return answer

    def _call(self, call: Call) -> Answer:
        method = call.method
        channel = self.channels[method.containing_service.full_name]
        path = path_of(method)
        timeout, metadata = CALL_TIMEOUT_S, call.metadata
        started = time.monotonic()
        try:
            if method.server_streaming:
                if method.client_streaming:
                    bidi = channel.stream_stream(path, _same, _same)
                    stream = bidi(iter(call.requests), timeout=timeout, metadata=metadata)
                else:
                    server = channel.unary_stream(path, _same, _same)
                    stream = server(call.requests[0], timeout=timeout, metadata=metadata)
                return _read(stream, started)
            if method.client_streaming:
                client = channel.stream_unary(path, _same, _same)
                reply = client(iter(call.requests), timeout=timeout, metadata=metadata)
            else:
                unary = channel.unary_unary(path, _same, _same)
                reply = unary(call.requests[0], timeout=timeout, metadata=metadata)
            return Answer(grpc.StatusCode.OK, "", [reply])
        except grpc.RpcError as exc:
            return _failed(exc, started, [])


def _read(stream: Iterator[bytes], started: float) -> Answer:
    call: grpc.Call = stream  # type: ignore[assignment]
    replies: list[bytes] = []
    idle = threading.Event()

    def stop_waiting() -> None:
        idle.set()
        call.cancel()

    timer: threading.Timer | None = None
    try:
        for reply in stream:
            if timer is not None:
                timer.cancel()
            replies.append(reply)
            if len(replies) >= MAX_REPLIES:
                call.cancel()
                return Answer(grpc.StatusCode.OK, "open: reply limit", replies)
            timer = threading.Timer(IDLE_S, stop_waiting)
            timer.start()
        return Answer(call.code(), call.details() or "", replies)
    except grpc.RpcError as exc:
        if idle.is_set():
            return Answer(grpc.StatusCode.OK, "open: still streaming", replies)
        return _failed(exc, started, replies)
    finally:
        if timer is not None:
            timer.cancel()


def _failed(exc: grpc.RpcError, started: float, replies: list[bytes]) -> Answer:
    call: grpc.Call = exc  # type: ignore[assignment]
    # The client's own deadline with nothing received: the server never answered.
    silent = (
        call.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        and not replies
        and time.monotonic() - started >= CALL_TIMEOUT_S * 0.95
    )
    return Answer(call.code(), call.details() or "", replies, silent)


def blocking_channel(address: str) -> grpc.Channel:
    """A channel for the probe, allowed to send requests past any server's message limit."""
    return grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)])
