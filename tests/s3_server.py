# SPDX-License-Identifier: Apache-2.0
"""A real S3-compatible server on loopback for tests and benchmarks: moto's
``ThreadedMotoServer`` on 127.0.0.1 (a free port) with one bucket.  obstore and pylance talk
HTTP to it with the same pylance-style ``storage_options``."""

from __future__ import annotations

from dataclasses import dataclass, field

from stores import StoreServer, free_port, stop_child, wait_listening

BUCKET = "lance-gpu-tests"


@dataclass
class S3Server(StoreServer):
    endpoint: str
    bucket: str = BUCKET
    server: object = field(default=None, repr=False)
    scheme: str = "s3"

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "aws_endpoint": self.endpoint,
            "allow_http": "true",
        }

    def age(self, key: str, days: float) -> None:
        """Set the ``Last-Modified`` the server reports for ``key`` to ``days`` ago: the
        server runs in this process, so its object is reached directly (S3 itself has no
        call to change it; cleanup's age rules need old files)."""
        import datetime as dt

        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        obj = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[self.bucket].keys.get(key)
        if obj is None:
            raise KeyError(key)
        obj.last_modified = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=days)

    def stop(self) -> None:
        self.server.stop()  # type: ignore[attr-defined]


def start_s3_server() -> S3Server:
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    ).create_bucket(Bucket=BUCKET)
    return S3Server(endpoint, BUCKET, server)


def start_auth_s3_server() -> tuple[object, str]:
    """A SEPARATE moto server, in its own process, that enforces authentication
    (``INITIAL_NO_AUTH_ACTION_COUNT=0``: every request must carry credentials known to its
    IAM, so any key the tests use is rejected with 403).  Returns (process, endpoint); the
    caller terminates the process."""
    import os
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc, "", "the authenticating moto server", timeout=30)
    except RuntimeError:
        stop_child(proc)
        raise
    return proc, f"http://127.0.0.1:{port}"
