# SPDX-License-Identifier: Apache-2.0
"""Arrow -> Spark types and the conversion of arrays to the Arrow layout Spark reads
(no Spark job: pyarrow's own cast is the oracle)."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.spark

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'lance-gpu[spark]')")

from pyspark.sql import types as T  # noqa: E402

from lance_gpu.errors import UnsupportedFeatureError  # noqa: E402
from lance_gpu.spark._types import spark_arrow_schema, to_spark_array, to_spark_schema, to_spark_type  # noqa: E402

DT = T.DayTimeIntervalType(T.DayTimeIntervalType.DAY, T.DayTimeIntervalType.SECOND)


@pytest.mark.parametrize(
    ("arrow", "spark"),
    [
        (pa.int8(), T.ByteType()),
        (pa.uint8(), T.ShortType()),
        (pa.uint16(), T.IntegerType()),
        (pa.uint32(), T.LongType()),
        (pa.uint64(), T.DecimalType(20, 0)),
        (pa.float16(), T.FloatType()),
        (pa.large_string(), T.StringType()),
        (pa.binary(16), T.BinaryType()),
        (pa.decimal256(38, 4), T.DecimalType(38, 4)),
        (pa.date64(), T.DateType()),
        (pa.timestamp("ns", tz="Europe/Paris"), T.TimestampType()),
        (pa.timestamp("s"), T.TimestampNTZType()),
        (pa.duration("ns"), DT),
        (pa.dictionary(pa.int16(), pa.string()), T.StringType()),
        (pa.list_(pa.field("item", pa.int32(), nullable=False), 3), T.ArrayType(T.IntegerType(), containsNull=False)),
        (pa.large_list(pa.string()), T.ArrayType(T.StringType())),
        (pa.map_(pa.string(), pa.uint8()), T.MapType(T.StringType(), T.ShortType())),
        (pa.struct([("a", pa.uint32()), ("b", pa.list_(pa.float64()))]), T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.ArrayType(T.DoubleType()))])),
    ],
)
def test_type_mapping(arrow: pa.DataType, spark: T.DataType) -> None:
    assert to_spark_type(arrow) == spark


@pytest.mark.parametrize("arrow", [pa.decimal256(40, 2), pa.month_day_nano_interval()])
def test_unsupported_types_name_the_column(arrow: pa.DataType) -> None:
    with pytest.raises(UnsupportedFeatureError, match="'bad'.*columns"):
        to_spark_schema(pa.schema([("ok", pa.int32()), ("bad", arrow)]))


def _nested_table(n: int) -> pa.Table:
    ids = np.arange(n)
    return pa.table(
        {
            "l": pa.array([[int(i), None][: i % 3] if i % 4 else None for i in ids], pa.large_list(pa.uint16())),
            "fsl": pa.array([[float(i), -float(i)] if i % 5 else None for i in ids], pa.list_(pa.float16(), 2)),
            "st": pa.array([{"u": int(i), "t": int(i) * 1001} if i % 3 else None for i in ids], pa.struct([("u", pa.uint64()), ("t", pa.timestamp("ns"))])),
            "m": pa.array([[("a", int(i))] if i % 2 else [] for i in ids], pa.map_(pa.large_string(), pa.uint32())),
            "d": pa.array(["x", "y", None, "x"] * (n // 4), pa.string()).dictionary_encode(),
            "dec": pa.array([decimal.Decimal(int(i)).scaleb(-1) for i in ids], pa.decimal256(20, 1)),
        }
    )


@pytest.mark.parametrize(("offset", "length"), [(0, 40), (3, 17), (39, 1), (10, 0)])
def test_array_conversion_matches_pyarrow_cast(offset: int, length: int) -> None:
    table = _nested_table(40).slice(offset, length)
    target = spark_arrow_schema(to_spark_schema(table.schema))
    for f in target:
        col = table.column(f.name).combine_chunks()
        got = to_spark_array(col, f.type)
        assert got.type == f.type
        got.validate(full=True)
        assert got.to_pylist() == col.cast(f.type, safe=False).to_pylist(), f.name


def test_bfloat16_becomes_float() -> None:
    lance_arrow = pytest.importorskip("lance.arrow")
    if not hasattr(lance_arrow, "bfloat16_array"):
        pytest.skip("this pylance has no bfloat16 arrays")
    arr = lance_arrow.bfloat16_array([1.5, None, -2.0, 3.0]).slice(1)
    assert to_spark_type(arr.type) == T.FloatType()
    assert to_spark_array(arr, pa.float32()).to_pylist() == [None, -2.0, 3.0]
    # where pylance is not imported (Spark workers) the reader yields the storage + a marker
    marked = pa.field("x", pa.binary(2), metadata={b"ARROW:extension:name": b"lance.bfloat16"})
    assert to_spark_type(marked) == T.FloatType()
    assert to_spark_type(pa.field("x", pa.binary(2))) == T.BinaryType()
    assert to_spark_array(arr.storage, pa.float32()).to_pylist() == [None, -2.0, 3.0]


def _canonical_extension_arrays() -> dict[str, pa.Array]:
    """C++ canonical extension types (``pa.BaseExtensionType``, not ``pa.ExtensionType``)."""
    import uuid

    return {
        "u": pa.array([uuid.UUID(int=i).bytes for i in range(4)], pa.uuid()),
        "ten": pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(16, dtype=np.float32).reshape(4, 2, 2)),
        "j": pa.array(['{"a":1}', None, "[1,2]", "{}"], pa.json_(pa.utf8())),
        "b8": pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, 0, None, 2], pa.int8())),
        "op": pa.ExtensionArray.from_storage(pa.opaque(pa.binary(), "geom", "postgis"), pa.array([b"a", None, b"", b"xy"])),
    }


@pytest.mark.parametrize(
    ("name", "spark", "values"),
    [
        ("u", T.BinaryType(), None),
        ("ten", T.ArrayType(T.FloatType()), [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0]]),
        ("j", T.StringType(), ['{"a":1}', None, "[1,2]", "{}"]),
        ("b8", T.BooleanType(), [True, False, None, True]),
        ("op", T.BinaryType(), [b"a", None, b"", b"xy"]),
    ],
)
def test_canonical_extension_types(name: str, spark: T.DataType, values: list | None) -> None:
    """uuid, fixed_shape_tensor, json, bool8 and opaque map through their storage (bool8 to
    booleans), for the schema and for the arrays, sliced too."""
    arr = _canonical_extension_arrays()[name]
    assert to_spark_type(arr.type) == spark
    target = spark_arrow_schema(T.StructType([T.StructField(name, spark)])).field(name).type
    for offset in (0, 1):
        got = to_spark_array(arr.slice(offset), target)
        got.validate(full=True)
        expected = [v.bytes for v in arr.to_pylist()] if values is None else values
        assert got.to_pylist() == expected[offset:], name


def test_canonical_extension_types_read_by_spark(tmp_path) -> None:
    """The Spark source over a pylance-written dataset of those types (Spark local mode)."""
    lance = pytest.importorskip("lance")
    from test_spark_read import get_spark

    uri = str(tmp_path / "ext.lance")
    lance.write_dataset(pa.table(_canonical_extension_arrays()), uri)
    rows = get_spark().read.format("lance").load(uri).orderBy("op").collect()
    ref = sorted(lance.dataset(uri).to_table().to_pylist(), key=lambda r: (r["op"] is not None, r["op"]))
    assert [r["b8"] for r in rows] == [r["b8"] for r in ref]
    assert [r["j"] for r in rows] == [r["j"] for r in ref]
    assert [bytes(r["u"]) for r in rows] == [r["u"].bytes for r in ref]
    assert [list(r["ten"]) for r in rows] == [list(np.asarray(r["ten"]).ravel()) if r["ten"] is not None else None for r in ref]
