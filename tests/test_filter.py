# SPDX-License-Identifier: Apache-2.0
"""lance_gpu.filter against pylance: the same SQL predicate must keep the same rows."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

lance = pytest.importorskip("lance")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lance_gpu.errors import FilterError  # noqa: E402
from lance_gpu.filter import CompiledFilter, parse_filter  # noqa: E402

N = 12


def _table() -> pa.Table:
    return pa.table(
        {
            "i8": pa.array([1, -2, 3, None, 5, -6, 7, 8, None, 10, -11, 12], pa.int8()),
            "i32": pa.array([10, -7, 3, None, 5, -6, 7, 8, 9, 0, -11, 12], pa.int32()),
            "i64": pa.array([100, -7, 3, 4, None, -6, 7, 8, 9, 0, -11, 2**40], pa.int64()),
            "u32": pa.array([1, 2, 3, 4, 5, None, 7, 8, 9, 0, 11, 4_000_000_000], pa.uint32()),
            "f64": pa.array(
                [1.5, -2.5, None, 4.0, math.nan, 0.0, 7.25, -8.0, 9.5, 1e10, -0.0, 2.0], pa.float64()
            ),
            "f32": pa.array([1.5, None, -0.0, 2.5, math.nan, 0.0, 3, 4, 5, 6, 7, 8], pa.float32()),
            "s": pa.array(
                ["apple", "Banana", None, "cherry", "a_b", "a%b", "", "apple pie", "APPLE", "x", "y'q", "z"]
            ),
            "b": pa.array([True, False, None, True, False, True, None, False, True, True, False, False]),
            "ts": pa.array(
                [None if i == 4 else dt.datetime(2024, 1, 1) + dt.timedelta(hours=7 * i) for i in range(N)],
                pa.timestamp("us"),
            ),
            "d": pa.array(
                [None if i == 5 else dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(N)], pa.date32()
            ),
            "st": pa.array(
                [None if i == 3 else {"x": i, "y": str(i)} for i in range(N)],
                pa.struct([("x", pa.int64()), ("y", pa.string())]),
            ),
            "my col": pa.array(range(N), pa.int64()),  # also the row id the tests compare
            "CamelCol": pa.array(range(N), pa.int64()),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, object]:
    tbl = _table()
    uri = tmp_path_factory.mktemp("filter") / "probe.lance"
    lance.write_dataset(tbl, str(uri))
    ds = lance.dataset(str(uri))
    assert ds.schema.equals(tbl.schema) and _rows(ds.to_table()) == list(range(N))
    return tbl, ds


def _rows(table: pa.Table) -> list[int]:
    return table.column("my col").to_pylist()


def _ours(predicate, tbl: pa.Table):
    """Our rows, or the exception we raised (at parse or at apply time)."""
    try:
        return _rows(parse_filter(predicate, tbl.schema).apply(tbl))
    except Exception as e:  # noqa: BLE001 - the caller judges the type
        return e


def _reference(predicate, ds):
    try:
        return _rows(ds.to_table(filter=predicate))
    except Exception as e:  # noqa: BLE001
        return e


def _assert_same(predicate, tbl: pa.Table, ds) -> None:
    ref = _reference(predicate, ds)
    ours = _ours(predicate, tbl)
    if isinstance(ref, Exception):
        if isinstance(ref, pa.ArrowInvalid) and "Query Execution error" in str(ref):
            # pylance failed while evaluating (division by zero, bad cast): so must we.
            assert isinstance(ours, (pa.ArrowInvalid, FilterError)), (predicate, ref, ours)
        else:  # pylance rejected the predicate while planning it
            assert isinstance(ours, FilterError), (predicate, ref, ours)
        return
    assert not isinstance(ours, Exception), (predicate, ref, ours)
    assert ours == ref, (predicate, ref, ours)


# Every predicate here is run through both pylance and lance_gpu.filter; rows must agree, and
# where pylance refuses a predicate we must raise FilterError (or fail at execution time like it).
PREDICATES = [
    # comparisons, literal coercion to the column type
    "i32 > 5", "i32 >= 5", "i32 < 5", "i32 <= 5", "i32 = 5", "i32 == 10", "i32 != 5", "i32 <> 5",
    "5 < i32", "-7 = i32", "i32 = - 10", "i32 = -(7)", "i8 > 5", "i8 > 200", "i8 > 5.5", "u32 > -1",
    "u32 > 3", "i64 > 9223372036854775808", "f64 < 9223372036854775808", "i32 = 1e1", "f64 > 1",
    "f64 = 7.25", "f32 = 1.5", "f32 = 0.1", "f32 < 0.1", "b = true", "b = 1", "i32 = '5'", "s = 5",
    "i32 = 3 + 4", "i8 = 100 + 100", "i8 = 127 + 127", "i8 = 1 + 300", "i8 = i32 + 300", "i8 = -(300)",
    "i32 = 1 + 2.5", "f64 = 1 + 0.5", "i32 = 7 / 2", "i32 = 7 % 4", "u32 = 3 - 5",
    "i64 = 9223372036854775807 + 1", "i8 = -128 - 1",
    # DataFusion's coercion below the top level
    "not (i8 > 200)", "i32 + 0 > '5'", "i32 + 0 = '5'", "not (i32 = '5')", "f64 + 0 = '1.5'",
    "i64 + 0 < 9223372036854775808", "not (u32 in (-1, 3))", "b = (i32 > 5)", "b = (1 > 0)",
    # arithmetic: integer division truncates, % takes the dividend's sign, ints wrap
    "i32 / 2 = 1", "i32 / 2 > 1.4", "i32 % 3 = -1", "i32 % 3 = 2", "f64 % 2 = 1.5", "f64 % 0.5 = 0",
    "f64 % -2 = 1.5", "-f64 % 2 = -1.5", "i32 % i8 = 0", "i64 % 10 = 0", "i32 / 2 * 2 = i32",
    "i32 - 2 - 3 > 0", "1 + 2 * 3 = 7", "i32 + 1.5 > 5", "i32 * 2.0 = 14", "u32 + i32 > 0",
    "u32 - i32 > 0", "u32 + i32 < 2", "i32 - u32 < 0", "u32 > i32", "u32 - 5 > 0", "u32 * 2 > 8000000000",
    "u32 * u32 > 0", "i8 * 2 < 0", "i8 * i8 > 100", "i8 * i8 * i8 < 0", "i8 + 120 > 0", "-i8 > 5",
    "i8 + u32 > 4000000000", "i8 - u32 < 0", "f32 + i64 > 0", "f32 * 2 = 3", "f32 + 0.1 > 1.6",
    "f32 + f64 > 1.6", "-i64 < 0", "-i32 > 5", "i64 * 4611686018427387904 > 0", "1.0 / 0 > 1",
    "i32 / 0 = 1", "i32 % 0 = 1", "1 / 0 = 1", "i64 / i32 = 10", "-u32 < 0",
    # floats: NaN sorts above everything and equals itself, -0.0 = 0.0 against a zero literal
    "f64 = 0.0", "f64 = -0.0", "f64 < 0.0", "f64 > -0.0", "f64 >= 0", "f64 <= -0.0", "f64 != 4",
    "f64 <= 1e11", "f64 = f64", "f64 > f64", "f32 = f64", "f32 = 0", "f32 < 0", "f64 in (0.0, 4)",
    "f64 in (-0.0)", "f64 between 0 and 5", "f64 not between 0 and 5", "f64 * -1.0 = 0",
    "f64 * -1.0 >= 0", "f64 * -1.0 < 0", "cast(i32 as double) / 4 > 1",
    # boolean logic and NULL (three-valued logic)
    "b", "not b", "b and i32 > 0", "b or i32 > 0", "not b or i32 > 100", "b is null", "b is not null",
    "b is true", "b is not true", "b is false", "b is not false", "(i32 > 0) is true",
    "(i32 > 0) is not true", "i32 > 0 = true", "i32 = 10 = true", "i32 is null or s is null",
    "s is not null and not (s = 'x')", "i32 + null > 1", "null = null", "b = null", "s = null",
    "i32 > 5 and null", "i32 > 5 or null", "null and b", "not null", "1 = 1", "true", "false",
    "(((i32 > 1)))", "null", "i32", "s",
    # IN / NOT IN / BETWEEN
    "i32 in (3, 5, 7)", "i32 not in (3, 5)", "i32 in (3, 5, null)", "i32 not in (3, 5, null)",
    "i32 in (null)", "i32 not in (null)", "i32 in (1, 2.5)", "i8 in (1, 300)", "u32 in (-1)",
    "st.x in (1, 2)", "st.x in (-1, 2.5)", "i32 in (1+1, 3)", "i32 in (i64, 3)", "i32 in (i64, null)",
    "i32 not in (i64, null)", "s in ('apple', 'x')", "s not in ('apple', 'x')", "s in ('apple', null)",
    "b in (true)", "i32 between 3 and 8", "i32 not between 3 and 8", "i32 between 2.5 and 5",
    "i8 between 1 and 300", "st.x between 2.5 and 5", "i32 between i8 and 5", "i32 between null and 5",
    "i32 in ()", "i32 = i64",
    # strings, LIKE / ILIKE
    "s = 'apple'", "s = \"apple\"", "s > 'b'", "s < 'b'", "s = ''", "s = 'y''q'", "s like 'a%'",
    "s not like 'a%'", "s like 'a\\_b'", "s like 'a\\%b'", "s like '%'", "s like 'A%'", "s like '_'",
    "s like '%e'", "s like null", "s ilike 'a%'", "s not ilike 'APPLE%'", "s like 'a%' escape '!'",
    "s || 'x' = 'zx'", "(s || 'x') is null", "s || i32 = 'apple10'", "i32 like '1%'",
    "is_valid(s)", "lower(s) = 'apple'", "upper(s) = 'APPLE'",
    # identifiers: backticks, case-insensitive unquoted names, double quotes are strings
    "`my col` > 3", "\"my col\" > 3", "CamelCol > 5", "camelcol > 5", "`CamelCol` > 5", "I32 > 5",
    "`I32` > 5", "nope > 5", "`my col` > 3 and CamelCol < 9",
    # structs
    "st.x > 3", "st.y = '5'", "`st`.x > 5", "st.`x` > 5", "`st`.`x` = 2", "st['x'] > 8",
    "ST.X > 5", "st.X > 5", "`st.x` > 5", "st.nope > 1", "st > 1", "st.x is null", "st is null",
    "st.y is null", "st.x + 1 > i32",
    # dates and timestamps
    "ts > timestamp '2024-01-02 00:00:00'", "ts > timestamp '2024-01-02'",
    "ts > timestamp '2024-01-02T10:00:00'", "ts > timestamp '2024-01-02T10:00:00Z'",
    "ts >= timestamp '2024-01-02 13:00:00+02:00'", "ts > timestamp '2024-01-02 10:00:00.5'",
    "ts > timestamp(3) '2024-01-02 10:00:00.5'", "ts >= timestamp(9) '2024-01-02 11:00:00.000000001'",
    "ts > datetime '2024-01-02 10:00:00'", "ts = timestamp '2024-01-01 07:00:00'",
    "ts > cast('2024-01-02' as timestamp)",
    "ts between timestamp '2024-01-01 10:00:00' and timestamp '2024-01-03 00:00:00'",
    "d > date '2024-01-05'", "d > date '2024-1-5'", "d = cast('2024-01-05' as date)",
    "d > timestamp '2024-01-05 12:00:00'", "d >= timestamp '2024-01-05 12:00:00'",
    "ts > date '2024-01-02'", "ts = ts", "ts > '2024-01-02'", "d > '2024-01-05'",
    "not (d = '2024-01-05')", "not (ts > '2024-01-02')", "ts > timestamp '2024-01-02 10:00'",
    "ts > timestamp '2024-01-02x'", "d > date '2024-01-05x'", "ts > timestamptz '2024-01-02 10:00:00'",
    "d in (date '2024-01-02', date '2024-01-04')",
    # CAST
    "cast(i32 as string) = '10'", "cast(i32 as float) > 1", "cast(i32 as tinyint) > 1",
    "cast(i64 as int) > 1", "cast(i64 as int) > 5", "cast(i64 as tinyint) = 100",
    "cast(i64 as tinyint) in (100)", "cast(i64 as int) + 0 > 5", "cast(s as int) > 1",
    "cast(b as int) = 1", "cast(ts as date) = date '2024-01-02'",
    "cast(d as timestamp) > timestamp '2024-01-05 00:00:00'", "cast(i32 as varchar) = '10'",
    "cast(i32 as decimal(10,2)) > 1.5", "cast(i32 as int unsigned) > 1", "cast(f64 as int) = 1",
    "i32::bigint > 5", "cast(i32 as bigint unsigned) > 5", "cast(i32 as bool) = true",
    "cast(i32 as real) > 1", "cast(i32 as text) = '1'", "cast(i32 as integer) = 10",
    "cast(i32 as int8) = 1", "cast(i32 as double precision) = 1", "cast(i32 as float(10)) = 10",
    "cast(i32 as datetime) = 1", "cast(i32 AS Int Unsigned) = 10", "i32::INTEGER = 10",
    "cast(st.x as string) = '4'", "cast('5' as int) = i32", "cast('1.5' as double) = f64",
    "cast(null as int) is null", "cast(i32 as boolean)", "cast(b as string) = 'true'",
    "cast(d as string) = '2024-01-02'", "cast(u32 as bigint) > 3000000000", "cast(f32 as double) = 0",
    "cast(i64 as float) > 1e12", "cast(s as binary) = cast('apple' as binary)", "f64 = cast(1.5 as float)",
    "f32 = cast(1.5 as double)", "f32 = cast(0.1 as double)", "i8 = cast(300 as int)",
    "i8 > cast(300 as int)", "i32 in (cast(10 as int), 3)",
    "cast(f64 as string) = '1.5'", "cast(f64 as string) like '%.0'", "cast(f32 as string) < '1'",
    # more literal edge cases
    "ST.x > 5", "- -5 = i32 * -1", "i32 > 5 -- comment", "i32 between 1 + 1 and 5 * 2",
    "i8 between 1 + 1 and 5 * 100", "i32 >= -2147483648", "i32 >= -2147483649", "u32 < 4294967296",
    "u32 <= 4294967295", "f32 > 1e40", "i64 in (4, 9223372036854775807)", "i64 = -9223372036854775808",
    "i64 > -9223372036854775809", "'apple' = s", "'apple' < s", "null is null", "not (null is null)",
    "b = not b", "b != (i32 > 5)", "i32 / 3 * 3 + i32 % 3 = i32", "(i32 + i8) * 2 between -10 and 10",
    "ts between '2024-01-01' and '2024-01-02'", "not (ts between '2024-01-01' and '2024-01-02')",
    "d between date '2024-01-02' and date '2024-01-05'", "d in ('2024-01-02', '2024-01-04')",
    "not (d in ('2024-01-02', '2024-01-04'))",
    "ts in (timestamp '2024-01-01 07:00:00', timestamp '2024-01-02 11:00:00')",
    "st.y in ('1', '2')", "st.y like '1%'", "st.x * 2 = i32",
    # syntax errors
    "i32 >", "s = 'apple' and", "'unterminated", "i32 > > 5",
]


@pytest.mark.parametrize("predicate", PREDICATES)
def test_matches_pylance(data, predicate: str) -> None:
    tbl, ds = data
    _assert_same(predicate, tbl, ds)


@pytest.mark.parametrize("predicate", PREDICATES)
def test_direct_form_evaluates_as_the_expression(data, predicate: str) -> None:
    """Where a filter has a direct form (compute calls, no Acero plan), its mask is the
    expression's mask, NULLs included; a filter keeps it through pickling (scan plans)."""
    import dataclasses
    import pickle

    tbl, _ds = data
    try:
        compiled = parse_filter(predicate, tbl.schema)
    except FilterError:
        return
    if compiled.direct is None:
        return
    try:
        expected = dataclasses.replace(compiled, direct=None).mask(tbl)
    except pa.ArrowInvalid:  # fails at execution time: so must the direct form
        with pytest.raises(pa.ArrowInvalid):
            compiled.mask(tbl)
        return
    got = compiled.mask(tbl)
    assert got.type == pa.bool_() and got.equals(expected), (predicate, got, expected)
    assert pickle.loads(pickle.dumps(compiled)).mask(tbl).equals(expected)


@pytest.mark.parametrize(
    "text",
    ["i32 + 1", "f64 * 2 + 1", "i64 - 7", "i8 * i8", "f32 / 2", "u32 + u32", "'upd'", "1", "s", "NULL", "b",
     "i32 / 0", "i64 + i32", "i32 % 3", "ts", "d", "NOT b", "i32 > 3 AND s IS NOT NULL", "-i32"],
)
def test_direct_form_of_expressions_evaluates_as_the_expression(data, text: str) -> None:
    """A projection (an update's SET value) with a direct form has the expression's value,
    type and errors."""
    import dataclasses

    from lance_gpu.filter import compile_expression

    tbl, _ds = data
    compiled = compile_expression(text, tbl.schema)
    general = dataclasses.replace(compiled, direct=None)
    try:
        expected = general.evaluate(tbl)
    except pa.ArrowInvalid:
        with pytest.raises(pa.ArrowInvalid):
            compiled.evaluate(tbl)
        return
    got = compiled.evaluate(tbl)

    def values(column: pa.ChunkedArray) -> list:  # NaN compared as a value
        return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in column.to_pylist()]

    assert got.type == expected.type == compiled.type and values(got) == values(expected), (text, got, expected)
    if text in ("i32 + 1", "f64 * 2 + 1", "'upd'", "s", "i32 / 0"):
        assert compiled.direct is not None, text


def test_simple_predicates_have_a_direct_form(data) -> None:
    """Comparisons of a column with a constant of its type, IS [NOT] NULL, NOT, AND, OR and
    constants evaluate without an Acero plan; casts, functions and arithmetic do not."""
    tbl, _ds = data
    for predicate in ("i32 > 5", "i64 >= 3 AND i64 < 9", "s = 'apple' OR s IS NULL", "NOT (b = true)",
                      "f64 > 2.0", "f64 <= 2.0", "ts < TIMESTAMP '2024-01-02 00:00:00'", "true", "d IS NOT NULL"):
        assert parse_filter(predicate, tbl.schema).direct is not None, predicate
    for predicate in ("i32 + 1 > 5", "lower(s) = 'apple'", "s LIKE 'a%'", "st.x = 3", "i32 IN (1, 2)"):
        assert parse_filter(predicate, tbl.schema).direct is None, predicate


def test_predicate_count() -> None:
    assert len(PREDICATES) >= 60
    assert len(set(PREDICATES)) == len(PREDICATES)


# -- API --------------------------------------------------------------------------------


def test_compiled_filter_api(data) -> None:
    tbl, _ = data
    cf = parse_filter("st.x > 3 and `my col` < 10 and I32 > 0", tbl.schema)
    assert isinstance(cf, CompiledFilter)
    assert isinstance(cf.expression, pc.Expression)
    assert cf.columns == ["i32", "st", "my col"]  # schema order, top-level names
    assert _rows(cf.apply(tbl)) == [4, 6, 7, 8]
    assert _rows(tbl.filter(cf.expression)) == [4, 6, 7, 8]
    # the predicate only needs the columns it names
    assert _rows(cf.apply(tbl.select(cf.columns))) == [4, 6, 7, 8]


def test_literal_keeps_column_type(data) -> None:
    tbl, _ = data
    assert str(parse_filter("i32 > 5", tbl.schema).expression) == "(i32 > 5)"
    assert "cast" not in str(parse_filter("i8 <= 7 and u32 in (1, 2)", tbl.schema).expression)
    # a float literal against a float32 column compares in float32, as pylance does
    assert "0.1" in str(parse_filter("f32 = 0.1", tbl.schema).expression)


def test_null_result_drops_the_row(data) -> None:
    tbl, _ = data
    assert parse_filter("i32 > 5 and null", tbl.schema).apply(tbl).num_rows == 0
    assert _rows(parse_filter("i32 > 100 or i32 is null", tbl.schema).apply(tbl)) == [3]


def test_apply_to_another_table_with_the_schema(data) -> None:
    tbl, _ = data
    cf = parse_filter("s like 'a%' and i32 > 3", tbl.schema)
    assert _rows(cf.apply(tbl.slice(4))) == [4, 7]
    assert cf.apply(tbl.slice(0, 0)).num_rows == 0


def test_source_is_kept(data) -> None:
    tbl, _ = data
    assert parse_filter("i32 > 5", tbl.schema).source == "i32 > 5"


@pytest.mark.parametrize(
    "predicate",
    [
        "k = 'a'", "k in ('a', 'b')", "k like 'a%'", "k is null", "k > 'a'", "k || 'x' = 'bx'", "k = 5",
        "ls = 'b'", "ls > 'a'", "ls || 'x' = 'bx'", "ls in ('a', 'c')",
        "tz > timestamp '2024-01-01 06:00:00'", "tz > '2024-01-01 06:00:00'",
    ],
)
def test_dictionary_large_string_and_tz_columns(tmp_path, predicate: str) -> None:
    tbl = pa.table(
        {
            "k": pa.array(["a", "b", None, "a"]).dictionary_encode(),
            "ls": pa.array(["a", "b", "c", None], pa.large_string()),
            "tz": pa.array([dt.datetime(2024, 1, 1, h) for h in (0, 5, 10, 15)], pa.timestamp("us", tz="UTC")),
            "my col": pa.array(range(4), pa.int64()),
        }
    )
    lance.write_dataset(tbl, str(tmp_path / "d.lance"))
    ds = lance.dataset(str(tmp_path / "d.lance"))
    _assert_same(predicate, ds.to_table(), ds)


# -- pyarrow Expression inputs --------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "columns"),
    [
        (pc.field("i32") > 5, ["i32"]),
        ((pc.field("my col") > 3) & (pc.field("s") == "apple pie"), ["s", "my col"]),
        (pc.field("s") == "i32", ["s"]),  # a column name inside a string literal is not a column
        (pc.field("i64").isin([3, 7, 100]), ["i64"]),
        (pc.field("b") | pc.field("d").is_null(), ["b", "d"]),
    ],
)
def test_expression_input(data, expr: pc.Expression, columns: list[str]) -> None:
    tbl, ds = data
    cf = parse_filter(expr, tbl.schema)
    assert cf.expression.equals(expr)
    assert cf.columns == columns
    assert cf.source is None
    assert _rows(cf.apply(tbl)) == _rows(ds.to_table(filter=expr))


def test_expression_input_nested_field(data) -> None:
    tbl, _ = data
    cf = parse_filter(pc.field("st", "x") > 3, tbl.schema)
    assert cf.columns == ["st"]
    assert _rows(cf.apply(tbl)) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_expression_input_without_columns(data) -> None:
    tbl, _ = data
    cf = parse_filter(pc.scalar(True), tbl.schema)
    assert cf.columns == []
    assert cf.apply(tbl).num_rows == N


@pytest.mark.parametrize("expr", [pc.field("nope") > 1, pc.field("i32") + 1, pc.field("i32") == pc.field("s")])
def test_expression_input_errors(data, expr: pc.Expression) -> None:
    tbl, _ = data
    with pytest.raises(FilterError):
        parse_filter(expr, tbl.schema)


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("i32 >", "could not parse"),
        ("i32 > 5 )", "could not parse"),
        ("'unterminated", "could not parse"),
        ("i32 > 5; i32 < 3", "single predicate"),
        ("nope > 5", "nope"),
        ("`I32` > 5", "I32"),
        ("st.nope > 1", "nope"),
        ("i32.x > 1", "not a struct"),
        ("i8 > 200", "200"),
        ("u32 in (-1)", "-1"),
        ("i32 > 5.5", "5.5"),
        ("ts > '2024-01-02'", "2024-01-02"),
        ("cosine(i32) > 1", "unknown SQL function 'cosine'"),
        ("case when b then true else false end", "not supported"),
        ("i32 in (select 1)", "not supported"),
        ("cast(i32 as varchar) = '1'", "unsupported data type"),
        ("s like 'a%' escape '!'", "ESCAPE"),
        ("case when i32 > 1 then true else false end", "not supported"),
        ("i32", "boolean"),
        ("null", "boolean"),
        ("b and i32", "boolean"),
        ("i32 like 'a%'", "string"),
        ("s + 1 > 2", "cannot apply"),
        ("-u32 < 0", "negation"),
        ("ts > timestamp '2024-01-02 10:00'", "timestamp"),
        ("0x10 > 1", "cannot compare binary"),  # 0x10 is a binary literal, as in pylance
    ],
)
def test_errors(data, predicate: str, message: str) -> None:
    tbl, _ = data
    with pytest.raises(FilterError, match="(?i)" + message.replace("(", r"\(").replace(".", r"\.")):
        parse_filter(predicate, tbl.schema)


def test_errors_are_value_errors_not_sqlglot_errors(data) -> None:
    tbl, _ = data
    for predicate in ["i32 >", "select", "((", "i32 = 'a", "`unclosed"]:
        with pytest.raises(FilterError) as info:
            parse_filter(predicate, tbl.schema)
        assert isinstance(info.value, ValueError)
        assert info.value.__cause__ is None or not type(info.value.__cause__).__module__.startswith("sqlglot")


def test_bad_argument_types(data) -> None:
    tbl, _ = data
    with pytest.raises(TypeError):
        parse_filter(5, tbl.schema)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_filter("i32 > 1", tbl)  # type: ignore[arg-type]


@pytest.mark.parametrize("predicate", ["i32 > 5 )", "i32 > 5 limit 1", "i32 > 5 x"])
def test_trailing_text_is_rejected(data, predicate: str) -> None:
    """pylance ignores whatever follows a complete predicate; we refuse it instead."""
    tbl, ds = data
    assert _rows(ds.to_table(filter=predicate)) == [0, 6, 7, 8, 11]
    with pytest.raises(FilterError):
        parse_filter(predicate, tbl.schema)


@pytest.mark.parametrize(
    "predicate",
    ["(i32 not in (5)) or (i32 not in (3))", "not ((i32 in (5)) and (i32 in (3)))"],
)
def test_pylance_in_list_merge_bug(data, predicate: str) -> None:
    """pylance merges IN lists on the same operand into an empty list and so keeps the row
    whose ``i32`` is NULL (row 3); SQL says NULL there, and we keep SQL's answer."""
    tbl, ds = data
    assert 3 in _rows(ds.to_table(filter=predicate))
    ours = _rows(parse_filter(predicate, tbl.schema).apply(tbl))
    assert ours == [r for r in range(N) if r != 3]


def test_nan_is_one_value_above_everything(data) -> None:
    """Every NaN counts as pylance's positive NaN: equal to itself, above +inf.

    pylance orders by the NaN's sign bit, so NaNs made inside the filter by ``-x`` or ``0/0``
    (negative on x86) sort below -inf there; pyarrow expressions cannot read that bit.
    """
    tbl, ds = data
    for predicate in ["f64 > 1e300", "f64 = f64", "f64 >= f64", "not (f64 < 1)", "f64 in (1.5, 4)"]:
        assert _rows(parse_filter(predicate, tbl.schema).apply(tbl)) == _rows(ds.to_table(filter=predicate))
    assert 4 in _rows(parse_filter("-f64 > 0", tbl.schema).apply(tbl))  # pylance (x86): not 4


def test_like_with_a_column_pattern_as_pylance(data) -> None:
    """``s LIKE s`` (a pattern per row, matched row by row): pylance's rows."""
    tbl, ds = data
    want = ds.to_table(filter="s like s").num_rows
    assert want == 11
    assert parse_filter("s like s", tbl.schema).apply(tbl).num_rows == want


# -- property test: random predicate trees against pylance -----------------------------------


def _prop_table() -> pa.Table:
    # No NaN or infinity: pylance orders NaNs by their sign bit, which pyarrow expressions
    # cannot read, and computed NaNs (0/0, -x) get a platform-dependent sign.
    n = 40
    ints = [None, 0, 1, -1, 2, -3, 5, 7, -8, 13, 100, -100]
    floats = [None, 0.0, -0.0, 0.5, -1.5, 2.0, 3.25, -7.0, 100.0, 1e6]
    strs = [None, "", "a", "ab", "apple", "b", "Ba", "a_b", "z%", "APPLE"]
    return pa.table(
        {
            "row": pa.array(range(n), pa.int64()),
            "a": pa.array([ints[(i * 7) % len(ints)] for i in range(n)], pa.int32()),
            "b": pa.array([ints[(i * 5 + 3) % len(ints)] for i in range(n)], pa.int64()),
            "u": pa.array([None if i % 9 == 4 else (i * 37) % 50 for i in range(n)], pa.uint32()),
            "f": pa.array([floats[(i * 3 + 1) % len(floats)] for i in range(n)], pa.float64()),
            "g": pa.array([floats[(i * 7 + 2) % len(floats)] for i in range(n)], pa.float64()),
            "s": pa.array([strs[(i * 3) % len(strs)] for i in range(n)], pa.string()),
            # never NULL: the operands of generated IN lists (see _in_operand)
            "n": pa.array([ints[(i * 5) % len(ints)] or 4 for i in range(n)], pa.int32()),
            "h": pa.array([floats[(i * 7) % len(floats)] or -0.0 for i in range(n)], pa.float64()),
            "t": pa.array([strs[(i * 7 + 1) % len(strs)] or "q" for i in range(n)], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def prop_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, object]:
    tbl = _prop_table()
    uri = tmp_path_factory.mktemp("filter_prop") / "prop.lance"
    lance.write_dataset(tbl, str(uri))
    return tbl, lance.dataset(str(uri))


_int_lit = st.integers(-20, 20).map(str)
_float_lit = st.sampled_from(["0.0", "-0.0", "0.5", "-1.5", "2.0", "3.25", "1e6"])
_num_col = st.sampled_from(["a", "b", "u", "f", "g"])
_nonzero_lit = st.sampled_from(["2", "-3", "7", "0.5", "-2.5"])


def _numeric(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(_num_col, _num_col, _int_lit, _float_lit)
    if depth == 0:
        return leaf
    sub = _numeric(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(sub, st.sampled_from(["/", "%"]), _nonzero_lit).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda x: f"-({x})" if x not in ("u",) else x),
    )


# pylance's optimizer merges IN lists over the same operand (``x IN (1) AND x IN (2)`` becomes
# ``x IN ()``, ``x NOT IN (1) OR x NOT IN (2)`` becomes ``x NOT IN ()``), which turns a NULL
# operand's NULL into FALSE/TRUE. That is a pylance bug (test_pylance_in_list_merge_bug), so
# generated IN lists test never-NULL operands and hold no NULL.
_in_operand = st.one_of(
    st.sampled_from(["n", "h"]),
    st.tuples(
        st.sampled_from(["n", "h"]), st.sampled_from(["+", "-", "*"]), st.sampled_from(["n", "h", "2", "-1.5"])
    ).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
)
_cmp = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
_str_lit = st.sampled_from(["''", "'a'", "'ab'", "'apple'", "'b'", "'APPLE'", "'a_b'"])
_pattern = st.sampled_from(["'a%'", "'%b'", "'_'", "'a\\_b'", "'%'", "'A%'", "'z\\%'"])


def _atom() -> st.SearchStrategy[str]:
    num = _numeric(2)
    return st.one_of(
        st.tuples(num, _cmp, num).map(" ".join),
        st.tuples(_num_col, _cmp, st.one_of(_int_lit, _float_lit)).map(" ".join),
        st.tuples(st.just("s"), _cmp, _str_lit).map(" ".join),
        st.tuples(st.sampled_from(["s like", "s not like", "s ilike"]), _pattern).map(" ".join),
        st.tuples(
            _in_operand,
            st.sampled_from(["in", "not in"]),
            st.lists(st.one_of(_int_lit, _int_lit, _float_lit), min_size=1, max_size=4),
        ).map(lambda t: f"{t[0]} {t[1]} ({', '.join(t[2])})"),
        st.tuples(
            st.sampled_from(["t in", "t not in"]),
            st.lists(_str_lit, min_size=1, max_size=3),
        ).map(lambda t: f"{t[0]} ({', '.join(t[1])})"),
        st.tuples(_numeric(1), st.sampled_from(["between", "not between"]), _int_lit, _int_lit).map(
            lambda t: f"{t[0]} {t[1]} {t[2]} and {t[3]}"
        ),
        st.tuples(
            st.sampled_from(["a", "b", "u", "f", "s", "(a + f)"]), st.sampled_from(["is null", "is not null"])
        ).map(" ".join),
    )


_predicates = st.recursive(
    _atom(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        inner.map(lambda p: f"not ({p})"),
        st.tuples(inner, st.sampled_from(["is true", "is not true", "is false", "is not false"])).map(
            lambda t: f"({t[0]}) {t[1]}"
        ),
    ),
    max_leaves=6,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(predicate=_predicates)
def test_random_predicates_match_pylance(prop_data, predicate: str) -> None:
    tbl, ds = prop_data
    try:
        ref = ds.to_table(filter=predicate).column("row").to_pylist()
    except Exception as e:  # noqa: BLE001
        ref = e
    try:
        ours = parse_filter(predicate, tbl.schema).apply(tbl).column("row").to_pylist()
    except Exception as e:  # noqa: BLE001
        ours = e
    if isinstance(ref, Exception):
        assert isinstance(ours, (FilterError, pa.ArrowInvalid)), (predicate, ref, ours)
    else:
        assert not isinstance(ours, Exception), (predicate, ref, ours)
        assert ours == ref, (predicate, ref, ours)


def test_pylance_float_zero_contradiction_fold(data) -> None:
    """pylance folds ``(f = 0) AND NOT (f = 0)`` over a float column to FALSE, so the NOT keeps
    the rows whose ``f64`` is NULL (row 2); SQL says NULL there, and we keep SQL's answer."""
    tbl, ds = data
    predicate = "not ((f64 = 0) and (not (f64 = 0)))"
    assert 2 in _rows(ds.to_table(filter=predicate))
    assert 2 not in _rows(parse_filter(predicate, tbl.schema).apply(tbl))
    # the same shape over an integer column keeps SQL's NULL in pylance as well
    assert _rows(ds.to_table(filter="not ((i32 = 1) and (not (i32 = 1)))")) == _rows(
        parse_filter("not ((i32 = 1) and (not (i32 = 1)))", tbl.schema).apply(tbl)
    )


def test_remainder_without_pyarrow_remainder(monkeypatch) -> None:
    """SQL ``%`` on pyarrow releases before ``pyarrow.compute.remainder`` (26): the fallback
    gives the truncated remainder (sign of the dividend), equal to pyarrow's own."""
    import pyarrow.compute as pc

    import lance_gpu.filter as filter_mod

    table = pa.table({"a": pa.array([7, -7, 7, -7, 0, 5], pa.int64()), "x": pa.array([7.5, -7.5, 7.5, -7.5, 0.0, 1.0])})
    divisors = pa.array([3, 3, -3, -3, 5, 3], pa.int64())
    expected = (pc.remainder(table["a"], divisors).to_pylist(), pc.remainder(table["x"], pa.scalar(2.0)).to_pylist())
    monkeypatch.setattr(filter_mod, "_PC_REMAINDER", None)
    assert filter_mod._remainder(table["a"], divisors).to_pylist() == expected[0]
    assert filter_mod._remainder(table["x"], pa.scalar(2.0)).to_pylist() == expected[1]
    compiled = filter_mod.parse_filter("a % 3 = 1", table.schema)
    assert compiled.apply(table)["a"].to_pylist() == [7, 7]
