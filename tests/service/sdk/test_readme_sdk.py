"""The README's SDK example, run verbatim as a script against a running mesh."""

from __future__ import annotations

import asyncio
import io
import re
import sys
from pathlib import Path

from PIL import Image

from tests.conftest import ROOT

MARKER = "<!-- sdk-example -->"
README_ADDRESS = "127.0.0.1:50051"


def sdk_example() -> str:
    """The fenced Python block right below the marker comment."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count(MARKER) == 1, f"README.md must mark the SDK example with {MARKER}"
    found = re.search(re.escape(MARKER) + r"\s*```python\n(.*?)```", readme, re.DOTALL)
    assert found, f"a ```python block must follow {MARKER}"
    return found.group(1)


async def test_the_readme_sdk_example_runs(image_mesh, tmp_path: Path):
    code = sdk_example()
    # The example talks to `make run`'s gateway; this mesh listens on a free port instead.
    assert README_ADDRESS in code
    code = code.replace(README_ADDRESS, f"127.0.0.1:{image_mesh.gateway.port}")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert "step 4/4" in stdout.decode()
    image = Image.open(io.BytesIO((tmp_path / "fox.png").read_bytes()))
    assert image.format == "PNG"
