"""A real S3-protocol server on loopback for tests: moto in server mode, in a thread.

The product talks to it with its own S3 client (obstore) over HTTP, exactly as to any
S3-compatible service; boto3 (moto's own dependency) only creates the bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import boto3
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
# moto accepts any credentials; these stand in for the standard AWS variables.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "mediamesh-test", "AWS_SECRET_ACCESS_KEY": "mediamesh-secret"}


@dataclass(frozen=True)
class S3Server:
    """Where the server listens and the bucket made for the test."""

    endpoint: str
    bucket: str

    def artifact_settings(self, prefix: str = "results") -> dict[str, object]:
        """The `scheduler.artifacts` section that stores results in this bucket."""
        return {
            "backend": "s3",
            "bucket": self.bucket,
            "prefix": prefix,
            "endpoint_url": self.endpoint,
            "region": REGION,
            "url_expiry_s": 600,
        }

    def object_keys(self) -> list[str]:
        """Every key in the bucket (what the product wrote)."""
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        listing = client.list_objects_v2(Bucket=self.bucket)
        return sorted(item["Key"] for item in listing.get("Contents", []))


@contextmanager
def s3_server(bucket: str = "mediamesh-results") -> Iterator[S3Server]:
    """Start moto's S3 server on a free loopback port with `bucket` made; stop it after."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket=bucket)
        yield S3Server(endpoint, bucket)
    finally:
        server.stop()
