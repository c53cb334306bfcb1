# SPDX-License-Identifier: Apache-2.0
"""The Arrow types ``to_cudf`` hands cuDF (no GPU needed): cuDF has no fixed-size list, so
embeddings, tensors' storage and fixed-size lists nested in structs and lists become lists."""

from __future__ import annotations

import pyarrow as pa

from lance_gpu.gpu._cudf import cudf_arrow_table, cudf_arrow_type


def test_fixed_size_lists_become_lists_at_every_depth() -> None:
    emb = pa.list_(pa.float32(), 4)
    assert cudf_arrow_type(emb) == pa.list_(pa.float32())
    nested = pa.struct([("e", emb), ("xs", pa.large_list(emb)), ("n", pa.int8())])
    assert cudf_arrow_type(nested) == pa.struct(
        [("e", pa.list_(pa.float32())), ("xs", pa.large_list(pa.list_(pa.float32()))), ("n", pa.int8())])
    assert cudf_arrow_type(pa.list_(pa.field("v", emb, nullable=False))) == pa.list_(pa.field("v", pa.list_(pa.float32()), nullable=False))


def test_other_types_are_left_alone() -> None:
    for t in (pa.int64(), pa.string(), pa.large_string(), pa.list_(pa.int32()), pa.struct([("a", pa.bool_())]),
              pa.fixed_shape_tensor(pa.float32(), [2, 2])):
        assert cudf_arrow_type(t) == t


def test_table_values_survive_the_cast() -> None:
    tbl = pa.table({
        "id": pa.array([1, 2, 3]),
        "emb": pa.array([[1.0, 2.0], None, [5.0, 6.0]], pa.list_(pa.float32(), 2)),
        "st": pa.array([{"e": [1, 2]}, None, {"e": None}], pa.struct([("e", pa.list_(pa.int16(), 2))])),
    })
    out = cudf_arrow_table(tbl)
    assert out.schema.field("emb").type == pa.list_(pa.float32())
    assert out.to_pylist() == tbl.to_pylist()
    plain = pa.table({"a": [1]})
    assert cudf_arrow_table(plain) is plain
