# SPDX-License-Identifier: Apache-2.0
"""Types pylance stores in field metadata (Arrow extension types, blobs), read by pylance and
by lance_gpu from the same pylance-written dataset; the gaps are strict xfails, so fixing one
turns its test red until the marker goes."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu


def _blob_table() -> pa.Table:
    field = pa.field("c", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    return pa.table({"c": pa.array([b"abc", None, b"x" * 100], pa.large_binary())}, schema=pa.schema([field]))


CASES = {
    "uuid": lambda: pa.table({"c": pa.array([uuid.UUID(int=i).bytes for i in range(3)], pa.uuid())}),
    "float16": lambda: pa.table({"c": pa.array([1.5, None, 2.0], pa.float16())}),
    "fixed_shape_tensor": lambda: pa.table(
        {"c": pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(24, dtype=np.float32).reshape(3, 2, 4))}
    ),
    "json": lambda: pa.table({"c": pa.array(['{"a":1}', None, "[1,2]"], pa.json_(pa.utf8()))}),
    "blob": _blob_table,
}
GAPS: dict[str, str] = {}


def _bfloat16() -> pa.Table:
    from lance.arrow import bfloat16_array

    return pa.table({"c": bfloat16_array([1.5, None, 2.0])})


CASES["bfloat16"] = _bfloat16
CASES["json_nested"] = lambda: pa.table(
    {
        "c": pa.array(
            [
                '{"b": [1, -300, 65536, 2.5, 1e20, true, false, null], "a": {"z": "h\\u00e9\\"q", "y": {}}}',
                "[]",
                None,
                "18446744073709551615",
                '"text"',
                "-9223372036854775808",
            ],
            pa.json_(pa.utf8()),
        )
    }
)


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=GAPS[n])) if n in GAPS else n for n in CASES],
)
def test_type_reads_as_pylance_reads_it(tmp_path: Path, name: str, storage: str) -> None:
    uri = str(tmp_path / f"{name}.lance")
    lance.write_dataset(CASES[name](), uri, data_storage_version=storage)
    ref = lance.dataset(uri).to_table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = lance_gpu.dataset(uri).to_table()
    assert ours.schema == ref.schema
    assert ours.equals(ref)


@pytest.mark.parametrize("storage", ["legacy", "0.1"])
def test_legacy_files_are_read(tmp_path: Path, storage: str) -> None:
    """(Every type of legacy files: tests/test_legacy_format.py.)"""
    uri = str(tmp_path / "legacy.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri, data_storage_version=storage)
    ds = lance_gpu.dataset(uri)
    assert ds.data_storage_version == "0.1"
    assert ds.to_table().equals(lance.dataset(uri).to_table())


@pytest.mark.parametrize("storage", ["2.0", "stable"])
@pytest.mark.parametrize(
    "predicate",
    ["json_get_int(c, 'a') = 2", "json_extract(c, '$.b[0]') = '1'", "json_exists(c, '$.b')", "c IS NULL"],
)
def test_json_filters_on_a_dataset(tmp_path: Path, storage: str, predicate: str) -> None:
    uri = str(tmp_path / "j.lance")
    docs = ['{"a": 1, "b": [1]}', '{"a": 2}', None, '{"b": [2, 1]}']
    lance.write_dataset(
        pa.table({"id": range(4), "c": pa.array(docs, pa.json_(pa.utf8()))}), uri, data_storage_version=storage
    )
    ref = lance.dataset(uri).to_table(filter=predicate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = lance_gpu.dataset(uri).to_table(filter=predicate)
    assert ours.equals(ref)


def test_2_0_files_carry_footer_version_0_3(tmp_path: Path) -> None:
    """pylance writes file version 2.0 with the footer version of its early releases (0.3)."""
    uri = str(tmp_path / "f.lance")
    t = pa.table({"a": range(100), "s": [str(i) for i in range(100)], "l": [[i] * (i % 3) for i in range(100)]})
    lance.write_dataset(t, uri, data_storage_version="2.0")
    (data,) = list((tmp_path / "f.lance" / "data").iterdir())
    assert data.read_bytes()[-8:] == b"\x00\x00\x03\x00LANC"
    ds = lance_gpu.dataset(uri)
    assert ds.data_storage_version == lance.dataset(uri).data_storage_version == "2.0"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ds.to_table().equals(lance.dataset(uri).to_table())


def _empty_struct_tables() -> dict[str, pa.Table]:
    empty = pa.struct([])
    return {
        "top": pa.table(
            {"a": [1, 2, 3], "e": pa.array([{}, {}, {}], empty)},
            schema=pa.schema([pa.field("a", pa.int64()), pa.field("e", empty, nullable=False)]),
        ),
        "nested": pa.table(
            {
                "a": [1, 2, 3],
                "s": pa.array(
                    [{"x": i, "e": {}} for i in range(3)],
                    pa.struct([pa.field("x", pa.int64()), pa.field("e", empty, nullable=False)]),
                ),
            }
        ),
    }


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
@pytest.mark.parametrize("shape", ["top", "nested"])
def test_empty_structs(tmp_path: Path, storage: str, shape: str) -> None:
    """pylance writes non-nullable empty structs (nullable ones it refuses)."""
    uri = str(tmp_path / "e.lance")
    lance.write_dataset(_empty_struct_tables()[shape], uri, data_storage_version=storage)
    ref = lance.dataset(uri)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = lance_gpu.dataset(uri)
        assert ours.to_table().equals(ref.to_table())
        assert ours.take([2, 0]).equals(ref.take([2, 0]))
