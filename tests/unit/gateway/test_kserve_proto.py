"""protos/inference is wire-compatible with the protocol tritonclient was generated from.

tritonclient's generated module cannot be imported here: it registers the same `inference.*`
names in protobuf's default pool and the two would collide. Its serialized descriptor is read
from the source file instead, and every message, field and method we declare must match it.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from google.protobuf import descriptor_pb2

from mediamesh.common.generated.inference import grpc_service_pb2

ROOT = Path(__file__).resolve().parents[3]


def _published(module: str = "service_pb2") -> descriptor_pb2.FileDescriptorProto:
    spec = importlib.util.find_spec("tritonclient")
    # tritonclient is a dev dependency: its absence is a broken install, not a reason to skip.
    assert spec is not None and spec.submodule_search_locations, "tritonclient is not installed"
    source = Path(next(iter(spec.submodule_search_locations))) / "grpc" / f"{module}.py"
    for node in ast.walk(ast.parse(source.read_text())):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "AddSerializedFile"
            and isinstance(node.args[0], ast.Constant)
        ):
            return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
    raise AssertionError(f"no serialized descriptor in {source}")


def _ours() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    grpc_service_pb2.DESCRIPTOR.CopyToProto(proto)
    return proto


def _messages(messages, prefix: str = "") -> dict[str, descriptor_pb2.DescriptorProto]:
    found = {}
    for message in messages:
        name = f"{prefix}{message.name}"
        found[name] = message
        found.update(_messages(message.nested_type, f"{name}."))
    return found


def _field_shape(field: descriptor_pb2.FieldDescriptorProto) -> tuple:
    return (field.number, field.type, field.label, field.type_name, field.HasField("oneof_index"))


def test_package_and_service_names_are_the_published_ones():
    ours, published = _ours(), _published()
    assert ours.package == published.package == "inference"
    assert [s.name for s in ours.service] == ["GRPCInferenceService"]


def test_every_message_and_field_matches_the_published_protocol():
    ours = _messages(_ours().message_type)
    service = _messages(_published().message_type)
    # Triton's model_config.proto: the gateway declares the fields of a model configuration
    # it sets, each as published, not the scheduling and optimisation ones it never sets.
    config = _messages(_published("model_config_pb2").message_type)
    assert ours, "no messages generated"
    for name, message in ours.items():
        published = service.get(name) or config.get(name)
        assert published is not None, f"{name} is not a published message"
        theirs = {f.name: f for f in published.field}
        for field in message.field:
            assert field.name in theirs, f"{name}.{field.name} is not a published field"
            assert _field_shape(field) == _field_shape(theirs[field.name]), f"{name}.{field.name}"
        if name in service:
            assert len(message.field) == len(theirs), f"{name} lacks published fields"


def _enums(file: descriptor_pb2.FileDescriptorProto) -> dict[str, dict[str, int]]:
    found = {e.name: {v.name: v.number for v in e.value} for e in file.enum_type}
    for name, message in _messages(file.message_type).items():
        found.update(
            {f"{name}.{e.name}": {v.name: v.number for v in e.value} for e in message.enum_type}
        )
    return found


def test_every_enum_value_matches_the_published_protocol():
    ours, published = _enums(_ours()), _enums(_published("model_config_pb2"))
    assert set(ours) == {"DataType", "ModelInput.Format"}
    for name, values in ours.items():
        assert values == published[name], name


def test_every_method_matches_the_published_protocol():
    (ours,) = _ours().service
    theirs = {m.name: m for m in _published().service[0].method}
    served = {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata"}
    served |= {"ModelConfig", "ModelStatistics", "RepositoryIndex"}
    assert {m.name for m in ours.method} == served | {"ModelInfer", "ModelStreamInfer"}
    for method in ours.method:
        published = theirs[method.name]
        assert (method.input_type, method.output_type) == (
            published.input_type,
            published.output_type,
        )
        assert (method.client_streaming, method.server_streaming) == (
            published.client_streaming,
            published.server_streaming,
        )


def test_every_rpc_message_and_field_is_commented():
    source = (ROOT / "protos" / "inference" / "grpc_service.proto").read_text().splitlines()
    for index, line in enumerate(source):
        text = line.strip()
        declares = text.startswith(("rpc ", "message ", "oneof ")) or (
            text.endswith(";") and "=" in text and not text.startswith(("syntax", "//"))
        )
        if declares:
            assert source[index - 1].strip().startswith("//"), f"line {index + 1}: {text}"
