# SPDX-License-Identifier: Apache-2.0
"""Versions and transactions (issue 26 item 3) against pylance 14.0.2:
``read_transaction`` / ``get_transactions`` over a history of every operation kind,
commit messages and transaction properties, and the error for a missing version."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("hist") / "h.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), path, commit_message="first")
    ds = lance.write_dataset(pa.table({"a": [4]}), path, mode="append", transaction_properties={"k": "v"})
    ds.delete("a = 2")
    ds.add_columns({"b": "a + 1"})
    ds.update({"b": "0"}, "a = 1")
    ds.drop_columns(["b"])
    ds.checkout_version(2).restore()
    ds = lance.dataset(path)
    ds.update_config({"x": "y"})
    ds.optimize.compact_files()
    return path


def _fragments(op) -> list:
    out = []
    for name in ("fragments", "updated_fragments", "new_fragments"):
        for f in getattr(op, name, None) or []:
            out.append(json.loads(json.dumps(f.to_json())))
    return out


def test_read_transaction_matches_pylance(uri: str) -> None:
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    for version in range(1, ref.version + 1):
        r, o = ref.read_transaction(version), ours.read_transaction(version)
        assert (o.read_version, o.uuid, o.transaction_properties) == (r.read_version, r.uuid, r.transaction_properties)
        if type(r.operation).__name__ != "BaseOperation":  # pylance shows ReserveFragments as its base class
            assert type(o.operation).__name__ == type(r.operation).__name__
        assert _fragments(o.operation) == _fragments(r.operation)
    assert ours.read_transaction(1).transaction_properties == {"__lance_commit_message": "first"}
    assert ours.read_transaction(3).operation.predicate == ref.read_transaction(3).operation.predicate == "a = 2"


def test_get_transactions_matches_pylance(uri: str) -> None:
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    assert [t.uuid for t in ours.get_transactions()] == [t.uuid for t in ref.get_transactions()]
    assert [t.uuid for t in ours.get_transactions(3)] == [t.uuid for t in ref.get_transactions(3)]
    old = lance_gpu.dataset(uri, version=2)
    assert [t.uuid for t in old.get_transactions()] == [t.uuid for t in lance.dataset(uri, version=2).get_transactions()]


def test_missing_version_is_an_os_error(uri: str) -> None:
    with pytest.raises(OSError):
        lance.dataset(uri).read_transaction(99)
    with pytest.raises(OSError, match="version 99"):
        lance_gpu.dataset(uri).read_transaction(99)


def test_our_commits_read_back_in_pylance(tmp_path) -> None:
    path = str(tmp_path / "o.lance")
    lance_gpu.write_dataset(pa.table({"a": [1, 2]}), path, commit_message="made by us")
    lance_gpu.write_dataset(pa.table({"a": [3]}), path, mode="append", transaction_properties={"job": "7"})
    for ds in (lance.dataset(path), lance_gpu.dataset(path)):
        assert ds.read_transaction(1).transaction_properties == {"__lance_commit_message": "made by us"}
        assert ds.read_transaction(2).transaction_properties == {"job": "7"}
        assert type(ds.read_transaction(2).operation).__name__ == "Append"
