"""gateway.http.public_url: the start of the HTTP face's absolute links, checked at load."""

from __future__ import annotations

import pytest

from mediamesh.common.settings import ConfigError, GatewayHttpSettings, load_mesh_config


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("https://mesh.example.com", "https://mesh.example.com"),
        ("https://mesh.example.com/", "https://mesh.example.com"),
        ("http://10.0.0.5:8080/mesh/", "http://10.0.0.5:8080/mesh"),
        (None, None),
    ],
)
def test_a_base_url_is_kept_without_its_trailing_slash(given: str | None, kept: str | None):
    assert GatewayHttpSettings(public_url=given).public_url == kept


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("mesh.example.com", "is not an http:// or https:// URL with a host"),
        ("ftp://mesh.example.com", "is not an http:// or https:// URL with a host"),
        ("https://", "is not an http:// or https:// URL with a host"),
        ("https://mesh.example.com/?x=1", "has a query or fragment"),
        ("https://mesh.example.com/#top", "has a query or fragment"),
        ("https://user:secret@mesh.example.com", "has credentials"),
        ("https://mesh.example.com:99999", "is not a URL"),
    ],
)
def test_a_url_links_cannot_start_with_is_refused_at_load_naming_the_setting(
    given: str, words: str
):
    environ = {"MEDIAMESH_GATEWAY__HTTP__PUBLIC_URL": given}
    with pytest.raises(ConfigError) as caught:
        load_mesh_config(None, environ=environ)
    message = str(caught.value)
    assert "public_url" in message.lower() and words in message, message
