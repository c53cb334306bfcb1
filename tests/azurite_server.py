# SPDX-License-Identifier: Apache-2.0
"""Azurite, the official Azure Storage emulator, on loopback for tests: its blob service in
a child process with one container.  obstore and pylance talk HTTP to it with the same
pylance-style ``storage_options`` (account name + key and an ``azure_storage_endpoint``
that carries the account in its path, as Azurite addresses accounts).

Azurite is an npm package: :func:`azurite_binary` installs the pinned version with
``npm install`` into a cache directory (``$LANCE_GPU_TEST_CACHE`` or
``~/.cache/lance-gpu-tests``) the first time, and answers ``None`` (the tests skip, saying
why) where npm is missing or the install fails.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import os
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from stores import StoreServer, free_port, stop_child, wait_listening

AZURITE_VERSION = "3.35.0"
#: Azurite's well-known development account (public, documented by Microsoft).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "lance-gpu-tests"


def _cache_dir() -> Path:
    root = os.environ.get("LANCE_GPU_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lance-gpu-tests")
    return Path(root) / f"azurite-{AZURITE_VERSION}"


def azurite_binary() -> tuple[str | None, str]:
    """``(path of azurite-blob, "")`` once installed, else ``(None, why not)``."""
    prefix = _cache_dir()
    binary = prefix / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return str(binary), ""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return None, "Azurite needs node and npm (npm install azurite), which this machine lacks"
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"azurite@{AZURITE_VERSION}"],
            check=True, capture_output=True, timeout=600,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return None, f"npm install azurite@{AZURITE_VERSION} failed: {exc} {detail.decode(errors='replace')[-300:]}"
    if not binary.exists():
        return None, f"npm install azurite@{AZURITE_VERSION} left no {binary}"
    return str(binary), ""


def _shared_key_request(endpoint: str, method: str, resource: str, query: dict[str, str]) -> int:
    """One signed Blob service request without a body (Shared Key authorization: the
    canonical string is the verb, eleven empty standard headers, the ``x-ms-*`` headers and
    ``/{account}{path}`` with the query parameters; Azurite's URL path starts with the
    account, hence it appears twice)."""
    date = dt.datetime.now(dt.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    headers = {"x-ms-date": date, "x-ms-version": "2021-08-06"}
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    canonical_resource = f"/{ACCOUNT}/{ACCOUNT}/{resource}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
    to_sign = method + "\n" * 12 + canonical_headers + canonical_resource
    signature = base64.b64encode(hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()).decode()
    url = f"{endpoint}/{ACCOUNT}/{resource}?" + "&".join(f"{k}={v}" for k, v in query.items())
    req = urllib.request.Request(
        url, method=method, headers={**headers, "Authorization": f"SharedKey {ACCOUNT}:{signature}", "Content-Length": "0"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


@dataclass
class AzuriteServer(StoreServer):
    endpoint: str
    bucket: str = CONTAINER  # the container
    proc: subprocess.Popen | None = field(default=None, repr=False)
    workdir: str = ""
    scheme: str = "az"

    @property
    def storage_options(self) -> dict[str, str]:
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": KEY,
            "azure_storage_endpoint": f"{self.endpoint}/{ACCOUNT}",
            "allow_http": "true",
        }

    def stop(self) -> None:
        stop_child(self.proc, self.workdir)


def start_azurite(binary: str) -> AzuriteServer:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="azurite-")
    log = open(os.path.join(workdir, "azurite.log"), "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", workdir,
         "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    server = AzuriteServer(f"http://127.0.0.1:{port}", CONTAINER, proc, workdir)
    try:
        wait_listening(port, proc, os.path.join(workdir, "azurite.log"), "Azurite")
    except RuntimeError:
        server.stop()
        raise
    _shared_key_request(server.endpoint, "PUT", CONTAINER, {"restype": "container"})
    return server
