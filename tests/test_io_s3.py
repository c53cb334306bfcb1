# SPDX-License-Identifier: Apache-2.0
"""S3-specific cases on a real S3-compatible server (moto on loopback): processes racing,
a killed writer, refused credentials, request counts, injected faults, cleanup ages.  The
round trips every store shares are in tests/test_io_stores.py."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import textwrap
import time

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from stores import mixed_table as _tbl

import lance_gpu
from lance_gpu.errors import (
    StorageConnectionError,
    StorageError,
    StoragePermissionError,
    StorageTimeoutError,
)
from lance_gpu.io import FaultInjectingStore, resolve

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")


# Appenders racing: one interpreter imports lance-gpu and writes a local scratch dataset once
# (its kernels load once; lance-gpu's pools reset in a forked child), then forks argv[3]
# appenders at once, each appending two tables; prints their exit statuses.
_APPENDERS = textwrap.dedent(
    """
    import json, os, sys, tempfile, traceback, warnings
    warnings.simplefilter("ignore")
    import numpy as np, pyarrow as pa
    import lance_gpu
    uri, opts, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    with tempfile.TemporaryDirectory() as scratch:
        lance_gpu.write_dataset(pa.table({"id": pa.array(np.arange(10))}), os.path.join(scratch, "warm.lance"))
    pids = []
    for k in range(n):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for j in range(2):
                    start = 1000 * k + 100 * j
                    tbl = pa.table({"id": pa.array(np.arange(start, start + 10))})
                    lance_gpu.write_dataset(tbl, uri, mode="append", storage_options=opts)
                code = 0
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(code)
        pids.append(pid)
    print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]))
    """
)


def test_concurrent_appends_each_land_once(s3_server) -> None:
    import json

    opts = s3_server.storage_options
    uri = s3_server.uri("conc")
    lance_gpu.write_dataset(pa.table({"id": pa.array(np.arange(-10, 0))}), uri, storage_options=opts)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _APPENDERS, uri, json.dumps(opts), "4"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 0, 0, 0], proc.stderr[-3000:]
    expected = sorted([*range(-10, 0), *(1000 * k + 100 * j + i for k in range(4) for j in range(2) for i in range(10))])
    ref = lance.dataset(uri, storage_options=opts)
    assert ref.version == 9
    assert sorted(ref.to_table()["id"].to_pylist()) == expected
    assert sorted(lance_gpu.dataset(uri, storage_options=opts).to_table()["id"].to_pylist()) == expected


_KILLED = textwrap.dedent(
    """
    import json, os, signal, sys, warnings
    warnings.simplefilter("ignore")
    import pyarrow as pa
    import lance_gpu
    from lance_gpu.io.remote import ObstoreStore
    ObstoreStore.put_if_absent = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    lance_gpu.write_dataset(pa.table({"id": [7, 8, 9]}), sys.argv[1], mode="append", storage_options=json.loads(sys.argv[2]))
    """
)


def test_writer_killed_before_manifest_leaves_previous_version(s3_server) -> None:
    import json

    opts = s3_server.storage_options
    uri = s3_server.uri("killed")
    lance_gpu.write_dataset(pa.table({"id": [1, 2, 3]}), uri, storage_options=opts)
    proc = subprocess.run([sys.executable, "-c", _KILLED, uri, json.dumps(opts)], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    prefix = uri.split("/", 3)[3]
    assert any("/data/" in k for k in s3_server.keys(prefix)) and len([k for k in s3_server.keys(prefix) if "/data/" in k]) == 2
    assert lance.dataset(uri, storage_options=opts).version == 1
    ours = lance_gpu.dataset(uri, storage_options=opts)
    assert ours.version == 1 and ours.to_table()["id"].to_pylist() == [1, 2, 3]
    lance_gpu.write_dataset(pa.table({"id": [4]}), uri, mode="append", storage_options=opts)
    assert lance.dataset(uri, storage_options=opts).to_table()["id"].to_pylist() == [1, 2, 3, 4]


def test_bad_credentials_raise_permission_error() -> None:
    """A server that rejects the credentials (403): opening or writing a dataset raises our
    StoragePermissionError (a PermissionError) naming the URI, promptly (no endless retries)."""
    from s3_server import start_auth_s3_server

    proc, endpoint = start_auth_s3_server()
    try:
        bad = {
            "aws_access_key_id": "not-a-key", "aws_secret_access_key": "wrong", "aws_region": "us-east-1",
            "aws_endpoint": endpoint, "allow_http": "true", "max_retries": "2", "retry_timeout": "5",
        }
        uri = "s3://locked-bucket/ds"
        t0 = time.monotonic()
        with pytest.raises(StoragePermissionError) as info:
            lance_gpu.dataset(uri, storage_options=bad)
        assert isinstance(info.value, PermissionError) and uri in str(info.value)
        with pytest.raises(PermissionError, match="s3://locked-bucket/ds"):
            lance_gpu.write_dataset(pa.table({"id": [1]}), uri, storage_options=bad)
        assert time.monotonic() - t0 < 30  # rejected, not retried without end
    finally:
        proc.terminate()  # type: ignore[attr-defined]
        proc.wait(10)  # type: ignore[attr-defined]


def test_unreachable(s3_server) -> None:
    """(A missing dataset, object or bucket: tests/test_io_stores.py, on every store.)"""
    opts = s3_server.storage_options
    dead = {**opts, "aws_endpoint": "http://127.0.0.1:9", "max_retries": "1", "retry_timeout": "2", "connect_timeout": "1s"}
    t0 = time.monotonic()
    with pytest.raises(StorageConnectionError) as info:
        lance_gpu.dataset(f"s3://{s3_server.bucket}/ds", storage_options=dead)
    assert time.monotonic() - t0 < 30  # retries are bounded
    assert isinstance(info.value, OSError) and f"s3://{s3_server.bucket}/ds" in str(info.value)


FAULTS = [("ENOSPC", StorageError), ("EACCES", StoragePermissionError), ("EIO", StorageError),
          ("timeout", StorageTimeoutError), ("throttle", StorageError), ("refused", StorageConnectionError)]


@pytest.mark.parametrize(("fault", "etype"), FAULTS)
@pytest.mark.parametrize("nth", [1, 3])
def test_faults_on_s3_are_clean(s3_server, fault: str, etype: type, nth: int) -> None:
    opts = s3_server.storage_options
    uri = s3_server.uri("fault")
    lance_gpu.write_dataset(_tbl(0, 40), uri, storage_options=opts)
    store, root = resolve(uri, opts)
    before = sorted(s3_server.keys(root))
    faulty = FaultInjectingStore(store, op="put", nth=nth, error=fault)
    with pytest.raises(etype) as info:
        lance_gpu.write_dataset(_tbl(40, 40), root, mode="append", max_rows_per_file=20, store=faulty)
    assert isinstance(info.value, OSError) and uri in str(info.value)
    assert sorted(s3_server.keys(root)) == before  # no data, transaction or staging left
    assert lance.dataset(uri, storage_options=opts).version == 1
    assert lance_gpu.dataset(uri, storage_options=opts).to_table().equals(_tbl(0, 40))
    ds = lance_gpu.dataset(root, store=FaultInjectingStore(store, op="put", nth=1, error=fault, op_filter="_versions/"))
    with pytest.raises(etype):
        ds.delete("id < 5")
    assert sorted(s3_server.keys(root)) == before
    assert lance.dataset(uri, storage_options=opts).count_rows() == 40
    # From the first read after opening on every read fails: a best-effort prefetch may absorb
    # one failure (the read that needs the bytes tries again), a lasting fault must surface typed.
    failing = FaultInjectingStore(store, op="read", nth=10**9, error=fault, times=10**6)
    read = lance_gpu.dataset(root, store=failing)
    failing.nth = failing.calls + 1
    with pytest.raises(etype):
        read.to_table()


def test_read_cudf_and_mutations_take_storage_options(s3_server) -> None:
    import inspect

    from lance_gpu.write import fragments

    assert "storage_options" in inspect.signature(lance_gpu.write_dataset).parameters
    assert "storage_options" in inspect.signature(lance_gpu.dataset).parameters
    assert "storage_options" in inspect.signature(fragments.write_fragments).parameters
    if hasattr(lance_gpu, "read_cudf"):
        assert "storage_options" in inspect.signature(lance_gpu.read_cudf).parameters
    uri = s3_server.uri("frags")
    opts = s3_server.storage_options
    txn = fragments.write_fragments(_tbl(0, 10), uri, mode="create", storage_options=opts, return_transaction=True)
    ds = lance_gpu.LanceDataset.commit(uri, txn.operation, storage_options=opts)
    assert lance.dataset(uri, storage_options=opts).to_table().equals(_tbl(0, 10)) and ds.version == 1
    assert pc.sum(ds.to_table()["id"]).as_py() == 45


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # two weeks by default: no version goes, unreferenced files 7+ days old do
        {"older_than": _dt.timedelta(0)},
        {"retain_versions": 2, "delete_unverified": True},
    ],
)
def test_cleanup_age_rule_matches_pylance(s3_server, kwargs) -> None:
    """The same history written twice by pylance (in order, as real writers do), the same
    unreferenced files added and aged at the server; pylance cleans one, we clean the other:
    the same files go.  The age of an unreferenced file comes from the object's
    Last-Modified, as in pylance.  (Server-side copies are avoided: a copy's fresh
    modification times trigger a rule of pylance's about files newer than its manifests
    that lance-gpu does not reproduce; see lance_gpu/ops/cleanup.py.)"""
    import boto3

    opts = s3_server.storage_options
    client = boto3.client(
        "s3", endpoint_url=s3_server.endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )
    orphans = {
        "data/old-orphan.lance": 8, "data/young-orphan.lance": 6, "data/old-notes.txt": 30,
        "_deletions/9-9-1.arrow": 8, "_transactions/9-old.txn": 10, "_transactions/9-young.txn": 1,
        "_indices/0b1e2f7a-0000-4000-8000-000000000001/page_data.lance": 8,
    }
    uris: dict[str, str] = {}
    for side in ("ref", "ours"):
        uri = uris[side] = s3_server.uri(f"cl-{side}")
        lance.write_dataset(_tbl(0, 40), uri, max_rows_per_file=15, storage_options=opts)
        lance.write_dataset(_tbl(40, 10), uri, mode="overwrite", storage_options=opts)
        lance.write_dataset(_tbl(50, 10), uri, mode="append", storage_options=opts)
        lance.dataset(uri, storage_options=opts).delete("id = 55")
        prefix = uri.split("/", 3)[3]
        for rel, days in orphans.items():
            client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{rel}", Body=b"z" * 13)
            s3_server.age(f"{prefix}/{rel}", days)
    before = {side: _tree(s3_server, uri) for side, uri in uris.items()}
    ref_stats = lance.dataset(uris["ref"], storage_options=opts).cleanup_old_versions(**kwargs)
    our_stats = lance_gpu.dataset(uris["ours"], storage_options=opts).cleanup_old_versions(**kwargs)
    after = {side: _tree(s3_server, uri) for side, uri in uris.items()}
    # the histories' file names differ (uuids): compare what went by kind, and the orphans by name
    for side in uris:
        assert set(after[side]) <= set(before[side])
    gone = {side: sorted(_kind(k) for k in set(before[side]) - set(after[side])) for side in uris}
    assert gone["ours"] == gone["ref"]
    assert {r for r in orphans if r in after["ours"]} == {r for r in orphans if r in after["ref"]}
    assert "data/old-orphan.lance" not in after["ours"] and "data/old-notes.txt" in after["ours"]
    assert ("data/young-orphan.lance" in after["ours"]) != kwargs.get("delete_unverified", False)
    for name in ("old_versions", "data_files_removed", "transaction_files_removed", "deletion_files_removed",
                 "index_files_removed"):
        assert getattr(our_stats, name) == getattr(ref_stats, name), name
    for side, stats in (("ref", ref_stats), ("ours", our_stats)):  # sizes differ a little between the histories
        assert stats.bytes_removed == sum(n for k, n in before[side].items() if k not in after[side]), side
    assert lance_gpu.dataset(uris["ours"], storage_options=opts).to_table().equals(
        lance.dataset(uris["ref"], storage_options=opts).to_table()
    )


def _tree(s3_server, uri: str) -> dict[str, int]:
    """Every object of the dataset at ``uri``: relative key -> size."""
    store, root = resolve(uri, s3_server.storage_options)
    return {m.path[len(root) + 1 :]: m.size for m in store.list(root)}


def _kind(rel: str) -> str:
    """A dataset file named by its directory and extension (names carry uuids), or itself
    for the test's orphans."""
    if "orphan" in rel or rel.startswith(("data/old-", "_deletions/9-", "_transactions/9-", "_indices/0b1e2f7a")):
        return rel
    top, _, name = rel.partition("/")
    return f"{top}/*.{name.rsplit('.', 1)[-1]}"


def _boto(s3_server):
    import boto3

    return boto3.client(
        "s3", endpoint_url=s3_server.endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )


def _uploads(client, bucket: str, prefix: str) -> set[tuple[str, str]]:
    found = client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    return {(u["Key"], u["UploadId"]) for u in found}


def test_cleanup_aborts_stale_multipart_uploads(s3_server) -> None:
    """A multipart upload started under the dataset and left (a writer killed while it
    streamed a large data file; its parts are billed): pylance's cleanup leaves it, ours
    aborts it (moto reports every upload as started in 2010, so it is older than any
    retention).  An upload of a neighbouring prefix stays."""
    opts = s3_server.storage_options
    uri = s3_server.uri("mpu")
    lance.write_dataset(_tbl(0, 30), uri, storage_options=opts)
    lance.write_dataset(_tbl(30, 10), uri, mode="append", storage_options=opts)
    prefix = uri.split("/", 3)[3]
    client = _boto(s3_server)
    mine = client.create_multipart_upload(Bucket=s3_server.bucket, Key=f"{prefix}/data/killed-writer.lance")["UploadId"]
    client.upload_part(Bucket=s3_server.bucket, Key=f"{prefix}/data/killed-writer.lance", UploadId=mine, PartNumber=1, Body=b"p" * 1024)
    other = client.create_multipart_upload(Bucket=s3_server.bucket, Key=f"{prefix}-other/data/x.lance")["UploadId"]
    assert _uploads(client, s3_server.bucket, f"{prefix}/") == {(f"{prefix}/data/killed-writer.lance", mine)}

    lance.dataset(uri, storage_options=opts).cleanup_old_versions(older_than=_dt.timedelta(0))
    assert _uploads(client, s3_server.bucket, f"{prefix}/") == {(f"{prefix}/data/killed-writer.lance", mine)}  # pylance leaves it

    stats = lance_gpu.dataset(uri, storage_options=opts).cleanup_old_versions()
    assert stats.multipart_uploads_aborted == 1 and stats.old_versions == 0
    assert _uploads(client, s3_server.bucket, f"{prefix}/") == set()
    assert _uploads(client, s3_server.bucket, f"{prefix}-other/") == {(f"{prefix}-other/data/x.lance", other)}
    assert lance_gpu.dataset(uri, storage_options=opts).to_table().equals(lance.dataset(uri, storage_options=opts).to_table())
    client.abort_multipart_upload(Bucket=s3_server.bucket, Key=f"{prefix}-other/data/x.lance", UploadId=other)


def test_not_a_dataset_on_s3(s3_server) -> None:
    """A prefix without committed versions: pylance raises ValueError; ours says whether
    nothing is there or something that is not a Lance dataset (same builtin class)."""
    from lance_gpu.errors import NotADatasetError

    opts = s3_server.storage_options
    uri = s3_server.uri("notds")
    for present, words in ((False, "does not exist"), (True, "is not a Lance dataset: no _versions/")):
        if present:
            _boto(s3_server).put_object(Bucket=s3_server.bucket, Key=f"{uri.split('/', 3)[3]}/data/part-0.parquet", Body=b"PAR1")
        with pytest.raises(ValueError):
            lance.dataset(uri, storage_options=opts)
        with pytest.raises(NotADatasetError, match=words) as info:
            lance_gpu.dataset(uri, storage_options=opts)
        assert isinstance(info.value, ValueError) and isinstance(info.value, FileNotFoundError)


_KILLED_STREAMING = textwrap.dedent(
    """
    import json, os, signal, sys, warnings
    warnings.simplefilter("ignore")
    import numpy as np, pyarrow as pa
    import lance_gpu
    from lance_gpu.io.remote import StreamingWriter
    StreamingWriter.close = lambda self, sync=True: os.kill(os.getpid(), signal.SIGKILL)
    tbl = pa.table({"id": pa.array(np.arange(2_000_000, dtype=np.int64)),
                    "f": pa.array(np.random.default_rng(0).random(2_000_000))})
    lance_gpu.write_dataset(tbl, sys.argv[1], mode="append", storage_options=json.loads(sys.argv[2]))
    """
)


def test_cleanup_aborts_a_killed_writers_upload(s3_server) -> None:
    """An append of a large data file killed before the file's upload completes (the
    streaming writer has sent parts): a multipart upload under data/ stays behind, no object.
    Cleanup aborts it; the dataset is untouched."""
    import json

    opts = s3_server.storage_options
    uri = s3_server.uri("kw")
    lance_gpu.write_dataset(pa.table({"id": pa.array(np.arange(10)), "f": pa.array(np.zeros(10))}), uri, storage_options=opts)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_STREAMING, uri, json.dumps(opts)], env=env, capture_output=True, timeout=300, check=False)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    prefix = uri.split("/", 3)[3]
    client = _boto(s3_server)
    left = _uploads(client, s3_server.bucket, f"{prefix}/")
    assert len(left) == 1 and next(iter(left))[0].startswith(f"{prefix}/data/")
    stats = lance_gpu.dataset(uri, storage_options=opts).cleanup_old_versions(older_than=_dt.timedelta(days=7))
    assert stats.multipart_uploads_aborted == 1 and _uploads(client, s3_server.bucket, f"{prefix}/") == set()
    assert lance.dataset(uri, storage_options=opts).to_table()["id"].to_pylist() == list(range(10))
