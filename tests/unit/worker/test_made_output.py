"""A pipeline call's output is read by the name its class gives it: Kandinsky 5's image
pipelines return `image`, the others `images`, `frames` or `audios`."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from diffusers.utils import BaseOutput

from mediamesh.worker.models.pipeline_host import made_output


@dataclass
class ImagesOutput(BaseOutput):
    images: list[str]


@dataclass
class ImageOutput(BaseOutput):
    image: list[str]


@dataclass
class DepthOutput(BaseOutput):
    rgb: list[str]


def test_each_name_an_output_class_gives_is_read() -> None:
    assert made_output(ImagesOutput(images=["a"]), "image") == ["a"]
    assert made_output(ImageOutput(image=["b"]), "image") == ["b"]


def test_an_output_without_the_modalitys_field_fails_by_its_name() -> None:
    # The registry refuses such pipelines at load (pipeline_fields.output_fields).
    with pytest.raises(AttributeError, match="images"):
        made_output(DepthOutput(rgb=["c"]), "image")
