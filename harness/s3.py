"""An S3 endpoint for tests: moto's server mode, an S3 *emulator* (not AWS), started on 127.0.0.1 on a free port.

Clients reach it the way they reach any S3-compatible store (MinIO, Ceph): ``AWS_ENDPOINT_URL`` (pyarrow, boto3, so
Ray's storage and MLflow's artifacts) and keys in ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; :meth:`S3.env`
returns those variables.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from study.tracking.server import free_port

__all__ = ["S3", "s3_server", "s3_unavailable_reason"]


def s3_unavailable_reason() -> str | None:
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as e:
        return f"moto's S3 emulator or boto3 is missing ({e.name}; pip install -e '.[dev]')"
    return None


class S3:
    """``auth_after``: moto authenticates every request after that many (IAM users and policies then apply; the first
    ones create what the test needs, e.g. :meth:`read_only_user`)."""

    def __init__(self, port: int, log: Path, auth_after: int | None = None) -> None:
        self.port, self.log, self.auth_after = port, log, auth_after
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
        env = dict(os.environ)
        if self.auth_after is not None:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self.auth_after)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:  # a TCP connect, not a request: with auth_after, requests are counted
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
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

        return boto3.client("s3", **self._client_kwargs())

    def read_only_user(self, bucket: str) -> dict[str, str]:
        """An IAM user that may read ``bucket`` but not write it (3 requests); returns its credentials' variables."""
        import boto3

        iam = boto3.client("iam", **{k: v for k, v in self._client_kwargs().items()})
        iam.create_user(UserName="reader")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": f"arn:aws:s3:::{bucket}*"}]}  # fmt: skip
        iam.put_user_policy(UserName="reader", PolicyName="read-only", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        return {**self.env(), "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}

    def _client_kwargs(self) -> dict[str, str]:
        env = self.env()
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
            "region_name": env["AWS_DEFAULT_REGION"],
        }

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@contextlib.contextmanager
def s3_server(log_dir: Path, auth_after: int | None = None) -> Iterator[S3]:
    s3 = S3(free_port(), Path(log_dir) / "moto.log", auth_after)
    try:
        s3.start()
        yield s3
    finally:
        s3.stop()
