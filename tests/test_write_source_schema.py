# SPDX-License-Identifier: Apache-2.0
"""Sources whose columns differ from the dataset's, on pylance and lance-gpu: merge_insert
(every clause mix), insert and append.  pylance 14 refuses a castable but different type
(int32 for int64, float32 for float64, large_string or dictionary for string) and extra
columns with an ``OSError`` ("Append with different schema"); it accepts a subset of the
columns (updated rows keep the others, inserted rows get nulls; a left-out column must be
nullable when rows are inserted) and, for a merge that only deletes, any source holding the
keys.  Each case runs on both from the same start; outcomes (rows, stats or the builtin
error type) must agree."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import IncompatibleSchemaError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), pa.field("v", pa.float64()), pa.field("s", pa.string())])
BASE = pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, 3.0], "s": ["a", "b", "c"]}, schema=SCHEMA)

SOURCES = {
    "int32_key": pa.table({"id": pa.array([2, 4], pa.int32()), "v": [9.0, 9.0], "s": ["x", "y"]}),
    "float32": pa.table({"id": [2, 4], "v": pa.array([9.0, 9.0], pa.float32()), "s": ["x", "y"]}),
    "large_string": pa.table({"id": [2, 4], "v": [9.0, 9.0], "s": pa.array(["x", "y"], pa.large_string())}),
    "dictionary": pa.table({"id": [2, 4], "v": [9.0, 9.0], "s": pa.array(["x", "y"]).dictionary_encode()}),
    "extra": pa.table({"id": [2, 4], "v": [9.0, 9.0], "s": ["x", "y"], "z": [1, 2]}),
    "subset": pa.table({"id": [2, 4], "v": [9.0, 9.0]}),
    "int32_key_only": pa.table({"id": pa.array([2, 4], pa.int32())}),
    "no_key": pa.table({"v": [9.0, 9.0], "s": ["x", "y"]}),
    "nullable_key": pa.table({"id": [2, 4], "v": [9.0, 9.0], "s": ["x", "y"]}),
    "reordered": pa.table({"s": ["x", "y"], "v": [9.0, 9.0], "id": [2, 4]}),
}

CLAUSES = {
    "upsert": lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
    "update": lambda b: b.when_matched_update_all(),
    "insert_only": lambda b: b.when_not_matched_insert_all(),
    "delete_by_source": lambda b: b.when_not_matched_by_source_delete(),
    "matched_delete": lambda b: b.when_matched_delete(),
    "fail_or_insert": lambda b: b.when_matched_fail().when_not_matched_insert_all(),
}


def _outcome(lib, uri: str, run):
    """(``"ok"``, result, rows after) or (``"error"``, builtin error type)."""
    try:
        result = run(lib.dataset(uri))
    except Exception as exc:  # noqa: BLE001 - the outcome is compared
        builtin = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
        return ("error", OSError if issubclass(exc.__class__, OSError) else builtin), exc
    rows = lance.dataset(uri).to_table().sort_by("id").to_pydict()
    return ("ok", result, rows), None


def _both(tmp_path, run):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(BASE, ref)
    shutil.copytree(ref, ours)
    theirs, _ = _outcome(lance, ref, run)
    got, exc = _outcome(lance_gpu, ours, run)
    assert got == theirs, (got, theirs, exc)
    return got, exc


@pytest.mark.parametrize("clause", sorted(CLAUSES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_merge_insert_source_schema(tmp_path, source, clause):
    _got, exc = _both(tmp_path, lambda ds: CLAUSES[clause](ds.merge_insert("id")).execute(SOURCES[source]))
    if source in ("int32_key", "float32", "large_string", "dictionary", "extra") and clause not in (
        "delete_by_source",
        "matched_delete",
    ):
        assert isinstance(exc, IncompatibleSchemaError) and "different schema" in str(exc)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_insert_and_append_source_schema(tmp_path, source):
    got, exc = _both(tmp_path, lambda ds: ds.insert(SOURCES[source]))
    if got[0] == "error":
        assert isinstance(exc, IncompatibleSchemaError)
    shutil.rmtree(tmp_path)
    _both(tmp_path, lambda ds: _append(ds, SOURCES[source]))


def _append(ds, data) -> None:
    lib = lance_gpu if isinstance(ds, lance_gpu.LanceDataset) else lance
    stream = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    lib.write_dataset(stream, ds.uri, mode="append")
