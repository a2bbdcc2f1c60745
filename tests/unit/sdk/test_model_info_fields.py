"""ModelInfo carries every field ListModels answers, the adapters with their default scale
among them, and ModelLimits every limit."""

from __future__ import annotations

from dataclasses import fields

from mediamesh.common.generated.v1 import common_pb2
from mediamesh.sdk import AdapterInfo, ModelInfo, ModelLimits
from mediamesh.sdk.api.convert import model_info


def test_every_proto_field_has_its_sdk_field() -> None:
    proto_fields = {f.name for f in common_pb2.ModelInfo.DESCRIPTOR.fields}
    assert proto_fields == {f.name for f in fields(ModelInfo)}
    limits = {f.name for f in common_pb2.ModelLimits.DESCRIPTOR.fields}
    assert limits == {f.name for f in fields(ModelLimits)}
    assert {f.name for f in common_pb2.AdapterInfo.DESCRIPTOR.fields} == {
        f.name for f in fields(AdapterInfo)
    }


def test_adapters_limits_and_warmup_come_through() -> None:
    message = common_pb2.ModelInfo(
        name="flux-tiny",
        limits=common_pb2.ModelLimits(max_prompt_chars=2000, max_steps=50),
        adapters=[
            common_pb2.AdapterInfo(name="ghibli", default_scale=0.8),
            common_pb2.AdapterInfo(name="sketch", default_scale=1.0),
        ],
        warmup="cold",
    )
    info = model_info(message)
    assert info.adapters == (AdapterInfo("ghibli", 0.8), AdapterInfo("sketch", 1.0))
    assert (info.limits.max_prompt_chars, info.limits.max_steps) == (2000, 50)
    assert info.warmup == "cold"
    assert model_info(common_pb2.ModelInfo(name="echo")).adapters == ()
