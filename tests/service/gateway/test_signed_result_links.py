"""An OpenAI `url` image opens without a key on a gateway with keys, for its job only, until
it expires.

The openai client's users open such a URL as it is (a browser, `requests.get`); with API
keys on and results on local disk the gateway gave its key-protected result path, which
answered 401.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from mediamesh.common.errors import PermissionDenied
from mediamesh.gateway.http.result_links import ResultLinks
from tests.service.conftest import InProcessMesh
from tests.service.gateway.http_support import (
    base_url,
    http_mesh,  # noqa: F401 (a fixture)
    openai_client,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")
PNG = b"\x89PNG\r\n\x1a\n"


async def _url_image(mesh: InProcessMesh) -> str:
    client = openai_client(mesh)
    answer = await client.images.generate(
        model="flux-tiny", prompt="a red fox", size="64x64", response_format="url",
        extra_body={"steps": 1},
    )  # fmt: skip
    await client.close()
    return (answer.data or [])[0].url or ""


async def test_a_url_image_opens_without_a_key(http_mesh: InProcessMesh):  # noqa: F811
    url = await _url_image(http_mesh)
    async with httpx.AsyncClient(timeout=30) as http:
        opened = await http.get(url)
        unsigned = await http.get(url.split("?", 1)[0])
    assert opened.status_code == 200, opened.text
    assert opened.content.startswith(PNG)
    assert unsigned.status_code == 401  # the path alone still needs the key


async def test_a_link_opens_only_its_own_job(http_mesh: InProcessMesh):  # noqa: F811
    first, second = await _url_image(http_mesh), await _url_image(http_mesh)
    other_job = urlsplit(second).path
    query = urlsplit(first).query
    async with httpx.AsyncClient(timeout=30) as http:
        swapped = await http.get(f"{base_url(http_mesh)}{other_job}?{query}")
        fields = {k: v[0] for k, v in parse_qs(query).items()}
        as_other_tenant = await http.get(
            first.split("?", 1)[0] + "?" + urlencode({**fields, "tenant": "b"})
        )
        partial = await http.get(first.split("?", 1)[0] + f"?signature={fields['signature']}")
    assert swapped.status_code == 403 and "signature" in swapped.json()["message"]
    assert as_other_tenant.status_code == 403
    assert partial.status_code == 400 and "tenant" in partial.json()["message"]


async def test_a_link_expires() -> None:
    now = [1000.0]
    links = ResultLinks(b"k" * 32, ttl_s=60, clock=lambda: now[0])
    fields = {k: v[0] for k, v in parse_qs(links.query("job-1", "a")).items()}
    links.check("job-1", "a", fields["expires"], fields["signature"])
    now[0] += 61
    with pytest.raises(PermissionDenied, match="expires: this link expired"):
        links.check("job-1", "a", fields["expires"], fields["signature"])
