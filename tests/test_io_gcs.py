# SPDX-License-Identifier: Apache-2.0
"""GCS-specific cases on fake-gcs-server (loopback, tests/gcs_server.py): the forms of
pylance's ``google_*`` storage options, the server's own generation precondition, an
unreachable endpoint.  The round trips every store shares are in tests/test_io_stores.py."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import lance
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import StorageConnectionError
from lance_gpu.io import ObstoreStore, resolve

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")


def _options_forms(gcs_server) -> dict[str, dict[str, str]]:
    key = gcs_server.service_account_json(gcs_server.endpoint)
    return {
        "path": {"google_service_account": gcs_server.service_account, "allow_http": "true"},
        "key": {"google_service_account_key": key, "google_allow_http": "true"},
        "upper": {"GOOGLE_SERVICE_ACCOUNT_PATH": gcs_server.service_account, "allow_http": "true"},
    }


@pytest.mark.parametrize("form", ["path", "key", "upper"])
def test_google_storage_options(gcs_server, form: str) -> None:
    """pylance's key names for a service account (a file, the JSON key itself, upper case)
    reach the same server for pylance and for us; ``gcs://`` is ``gs://``."""
    opts = _options_forms(gcs_server)[form]
    uri = gcs_server.uri(f"opts-{form}")
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), uri, storage_options=opts)
    ours = lance_gpu.dataset(uri, storage_options=opts)
    assert isinstance(ours.store, ObstoreStore) and ours.uri == uri
    assert ours.to_table().equals(lance.dataset(uri, storage_options=opts).to_table())
    lance_gpu.write_dataset(pa.table({"id": [4]}), "gcs://" + uri[len("gs://"):], mode="append", storage_options=opts)
    assert lance.dataset(uri, storage_options=opts).to_table()["id"].to_pylist() == [1, 2, 3, 4]


def test_environment_variable(gcs_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """``GOOGLE_SERVICE_ACCOUNT`` from the environment stands in for the option."""
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", gcs_server.service_account)
    uri = gcs_server.uri("env")
    lance_gpu.write_dataset(pa.table({"id": [5, 6]}), uri, storage_options={"allow_http": "true"})
    assert lance.dataset(uri, storage_options={"allow_http": "true"}).to_table()["id"].to_pylist() == [5, 6]


def test_server_enforces_the_generation_precondition(gcs_server) -> None:
    """The refusal of a second create comes from fake-gcs-server itself (412 on
    ``ifGenerationMatch=0``), not from the test front: a JSON-API upload straight to it."""
    store, root = resolve(gcs_server.uri("gen"), gcs_server.storage_options)
    store.put_if_absent(f"{root}/m", b"first")
    backend = f"http://{gcs_server.front.backend_host}"
    body = (
        b'--b\r\nContent-Type: application/json\r\n\r\n{"name": "' + f"{root}/m".encode()
        + b'"}\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\nsecond\r\n--b--\r\n'
    )
    req = urllib.request.Request(
        f"{backend}/upload/storage/v1/b/{gcs_server.bucket}/o?uploadType=multipart&ifGenerationMatch=0",
        data=body, method="POST", headers={"Content-Type": "multipart/related; boundary=b"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 412
    with urllib.request.urlopen(f"{backend}/download/storage/v1/b/{gcs_server.bucket}/o/{root}%2Fm?alt=media") as resp:
        assert resp.read() == b"first"


def test_unreachable_endpoint(gcs_server, tmp_path) -> None:
    dead = tmp_path / "dead.json"
    dead.write_text(gcs_server.service_account_json("http://127.0.0.1:9"))
    opts = {"google_service_account": str(dead), "allow_http": "true", "max_retries": "1", "retry_timeout": "2",
            "connect_timeout": "1s"}
    uri = f"gs://{gcs_server.bucket}/ds"
    t0 = time.monotonic()
    with pytest.raises(StorageConnectionError) as info:
        lance_gpu.dataset(uri, storage_options=opts)
    assert time.monotonic() - t0 < 30  # retries are bounded
    assert isinstance(info.value, OSError) and uri in str(info.value)
