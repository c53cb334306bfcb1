# SPDX-License-Identifier: Apache-2.0
"""What the loopback store servers of the tests share (tests/s3_server.py,
tests/azurite_server.py, tests/gcs_server.py), and ``memory://`` dressed as one of them.

Every server object answers the same questions, so one test body runs over all stores:
``scheme``, ``storage_options`` (pylance's key names), ``uri(name)`` (a fresh dataset URI),
``keys(prefix)`` (the object names the server holds, listed with obstore directly, not
through lance-gpu) and ``for_pylance(uri)`` (a ``(uri, storage_options)`` pylance can open:
the URI itself for a server; for ``memory://``, which lives in this process's obstore and
which pylance cannot see, a local copy of the dataset's objects).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa


def mixed_table(start: int, n: int) -> pa.Table:
    """Rows ``start .. start+n`` of the store tests' table: ints, strings with nulls, floats,
    bools, a list and a struct column."""
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids),
            "s": pa.array([f"row-{i}" if i % 7 else None for i in ids]),
            "x": pa.array(ids * 0.25, pa.float32()),
            "flag": pa.array(ids % 3 == 0),
            "v": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int32())),
            "st": pa.array([{"a": int(i), "b": f"b{i}"} for i in ids]),
        }
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen, log_path: str, what: str, timeout: float = 60) -> None:
    """Block until ``proc`` accepts connections on ``port``; raise RuntimeError (with the
    tail of its log) if it exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                tail = Path(log_path).read_text(errors="replace")[-500:] if os.path.exists(log_path) else ""
                raise RuntimeError(f"{what} did not start: {tail}") from None
            time.sleep(0.05)


def stop_child(proc: subprocess.Popen | None, workdir: str = "") -> None:
    """Terminate a server's child process (kill it after 10 s) and remove its work folder."""
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


class StoreServer:
    """The questions every test store answers (see the module docstring)."""

    scheme: str = ""
    bucket: str = ""

    @property
    def storage_options(self) -> dict[str, str]:
        raise NotImplementedError

    def uri(self, name: str = "") -> str:
        """A fresh dataset URI in the bucket."""
        return f"{self.scheme}://{self.bucket}/{name or 'ds'}-{uuid.uuid4().hex[:10]}"

    def raw_store(self) -> Any:
        """An obstore store on the bucket, built by obstore itself."""
        from obstore.store import from_url

        from lance_gpu.io.resolve import split_options

        config, client, retry = split_options(self.storage_options)
        kwargs: dict[str, Any] = {"client_options": client} if client else {}
        if config:
            kwargs["config"] = config
        if retry:
            kwargs["retry_config"] = retry
        return from_url(f"{self.scheme}://{self.bucket}", **kwargs)

    def keys(self, prefix: str) -> list[str]:
        """Every object name under ``prefix`` (``prefix`` itself a folder)."""
        out: list[str] = []
        for batch in self.raw_store().list(prefix.strip("/") + "/"):
            out.extend(meta["path"] for meta in batch)
        return sorted(out)

    def for_pylance(self, uri: str) -> tuple[str, dict[str, str]]:
        """``(uri, storage_options)`` under which pylance opens the dataset at ``uri``."""
        return uri, self.storage_options


@dataclass
class MemoryStoreServer(StoreServer):
    """``memory://``: one obstore MemoryStore per name in this process (no server).  pylance
    reads a dataset through a copy of its objects in ``workdir``."""

    workdir: str = ""
    scheme: str = "memory"
    bucket: str = "store-tests"

    @property
    def storage_options(self) -> dict[str, str]:
        return {}

    def raw_store(self) -> Any:
        from lance_gpu.io import resolve

        return resolve(f"memory://{self.bucket}/x")[0].store  # type: ignore[attr-defined]

    def for_pylance(self, uri: str) -> tuple[str, dict[str, str]]:
        import obstore

        root = uri.split("/", 3)[3]
        local = Path(self.workdir) / f"{root}-{uuid.uuid4().hex[:6]}"
        store = self.raw_store()
        for key in self.keys(root):
            dest = local / key[len(root) + 1 :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(bytes(obstore.get(store, key).bytes()))
        return str(local), {}

    def stop(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_memory_store() -> MemoryStoreServer:
    return MemoryStoreServer(tempfile.mkdtemp(prefix="memory-store-"))
