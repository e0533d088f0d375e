"""An S3 endpoint for tests: moto's server mode, an S3 *emulator* (not AWS), started on 127.0.0.1 on a free port.

Clients reach it the way they reach any S3-compatible store (MinIO, Ceph): ``AWS_ENDPOINT_URL`` (pyarrow, boto3, so
Ray's storage and MLflow's artifacts) and keys in ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; :meth:`S3.env`
returns those variables.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.postgres import free_port

__all__ = ["S3", "s3_server", "s3_unavailable_reason"]


def s3_unavailable_reason() -> str | None:
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as e:
        return f"moto's S3 emulator or boto3 is missing ({e.name}; pip install -e '.[dev]')"
    return None


class S3:
    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self) -> Any:
        import boto3

        env = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@contextlib.contextmanager
def s3_server(log_dir: Path) -> Iterator[S3]:
    s3 = S3(free_port(), Path(log_dir) / "moto.log")
    try:
        s3.start()
        yield s3
    finally:
        s3.stop()
