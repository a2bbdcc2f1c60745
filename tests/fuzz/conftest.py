"""The fuzz tier's settings and meshes.

Runs are repeatable by default: the `fuzz-ci` hypothesis profile is derandomized, keeps no
example database, and sizes each test so the whole tier takes about a minute on two cores.
To fuzz longer and with fresh randomness, set MEDIAMESH_FUZZ_PROFILE=fuzz-long (twenty times
the examples, and failures shrunk), or MEDIAMESH_FUZZ_SCALE to any factor of the examples.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, Phase, settings

from mediamesh.common.registry import Registry, load_registry
from tests.service.conftest import InProcessMesh, start_mesh, stop_mesh
from tests.service.gateway.conftest import NO_SPOT_WAIT, keyed

PROFILE_ENV, SCALE_ENV = "MEDIAMESH_FUZZ_PROFILE", "MEDIAMESH_FUZZ_SCALE"
INTERNAL_TOKEN = "fuzz-internal-token"
# Generous budgets: the fuzzer calls far faster than a tenant is allowed to, and a tier that
# only ever hears RESOURCE_EXHAUSTED would test the rate limiter and nothing else.
UNLIMITED = {
    "requests_per_second": 100_000,
    "burst": 100_000,
    "reads_per_second": 100_000,
    "read_burst": 100_000,
}

# Each example is a real call over loopback: slow next to a pure function, by design.
_SLOW_IS_EXPECTED = [HealthCheck.too_slow, HealthCheck.data_too_large]
# No shrinking in CI: a hang costs a call timeout per shrink step, which can add up to many
# minutes; the failing example is reported as generated, and the same on every run. Run the
# fuzz-long profile to shrink it.
settings.register_profile(
    "fuzz-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=_SLOW_IS_EXPECTED,
)
settings.register_profile(
    "fuzz-long",
    derandomize=False,
    deadline=None,
    print_blob=True,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=_SLOW_IS_EXPECTED,
)
_DEFAULT_SCALE = {"fuzz-ci": 1.0, "fuzz-long": 20.0}


def fuzz_settings(examples: int) -> settings:
    """The active profile with `examples` examples, scaled (at least one)."""
    name = os.environ.get(PROFILE_ENV, "fuzz-ci")
    scale = float(os.environ.get(SCALE_ENV, _DEFAULT_SCALE.get(name, 1.0)))
    return settings(settings.get_profile(name), max_examples=max(1, round(examples * scale)))


def echo_registry() -> Registry:
    """The shipped registry's `echo` entry alone: every request the fuzzer gets accepted runs
    in milliseconds, and none waits for a model no worker hosts."""
    return Registry(models=[m for m in load_registry().models if m.name == "echo"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fuzz_mesh(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path
) -> AsyncIterator[InProcessMesh]:
    """One mesh for a module's fuzz tests: API keys, an internal token, one echo worker."""
    mesh = await start_mesh(
        tmp_path_factory.mktemp("fuzz"),
        models_dir,
        [["echo"]],
        gateway=keyed(a=UNLIMITED, b=UNLIMITED),
        scheduler=NO_SPOT_WAIT,
        token=INTERNAL_TOKEN,
        registry=echo_registry(),
    )
    yield mesh
    await stop_mesh(mesh)
