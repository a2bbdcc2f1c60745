"""Package discovery that pyproject.toml cannot express on its own.

The generated protobuf modules import each other by their proto package
(`from mediamesh.v1 import common_pb2`), so they are installed as the top-level
packages `mediamesh` and `inference` while living in one place,
services/common/generated/.
"""

from setuptools import find_packages, setup

GENERATED = "services/common/generated"
generated_packages = find_packages(where=GENERATED)

setup(
    packages=[
        *find_packages(include=["services*", "bench*"], exclude=["services.common.generated*"]),
        *generated_packages,
    ],
    package_dir={name: f"{GENERATED}/{name.replace('.', '/')}" for name in generated_packages},
)
