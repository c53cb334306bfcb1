# SPDX-License-Identifier: Apache-2.0
"""Round-trip property test: random schemas and data, written by lance_gpu, read back exactly
by pylance 14 and by our own reader (file versions 2.1 and 2.2)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_gpu

lance = pytest.importorskip("lance")

_SCALARS = [
    (pa.int8(), st.integers(-128, 127)),
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.uint16(), st.integers(0, 2**16 - 1)),
    (pa.uint64(), st.integers(0, 2**64 - 1)),
    (pa.float32(), st.floats(width=32, allow_nan=False)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.bool_(), st.booleans()),
    (pa.string(), st.text(max_size=12)),
    (pa.large_string(), st.text(max_size=40)),
    (pa.binary(), st.binary(max_size=20)),
    (pa.date32(), st.dates(dt.date(1970, 1, 1), dt.date(2200, 1, 1))),
    (pa.timestamp("us"), st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2200, 1, 1))),
    (pa.decimal128(10, 2), st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False)),
    (pa.binary(4), st.binary(min_size=4, max_size=4)),
]


@st.composite
def _typed(draw, depth: int = 0):
    """A (type, value strategy) pair, possibly nested."""
    kinds = ["scalar"] * 4 + (["list", "struct", "fsl"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        t, values = draw(st.sampled_from(_SCALARS))
        return t, values
    if kind == "fsl":
        t, values = draw(st.sampled_from(_SCALARS[:8]))
        n = draw(st.integers(1, 4))
        return pa.list_(t, n), st.lists(values, min_size=n, max_size=n)
    if kind == "list":
        t, values = draw(_typed(depth + 1))
        return pa.list_(t), st.lists(st.one_of(st.none(), values), max_size=4)
    n = draw(st.integers(1, 3))
    children = [draw(_typed(depth + 1)) for _ in range(n)]
    fields = [pa.field(f"c{i}", t) for i, (t, _) in enumerate(children)]
    return pa.struct(fields), st.fixed_dictionaries({f.name: st.one_of(st.none(), v) for f, (_, v) in zip(fields, children)})


@st.composite
def tables(draw):
    ncols = draw(st.integers(1, 4))
    nrows = draw(st.sampled_from([0, 1, 7, 300, 1500]))
    cols = {}
    for i in range(ncols):
        t, values = draw(_typed())
        nullable = draw(st.booleans()) and not pa.types.is_struct(t)
        cell = st.one_of(st.none(), values) if nullable else values
        if nrows > 50:
            # Long columns: a few distinct rows repeated keep generation fast (and exercise
            # dictionary / RLE choices).
            pool = draw(st.lists(cell, min_size=1, max_size=8))
            pick = draw(st.lists(st.integers(0, len(pool) - 1), min_size=nrows, max_size=nrows))
            data = [pool[j] for j in pick]
        else:
            data = draw(st.lists(cell, min_size=nrows, max_size=nrows))
        cols[f"col{i}"] = pa.array(data, type=t)
    return pa.table(cols)


@settings(max_examples=int(__import__("os").environ.get("LANCE_GPU_PROP_EXAMPLES", "30")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=tables(), version=st.sampled_from(["2.1", "2.2"]))
def test_random_round_trip(tmp_path_factory: pytest.TempPathFactory, table: pa.Table, version: str) -> None:
    uri = str(tmp_path_factory.mktemp("prop") / "ds.lance")
    lance_gpu.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=1000)
    theirs = lance.dataset(uri).to_table()
    assert theirs.equals(table), f"pylance read back something else for schema {table.schema}"
    ours = lance_gpu.dataset(uri).to_table()
    assert ours.equals(table)
    if table.num_rows:
        idx = [0, table.num_rows - 1, table.num_rows // 2]
        assert lance_gpu.dataset(uri).take(idx).equals(table.take(idx))


def test_decimal_strategy_is_exact() -> None:
    # Guard: decimals drawn with 2 places fit decimal128(10, 2) exactly.
    assert pa.array([decimal.Decimal("12345.67")], pa.decimal128(10, 2)).to_pylist()[0] == decimal.Decimal("12345.67")
