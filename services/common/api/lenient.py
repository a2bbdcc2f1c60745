"""Serve a servicer so that a request protobuf cannot parse is INVALID_ARGUMENT, naming the field.

With the generated registration, bytes that are no valid request (a string field holding
invalid UTF-8, a truncated message) fail inside gRPC's deserializer and the caller sees
UNKNOWN. Here the deserializer never raises: it hands the servicer a description of the
problem, and the call answers INVALID_ARGUMENT with it. Every request is also held to the
declared limits of its string and bytes fields (`mediamesh.common.limits`) before any rpc sees
it, and each repeated field to a count (`bounds.MAX_COUNTS`), checked by length alone before
any of its entries is looked at. The gateway, the scheduler and the workers all register their
servicers through here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from google.protobuf import empty_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.unknown_fields import UnknownFieldSet

from mediamesh.common.api.bounds import check_bounds
from mediamesh.common.errors import InvalidArgument

if TYPE_CHECKING:
    # A message class's DESCRIPTOR is this type under the upb runtime (the default backend).
    from google._upb._message import Descriptor as UpbDescriptor

_LENGTH_DELIMITED = 2

# Any rpc of the servicer passes through here, whatever its message types.
# (Quoted: grpc's classes are generic only in their type stubs.)
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
_Behaviour: TypeAlias = "Callable[[Any, _Context], Any]"
# Told of each request the guard refuses, with the refusal: the method's name, the request
# (an `Unparsable` for one that did not parse) and the error the caller gets.
OnRefused: TypeAlias = Callable[[str, Any, InvalidArgument], None]


@dataclass(frozen=True)
class Unparsable:
    """What the lenient deserializer hands a servicer in place of a request that did not parse."""

    reason: str


def add_servicer(
    server: grpc.aio.Server,
    servicer: object,
    service: ServiceDescriptor,
    bounds_checked_by_servicer: frozenset[str] = frozenset(),
    on_refused: OnRefused | None = None,
) -> None:
    """Registers `service`'s rpcs on `server`, each served by `servicer`'s method of that name.

    Requests that do not parse, or exceed a field's declared limit, are answered with
    INVALID_ARGUMENT before the servicer's method runs. Call before the server starts.
    The streams named in `bounds_checked_by_servicer` are still refused for a message that
    does not parse, but their servicer checks the limits itself: a message of theirs holds
    several independent requests, and one request past a limit must fail alone.
    `on_refused` hears of each unary request refused here (the gateway counts the jobs it
    refuses, these among them).
    """
    handlers = {}
    for method in service.methods:
        request_class = GetMessageClass(method.input_type)
        response_class = GetMessageClass(method.output_type)
        behaviour = getattr(servicer, method.name)
        shape = (method.client_streaming, method.server_streaming)
        guard = _GUARDS[shape]
        if method.name in bounds_checked_by_servicer:
            if shape != (True, True):
                raise ValueError(f"{method.name}: only a bidirectional stream checks its own")
            guard = _parsed_stream_stream
        handlers[method.name] = _FACTORIES[shape](
            guard(behaviour, _told(method.name, on_refused)),
            request_deserializer=_parser(request_class),
            response_serializer=response_class.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )


def _parser(message_class: type[Message]) -> Callable[[bytes], Message | Unparsable]:
    def parse(data: bytes) -> Message | Unparsable:
        try:
            return message_class.FromString(data)
        except DecodeError:
            return Unparsable(describe(message_class.DESCRIPTOR, data))

    return parse


def describe(descriptor: Descriptor | UpbDescriptor, data: bytes) -> str:
    """Which string field is not UTF-8, or that the bytes are no protobuf message at all."""
    return _bad_utf8(descriptor, data, "") or (
        f"request: not a valid {descriptor.full_name} protobuf message"
    )


def _bad_utf8(descriptor: Descriptor | UpbDescriptor, data: bytes, prefix: str) -> str | None:
    try:
        fields = UnknownFieldSet(empty_pb2.Empty.FromString(data))
    except DecodeError:
        return None
    for item in fields:
        field = descriptor.fields_by_number.get(item.field_number)
        if field is None or item.wire_type != _LENGTH_DELIMITED:
            continue
        name = f"{prefix}{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            try:
                item.data.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"{name}: not valid UTF-8 (byte {exc.start})"
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            found = _bad_utf8(field.message_type, item.data, f"{name}.")
            if found:
                return found
    return None


def _told(method: str, on_refused: OnRefused | None) -> Callable[[Any, InvalidArgument], None]:
    def tell(request: Any, error: InvalidArgument) -> None:
        if on_refused is not None:
            on_refused(method, request, error)

    return tell


def _check(request: object) -> None:
    if isinstance(request, Unparsable):
        raise InvalidArgument(request.reason)
    if isinstance(request, Message):
        check_bounds(request)


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        _check(request)
        yield request


async def _parsed(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Unparsable):
            raise InvalidArgument(request.reason)
        yield request


_Tell: TypeAlias = Callable[[Any, InvalidArgument], None]


def _checked_one(request: Any, tell: _Tell) -> None:
    try:
        _check(request)
    except InvalidArgument as exc:
        tell(request, exc)
        raise


def _unary_unary(behaviour: _Behaviour, tell: _Tell) -> _Behaviour:
    async def guarded(request: Any, context: _Context) -> Any:
        _checked_one(request, tell)
        return await behaviour(request, context)

    return guarded


def _unary_stream(behaviour: _Behaviour, tell: _Tell) -> _Behaviour:
    async def guarded(request: Any, context: _Context) -> AsyncIterator[Any]:
        _checked_one(request, tell)
        async for response in behaviour(request, context):
            yield response

    return guarded


def _stream_unary(behaviour: _Behaviour, tell: _Tell) -> _Behaviour:
    async def guarded(requests: AsyncIterator[Any], context: _Context) -> Any:
        return await behaviour(_checked(requests), context)

    return guarded


def _stream_stream(behaviour: _Behaviour, tell: _Tell) -> _Behaviour:
    async def guarded(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
        async for response in behaviour(_checked(requests), context):
            yield response

    return guarded


def _parsed_stream_stream(behaviour: _Behaviour, tell: _Tell) -> _Behaviour:
    async def guarded(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
        async for response in behaviour(_parsed(requests), context):
            yield response

    return guarded


_Shape = tuple[bool, bool]
_FACTORIES: dict[_Shape, Callable[..., grpc.RpcMethodHandler[Any, Any]]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}
# A stream's messages are not reported to `on_refused`: the gateway takes no new job on a
# client stream.
_GUARDS: dict[_Shape, Callable[[_Behaviour, _Tell], _Behaviour]] = {
    (False, False): _unary_unary,
    (False, True): _unary_stream,
    (True, False): _stream_unary,
    (True, True): _stream_stream,
}
