# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.schema`` (issue 26 item 2) against pylance 14.0.2: ``LanceSchema``
(``from_pyarrow`` / ``to_pyarrow``, ``ds.lance_schema``), ``schema_to_json`` /
``json_to_schema`` and their errors."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
import lance.schema  # noqa: E402, F811

import lance_gpu  # noqa: E402
from lance_gpu.schema import LanceSchema, json_to_schema, schema_to_json  # noqa: E402

SCHEMA = pa.schema(
    [
        pa.field("fsl", pa.list_(pa.float32(), 4)),
        pa.field("ll", pa.large_list(pa.int8())),
        pa.field("ts", pa.timestamp("us", "UTC")),
        pa.field("ts2", pa.timestamp("ns")),
        pa.field("d", pa.decimal128(10, 2)),
        pa.field("d256", pa.decimal256(40, 2)),
        pa.field("b", pa.large_binary()),
        pa.field("e", pa.struct([])),
        pa.field("f16", pa.float16()),
        pa.field("dt", pa.date32()),
        pa.field("t", pa.time64("ns")),
        pa.field("du", pa.duration("s")),
        pa.field("ls", pa.large_string()),
        pa.field("u8", pa.uint8(), False, metadata={"a": "b"}),
        pa.field("fb", pa.binary(3)),
        pa.field("n", pa.null()),
        pa.field("bo", pa.bool_()),
        pa.field("lst", pa.list_(pa.field("x", pa.int32(), False))),
        pa.field("lss", pa.list_(pa.struct([("q", pa.int8())]))),
        pa.field("di", pa.dictionary(pa.int8(), pa.large_string())),
    ],
    metadata={"owner": "me"},
)


def test_schema_to_json_matches_pylance() -> None:
    assert schema_to_json(SCHEMA) == lance.schema.schema_to_json(SCHEMA)
    assert json_to_schema(lance.schema.schema_to_json(SCHEMA)) == SCHEMA


@pytest.mark.parametrize("bad", [
    {"fields": [{"name": "x", "type": {"type": "nope"}, "nullable": True}]},
    {"nofields": 1},
    {"fields": [{"name": "x"}]},
])
def test_json_to_schema_errors_match_pylance(bad) -> None:
    with pytest.raises(ValueError):
        lance.schema.json_to_schema(bad)
    with pytest.raises(ValueError, match="Failed to convert json to schema"):
        json_to_schema(bad)


@pytest.mark.parametrize("typ", [pa.map_(pa.string(), pa.int32()), pa.string_view()])
def test_schema_to_json_refuses_what_pylance_refuses(typ) -> None:
    schema = pa.schema([pa.field("x", typ)])
    with pytest.raises(ValueError):
        lance.schema.schema_to_json(schema)
    with pytest.raises(ValueError, match="Failed to convert schema to json"):
        schema_to_json(schema)


def test_lance_schema_round_trip() -> None:
    ours = LanceSchema.from_pyarrow(SCHEMA)
    assert ours.to_pyarrow() == lance.schema.LanceSchema.from_pyarrow(SCHEMA).to_pyarrow() == SCHEMA
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert ours != LanceSchema.from_pyarrow(pa.schema([pa.field("x", pa.int8())]))


def test_dataset_lance_schema(tmp_path) -> None:
    uri = str(tmp_path / "s.lance")
    lance.write_dataset(pa.table({"a": [1], "st": [{"x": 1.0}]}), uri)
    ours = lance_gpu.dataset(uri).lance_schema
    assert ours.to_pyarrow() == lance.dataset(uri).lance_schema.to_pyarrow()
    assert [f.id for f in ours.table_schema.walk()] == [0, 1, 2]


def _tree(fields) -> list:
    """Names, ids, metadata and children of pylance-style fields (either library's)."""
    return [(f.name(), f.id(), f.metadata, _tree(f.children())) for f in fields]


def test_lance_schema_methods_as_pylance(tmp_path) -> None:
    """pylance's ``LanceSchema`` methods (``fields()``, ``field(path)``, ``repr``) and
    ``LanceField`` ones (``name()``, ``id()``, ``children()``, the ``metadata`` property)."""
    uri = str(tmp_path / "m.lance")
    data = pa.table({
        "x": pa.array([1, 2], pa.int64()),
        "s": [{"a": 1, "b": "h"}, {"a": 2, "b": "w"}],
        "y": [[1.0], [2.0]],
    }).replace_schema_metadata({"k": "v"})
    data = data.cast(data.schema.set(0, data.schema.field("x").with_metadata({"doc": "id"})))
    lance.write_dataset(data, uri)
    theirs, ours = lance.dataset(uri).lance_schema, lance_gpu.dataset(uri).lance_schema
    assert _tree(ours.fields()) == _tree(theirs.fields())
    assert repr(ours) == repr(theirs)
    assert repr(ours.fields()[1]) == repr(theirs.fields()[1])
    for path in ("x", "s.b", "y.item", "nope", "s.nope"):
        mine, ref = ours.field(path), theirs.field(path)
        assert (mine is None) == (ref is None), path
        if ref is not None:
            assert (mine.name(), mine.id()) == (ref.name(), ref.id())
    assert ours.field_case_insensitive("S.B").id() == theirs.field_case_insensitive("S.B").id()
    assert ours.fields()[0].to_arrow() == theirs.fields()[0].to_arrow()
    assert ours.unenforced_primary_key() == theirs.unenforced_primary_key() == []
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert LanceSchema.from_pyarrow(data.schema) == ours
    assert repr(LanceSchema.from_pyarrow(data.schema)) == repr(lance.schema.LanceSchema.from_pyarrow(data.schema))
