# SPDX-License-Identifier: Apache-2.0
"""SQL functions, binary literals and row-identity columns in filters and projections,
against pylance 14.0.2 over the same pylance-written data."""

from __future__ import annotations

import datetime as dt
import json
import pickle

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

from lance_gpu.errors import FilterError  # noqa: E402
from lance_gpu.filter import (  # noqa: E402
    VIRTUAL_COLUMNS,
    CompiledExpression,
    compile_expression,
    parse_filter,
)

DOCS = [
    {"a": 1, "b": "x", "c": [1, 2, 3], "d": {"e": True}},
    {"a": 2.5, "b": "y", "c": []},
    None,
    {"b": None, "a": "7", "k": True},
    {"c": [4, "5"], "d": {"e": False}, "k": "true"},
    {"a": -2.5, "k": False},
]


def _table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "tags": pa.array([["a", "b"], ["c"], [], None, ["a", "c", "d"], ["b", None]], pa.list_(pa.string())),
            "nums": pa.array([[1, 2], [3], [], None, [1, None], [2]], pa.list_(pa.int32())),
            "s": pa.array(["Apple", "banana", None, "cherry", "apple pie", ""]),
            "pat": pa.array(["Ap", "na", "x", None, "e$", ""]),
            "ls": pa.array(["Äpfel", "banana", None, "cherry", "apple pie", ""], pa.large_string()),
            "f": pa.array([1.25, -2.5, None, 3.75, -0.5, 2.5]),
            "f32": pa.array([1.5, -2.5, None, 0.25, 3.5, -0.0], pa.float32()),
            "i": pa.array([1, -2, None, 3, -4, 5], pa.int32()),
            "bin": pa.array([b"\x01\x02", b"", None, b"\xff", b"ab", b"\x01"]),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 5, 30, 15) + dt.timedelta(days=40 * k, hours=k) for k in range(6)],
                pa.timestamp("us"),
            ),
            "d": pa.array([dt.date(2023, 12, 31) + dt.timedelta(days=40 * k) for k in range(6)], pa.date32()),
            "j": pa.array([None if d is None else json.dumps(d) for d in DOCS], pa.json_(pa.utf8())),
            "st": pa.array([{"x": k, "name": f"n{k}"} for k in range(6)]),
            "tt": pa.array(["2024-03-05T10:20:30", "2024-03-05 10:20:30.5", None, "2024-03-05",
                            "2024-03-05T10:20:30Z", "2024-03-05T12:00:00+02:00"]),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory):
    uri = str(tmp_path_factory.mktemp("fn") / "fn.lance")
    # two fragments, stable row ids, a deleted row: _rowid, _rowaddr and _rowoffset all differ
    lance.write_dataset(_table(), uri, max_rows_per_file=3, enable_stable_row_ids=True)
    ds = lance.dataset(uri)
    ds.delete("id = 1")
    ds = lance.dataset(uri)
    tbl = ds.to_table(with_row_id=True, with_row_address=True)
    tbl = tbl.append_column("_rowoffset", pa.array(range(tbl.num_rows), pa.uint64()))
    assert tbl.column("_rowid").to_pylist() != tbl.column("_rowaddr").to_pylist()
    return tbl.drop(list(VIRTUAL_COLUMNS)).schema, tbl, ds


def _ours_filter(predicate: str, schema: pa.Schema, tbl: pa.Table):
    try:
        return parse_filter(predicate, schema).apply(tbl).column("id").to_pylist()
    except Exception as e:  # noqa: BLE001 - the caller judges the type
        return e


def _reference_filter(predicate: str, ds):
    try:
        return ds.to_table(filter=predicate, columns=["id"]).column("id").to_pylist()
    except Exception as e:  # noqa: BLE001
        return e


FILTERS = [
    # arrays
    "array_has(tags, 'a')", "array_contains(tags, 'c')", "array_has(nums, 1)", "array_has(nums, NULL)",
    "not array_has(tags, 'a')", "array_has_any(tags, ['a', 'd'])", "array_has_any(nums, [1, 5])",
    "array_has_any(tags, [])", "array_has_all(tags, ['a', 'c'])", "array_has_all(tags, [])",
    "array_has_all(nums, [1])", "array_length(tags) = 1", "array_length(tags) > 0",
    "array_length(nums, 1) = 2", "array_has(nums, 'a')", "array_length(s) = 1",
    # strings and regular expressions
    "regexp_match(s, '^a')", "regexp_like(s, '^a')", "regexp_like(s, 'A', 'i')", "regexp_like(s, 'p+')",
    "regexp_like(s, '(')", "regexp_like(s, i)", "starts_with(s, 'a')", "ends_with(s, 'e')",
    "contains(s, 'an')", "contains(s, NULL)", "starts_with(st.name, 'n1')", "length(s) = 5",
    "char_length(s) > 5", "character_length(s) = 0", "lower(s) = 'apple'", "upper(s) like 'APP%'",
    # numbers
    "abs(i) > 2", "abs(f) > 2", "abs(s) > 1", "coalesce(i, 0) = 0", "coalesce(i, f) < 0",
    "coalesce(s, 'z') = 'z'", "round(f) = 3", "round(f) = -3", "round(f, 1) = 1.3", "round(f32) = 4",
    "round(i) = 3", "round(f, -1) = 0",
    # dates
    "date_trunc('month', ts) = TIMESTAMP '2024-02-01 00:00:00'", "date_trunc('day', ts) > TIMESTAMP '2024-03-01'",
    "date_trunc('week', ts) = TIMESTAMP '2024-02-05 00:00:00'", "date_trunc('year', d) = TIMESTAMP '2024-01-01'",
    "date_trunc('quarter', ts) = TIMESTAMP '2024-04-01'", "date_trunc('hour', ts) < ts",
    "date_trunc('fortnight', ts) IS NULL", "d < current_date()", "d > current_date", "ts < now()",
    # binary literals
    "bin = X'0102'", "bin = x'ff'", "bin != X''", "bin = X'0'", "bin = X'1'",
    # row identity
    "_rowid = 4", "_rowaddr > 2", "_rowid in (0, 5) or _rowaddr = 4294967296",
    # JSON
    "json_extract(j, '$.a') = '1'", "json_extract(j, '$.b') = '\"x\"'", "json_extract(j, '$.d.e') = 'true'",
    "json_extract(j, '$.c[1]') = '2'", "json_extract(j, 'a') is null", "json_exists(j, '$.c')",
    "json_array_contains(j, '$.c', 2)", "json_array_contains(j, '$.c', '5')", "json_array_length(j, '$.c') = 3",
    "json_array_length(j, '$.a') = 0", "json_get_string(j, 'b') = 'x'", "json_get_string(j, 'a') = '7'",
    "json_get_int(j, 'a') = 3", "json_get_float(j, 'a') > 2", "json_get_bool(j, 'k')",
    "json_get_int(j, 'b') = 1", "json_extract(s, '$.a') is null",
    # more functions
    "sqrt(abs(f)) > 1", "exp(i) < 1", "ln(f) > 0", "power(i, 2) = 9", "signum(f) < 0", "trunc(f) = 3",
    "replace(s, 'an', '') = 'ba'", "btrim(s, 'A') = 'pple'", "ltrim(s) = 'Apple'", "rtrim(s, 'e') like 'Appl%'",
    "concat(s, '!') = 'Apple!'", "concat(s, NULL) = ''", "strpos(s, 'an') = 2", "reverse(s) = 'elppA'",
    "initcap(s) = 'Apple Pie'", "octet_length(s) > 5", "repeat(s, 2) = 'AppleApple'", "log10(f) > 0",
    "position('a' IN s) = 1",
    # string slicing and padding; column patterns and digits
    "left(s, 2) = 'Ap'", "left(s, -2) = 'Appl'", "right(s, 3) = 'pie'", "right(s, -1) = 'anana'", "left(s, i) = 'A'",
    "right(s, i) = ''", "left(s, NULL) IS NULL", "left(s, 1.5) = 'A'", "left(ls, 2) = 'Äp'", "lpad(s, 7, '*') = '**Apple'",
    "rpad(s, 3) = 'ban'", "lpad(s, i, pat) = 'A'", "rpad(s, 8, pat) = 'Applep'", "lpad(s, 8, '') = 'Apple'",
    "lpad(ls, 6, 'xy') = 'xÄpfel'", "rpad(s, -1) = ''", "lpad(s, 5, NULL) IS NULL", "starts_with(s, pat)",
    "ends_with(s, pat)", "contains(s, pat)", "starts_with(ls, pat)", "not starts_with(s, pat)",
    "regexp_like(s, pat)", "regexp_like(s, pat, 'i')", "regexp_like(s, pat, 'q')", "regexp_match(s, pat)",
    "round(f, i) = 1.3",
    "round(f, i) < 0", "round(i, i) > 0", "round(f, f) > 1", "json_get(j, 'a') IS NOT NULL",
    "json_get(j, 'c') = X'80000003200000022000000220000002500150025003'", "json_get(j, 'zz') IS NULL",
    "json_get(j, 'a') = json_get(j, 'a')",
    # unknown functions and syntax
    "foo(i) = 1", "i >", "i = = 3", "(i > 3", "i in (1,", "array_has(tags)",
]


@pytest.mark.parametrize("predicate", FILTERS)
def test_filter_matches_pylance(data, predicate: str) -> None:
    schema, tbl, ds = data
    ref = _reference_filter(predicate, ds)
    ours = _ours_filter(predicate, schema, tbl)
    if isinstance(ref, Exception):
        if isinstance(ref, pa.ArrowInvalid) and "Query Execution error" in str(ref):
            assert isinstance(ours, (pa.ArrowInvalid, FilterError)), (predicate, ref, ours)
        else:
            assert isinstance(ours, FilterError), (predicate, ref, ours)
        return
    assert not isinstance(ours, Exception), (predicate, ref, ours)
    assert ours == ref, (predicate, ref, ours)


PROJECTIONS = [
    "array_has(tags, 'a')", "array_has_all(tags, ['a', 'c'])", "array_length(tags)", "array_length(nums)",
    "regexp_like(s, 'A', 'i')", "regexp_match(s, '^a')", "regexp_match(s, '(a)(p+)')", "starts_with(s, 'a')",
    "ends_with(s, 'e')", "contains(s, 'an')", "length(s)", "lower(s)", "upper(s)", "abs(i)", "abs(f)",
    "coalesce(i, 0)", "coalesce(i, f)", "coalesce(s, 'z')", "round(f)", "round(f, 1)", "round(i)",
    "round(f32)", "date_trunc('month', ts)", "date_trunc('week', ts)", "date_trunc('minute', ts)",
    "date_trunc('year', d)", "_rowid", "_rowaddr", "i + 1", "cast(f as int)", "st.x * 2",
    "json_extract(j, '$.a')", "json_extract(j, '$.c')", "json_extract(j, '$.d')", "json_extract(j, '$.c[*]')",
    "json_get_string(j, 'b')", "json_get_float(j, 'a')", "json_get_int(j, 'a')", "json_exists(j, '$.d.e')",
    "json_array_length(j, '$.c')", "json_array_contains(j, '$.c', 4)", "json_get_bool(j, 'k')",
    "left(s, 2)", "left(s, -2)", "right(s, 3)", "right(s, -1)", "left(s, i)", "right(s, i)", "left(ls, 3)",
    "right(ls, 0)", "left(s, NULL)", "lpad(s, 7, '*')", "rpad(s, 7, '*')", "lpad(s, 3)", "rpad(s, i)",
    "lpad(s, i, pat)", "rpad(s, 8, pat)", "lpad(ls, 7, 'xy')", "rpad(ls, 2)", "lpad(s, 8, '')", "lpad(s, -3, 'a')",
    "lpad(s, 5, NULL)", "starts_with(s, pat)", "ends_with(s, pat)", "contains(s, pat)", "starts_with(ls, pat)",
    "regexp_like(s, pat)", "regexp_like(s, pat, 'i')", "regexp_match(s, pat)", "regexp_match(s, pat, 'i')",
    "regexp_match(s, '(a)(p*)')", "round(f, i)", "round(i, i)", "round(f32, i)",
    "round(f, i - 10)", "round(f, i * 1000)", "json_get(j, 'a')", "json_get(j, 'c')", "json_get(j, 'd')",
    "json_get(j, 'b')", "json_get(j, 'k')", "json_get(j, 'zz')", "json_get(j, NULL)", "json_get(j, 0)",
]


@pytest.mark.parametrize("expression", PROJECTIONS)
def test_projection_matches_pylance(data, expression: str) -> None:
    schema, tbl, ds = data
    ref = ds.to_table(columns={"v": expression}).column("v")
    compiled = compile_expression(expression, schema)
    assert isinstance(compiled, CompiledExpression)
    ours = compiled.evaluate(tbl)
    assert ours.type == ref.type == compiled.type, (expression, ours.type, ref.type)
    assert repr(ours.to_pylist()) == repr(ref.to_pylist()), expression  # NaN equal to NaN


def test_constant_projection_repeats(data) -> None:
    schema, tbl, _ = data
    assert compile_expression("abs(-5)", schema).evaluate(tbl).to_pylist() == [5] * tbl.num_rows
    assert compile_expression("X'0102'", schema).evaluate(tbl).to_pylist() == [b"\x01\x02"] * tbl.num_rows


def test_compiled_expression_columns_and_pickle(data) -> None:
    schema, tbl, _ = data
    c = compile_expression("array_has(tags, 'a') and _rowid > 0 and json_exists(j, '$.c')", schema)
    assert c.columns == ["tags", "j"]
    assert c.virtual_columns == ["_rowid"]
    again = pickle.loads(pickle.dumps(c))
    assert again.evaluate(tbl).equals(c.evaluate(tbl))
    f = parse_filter("_rowaddr > 2 and array_has_any(nums, [1])", schema)
    assert f.columns == ["nums"] and f.virtual_columns == ["_rowaddr"]
    assert pickle.loads(pickle.dumps(f)).apply(tbl).equals(f.apply(tbl))


def test_rowoffset_is_the_position_of_the_live_row(data) -> None:
    """pylance refuses ``_rowoffset`` in a filter (it projects it); we accept it."""
    schema, tbl, _ = data
    assert parse_filter("_rowoffset < 2", schema).apply(tbl).column("id").to_pylist() == [0, 2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo(i) = 1", "unknown SQL function 'foo'"),
        ("cosine(f) > 1", "unknown SQL function 'cosine'"),
        ("regexp_like(s, pat, 'q')", "flag 'q'"),
        ("i >", "'>' is missing its right-hand operand"),
        ("(i > 3", "closing parenthesis"),
        ("i > 3)", "unexpected ')'"),
        ("i b", "missing operator"),
        ("'abc", "not closed"),
        ("array_has_any(tags, 'a')", "array literal such as"),
        ("starts_with(s, i)", "needs a string argument"),
        ("date_trunc('fortnight', ts) is null", "granularity 'fortnight'"),
        ("round(f, f) > 1", "integer number of decimal places"),
        ("json_get_int(s, 'a') = 1", "JSON column"),
        ("regexp_like(s, 'a', 'q')", "flag 'q'"),
        ("abs(i, 1) > 1", "provided arguments (2)"),
        ("json_get_int(j) = 1", "takes 2 arguments"),
        ("array_length(tags, 2) = 1", "only dimension 1"),
    ],
)
def test_errors_name_the_problem(data, text: str, message: str) -> None:
    schema, _, _ = data
    with pytest.raises(FilterError) as info:
        parse_filter(text, schema)
    assert message in str(info.value)
    assert "class" not in str(info.value) and "sqlglot" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_virtual_column_is_named(data) -> None:
    schema, tbl, _ = data
    with pytest.raises(FilterError, match="_rowaddr"):
        parse_filter("_rowaddr > 1", schema).apply(tbl.drop(["_rowaddr"]))
    with pytest.raises(FilterError, match="_rowid"):
        compile_expression("_rowid + 1", schema).evaluate(tbl.drop(["_rowid"]))


@pytest.mark.parametrize(
    ("columns", "predicate"),
    [
        ({"l": "left(s, 2)", "r": "right(s, i)", "p": "lpad(s, 7, pat)", "q": "rpad(ls, 3)"}, "starts_with(s, pat)"),
        ({"g": "json_get(j, 'c')", "k": "round(f, i)"}, "json_get(j, 'a') IS NOT NULL AND regexp_like(s, pat, 'i')"),
        ({"id": "id"}, "ends_with(s, pat) OR contains(ls, pat)"),
    ],
)
def test_new_functions_through_a_dataset_scan(data, columns: dict, predicate: str) -> None:
    """The same projection and filter through pylance's scanner and ours (fragments, deletions)."""
    import lance_gpu

    _, _, ds = data
    ref = ds.to_table(columns=columns, filter=predicate)
    ours = lance_gpu.dataset(ds.uri).to_table(columns=columns, filter=predicate)
    assert ours.schema == ref.schema
    assert repr(ours.to_pylist()) == repr(ref.to_pylist())


def test_a_pattern_column_that_does_not_compile_fails_the_query(tmp_path) -> None:
    import lance_gpu

    uri = str(tmp_path / "re.lance")
    lance.write_dataset(pa.table({"s": ["a", "b"], "p": ["a", "("]}), uri)
    with pytest.raises(Exception, match="Regular expression did not compile"):
        lance.dataset(uri).to_table(filter="regexp_like(s, p)")
    with pytest.raises(pa.ArrowInvalid, match="Regular expression did not compile"):
        lance_gpu.dataset(uri).to_table(filter="regexp_like(s, p)")


def _text_table() -> pa.Table:
    """Non-ASCII, empty and NULL text; flags, patterns, JSON paths and keys as columns."""
    docs = [{"a": 1, "b": "x", "c": [1, 2]}, {"a": 2, "c": ["q"]}, None, {}, {"ñ": 3, "c": [3]}, [1, 2]]
    return pa.table(
        {
            "s": ["héllo wörld", "abc", None, "", "ñañ", "日本語テキスト"],
            "sub": ["wö", "c", "x", None, "ñ", "テ"],
            "u": ["straße", "ǅemal ÉCOLE", "İstanbul", "ﬁne", "a\u0301b", "ΣΑΣ"],
            "pat": ["H.*", "B", "a", "", "Ñ", "本"],
            "flags": ["i", "s", "i", None, "i", "x"],
            "n": pa.array([2, -1, 3, None, 0, 1], pa.int64()),
            "i": pa.array([12345, -7, None, 0, 99, 5], pa.int64()),
            "f": pa.array([1.5, 1e20, None, -0.0, 1e-7, 123456.789]),
            "f32": pa.array([1.5, 1e13, None, 0.1, 1e-6, float("nan")], pa.float32()),
            "b": [True, False, None, True, True, False],
            "d": pa.array([dt.date(2020, 1, 2)] * 5 + [None], pa.date32()),
            "j": pa.array([None if d is None else json.dumps(d) for d in docs], pa.json_(pa.utf8())),
            "path": ["$.c", "c", "$.a", None, "$.ñ", "$[0]"],
            "key": ["a", "b", "a", None, "ñ", "1"],
            "val": ["2", "q", "1", "1", None, "1"],
        }
    )


@pytest.fixture(scope="module")
def text_data(tmp_path_factory: pytest.TempPathFactory):
    uri = str(tmp_path_factory.mktemp("text") / "text.lance")
    lance.write_dataset(_text_table(), uri)
    return lance.dataset(uri)


TEXT_EXPRESSIONS = [
    # strpos counts characters; the substring may be a column
    "strpos(s, sub)", "strpos(s, 'ö')", "strpos(s, 'テ')", "strpos(s, '')", "strpos(s, NULL)", "strpos(NULL, s)",
    "strpos(s, 'c')",
    # numbers, booleans and dates coerced to text where pylance coerces them
    "left(i, 2)", "right(i, 2)", "left(f, 3)", "right(f32, 4)", "lpad(i, 8, '0')", "rpad(f, 12, '*')", "lpad('ab', 5, i)",
    "length(i)", "char_length(f)", "character_length(f32)", "length(b)", "length(d)", "reverse(i)", "reverse(f)",
    "reverse(d)", "left(b, 2)", "concat(f, s)", "concat(s, b, d, i)", "concat(f32)", "cast(f as string)",
    "cast(f32 as string)", "regexp_match(i, '1')", "regexp_match(b, 't')", "repeat(s, n)", "lpad(s, n, s)",
    "left(s, n)", "right(s, n)", "length(s)", "reverse(s)", "upper(s)", "initcap(s)",
    # Unicode's full case mappings, combining marks, multi-byte trims and fills
    "upper(u)", "lower(u)", "initcap(u)", "reverse(u)", "length(u)", "octet_length(u)", "lpad(u, 8, 'ñé')",
    "btrim(u, 'ßa')", "right(u, 2)", "regexp_like(u, 'é', 'i')", "u ilike '%é%'", "strpos(u, 'b')", "contains(u, 'ﬁ')",
    # regular expression flags as a column (NULL flags: none), verbose mode
    "regexp_like(s, pat, flags)", "regexp_like(s, 'H', flags)", "regexp_match(s, pat, flags)",
    "regexp_match(s, '(h)(.)', flags)", "regexp_like(s, 'L L', 'ix')", "regexp_like(s, 'h', NULL)",
    # JSON paths, keys and values as columns
    "json_extract(j, path)", "json_exists(j, path)", "json_array_length(j, path)",
    "json_array_contains(j, path, val)", "json_array_contains(j, '$.c', val)", "json_get(j, key)",
    "json_get_int(j, key)", "json_get_string(j, key)", "json_get(j, n)", "json_get_int(j, n)",
    "json_extract(j, NULL)", "json_get_string(j, NULL)", "json_extract(j, '$.ñ')",
    # refused by both
    "upper(i)", "strpos(i, '3')", "starts_with(i, '1')", "octet_length(f)", "replace(i, '1', 'x')",
    "regexp_like(i, '1')", "initcap(b)", "repeat(i, 2)",
]


@pytest.mark.parametrize("expression", TEXT_EXPRESSIONS)
def test_text_functions_match_pylance(text_data, expression: str) -> None:
    """Projections over non-ASCII, empty and NULL text; refusals match refusals."""
    import lance_gpu

    try:
        ref = text_data.to_table(columns={"v": expression}).column("v")
    except (ValueError, pa.ArrowInvalid) as e:
        with pytest.raises((FilterError, pa.ArrowInvalid)):
            lance_gpu.dataset(text_data.uri).to_table(columns={"v": expression})
        assert isinstance(e, ValueError)
        return
    ours = lance_gpu.dataset(text_data.uri).to_table(columns={"v": expression}).column("v")
    assert ours.type == ref.type, (expression, ours.type, ref.type)
    assert repr(ours.to_pylist()) == repr(ref.to_pylist()), expression


def test_per_row_empty_flags_fail_as_in_pylance(tmp_path) -> None:
    """pylance builds ``(?)pattern`` for an empty flags value in a flags column and fails."""
    import lance_gpu

    uri = str(tmp_path / "flags.lance")
    lance.write_dataset(pa.table({"s": ["a", "b"], "fl": ["i", ""]}), uri)
    with pytest.raises(Exception, match="did not compile"):
        lance.dataset(uri).to_table(filter="regexp_like(s, 'A', fl)")
    with pytest.raises(pa.ArrowInvalid, match="did not compile"):
        lance_gpu.dataset(uri).to_table(filter="regexp_like(s, 'A', fl)")


# -- decimal arithmetic (uint64 with signed integers, decimal128 columns) ------------------
#
# DataFusion evaluates ``uint64 <op> int64`` (``_rowid % 3``) and arithmetic on decimals in
# Decimal128; each case runs on pylance and on lance_gpu over one pylance-written dataset.

D = __import__("decimal").Decimal


def _decimal_table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([0, 1, 2, None, 4, 5, -6, 7, 8, -(2**63)], pa.int64()),
            "u": pa.array([0, 1, 2, 3, None, 5, 6, 7, 2**64 - 1, 9], pa.uint64()),
            "i32": pa.array([1, -2, 3, -4, 5, None, 7, 8, 9, 10], pa.int32()),
            "nz": pa.array([3, -7, 2, 5, None, -1, 4, 9, 6, 2**63 - 1], pa.int64()),  # no zero
            "d": pa.array(
                [D("1.50"), D("-2.25"), None, D("3.00"), D("0.01"), D("10.10"), D("-0.50"), D("7.77"), D("8.00"), D("9.99")],
                pa.decimal128(10, 2),
            ),
            "e": pa.array(
                [D("1.5"), D("2.0"), D("3.1"), D("4"), D("1.0"), None, D("-2.5"), D("3.3"), D("1.1"), D("-2.2")],
                pa.decimal128(5, 1),
            ),
            "z": pa.array([D("1.5"), D("0"), None, D("1"), D("2"), D("3"), D("4"), D("5"), D("6"), D("7")], pa.decimal128(5, 1)),
        }
    )


@pytest.fixture(scope="module")
def decimal_data(tmp_path_factory: pytest.TempPathFactory):
    import lance_gpu

    uri = str(tmp_path_factory.mktemp("dec") / "dec.lance")
    lance.write_dataset(_decimal_table(), uri, max_rows_per_file=4)
    return lance.dataset(uri), lance_gpu.dataset(uri)


def _run(ds, **kwargs):
    try:
        return ds.to_table(**kwargs)
    except Exception as e:  # noqa: BLE001 - the caller judges the type
        return e


def _assert_same_result(ref, ours, what: str) -> None:
    if isinstance(ref, Exception):
        assert isinstance(ours, Exception), (what, ref, ours)
        # ours subclasses the class pylance raises (ArrowInvalid, or ValueError for a bad literal)
        assert isinstance(ours, type(ref)), (what, type(ref), type(ours))
        return
    assert not isinstance(ours, Exception), (what, ref, ours)
    assert ours.schema == ref.schema, (what, ours.schema, ref.schema)
    assert ours.to_pylist() == ref.to_pylist(), what


DECIMAL_FILTERS = [
    # the brief's examples: uint64 (row ids, columns) with an int64 literal or column
    "_rowid % 3 = 0", "u % 3 = 0", "u + id > 5",
    "_rowid % 2 = 1", "_rowid % 4 = 0 and id > 2", "_rowid + 1 = 3", "_rowid / 3 = 1", "_rowid - 5 < 0",
    "u - 20 < 0", "u - id = 0", "u * id > 10", "u / nz > 1", "u % nz = 0", "id % u = 0", "nz % u = 1",
    "u + i32 > 8", "u * i32 < 0", "(u + id) % 4 = 2", "u % 3 = 0.0", "u + id > id", "u % nz > i32",
    "u - id > 18446744073709551615", "u * 1000000000000000000000 > 0", "u / id > 1", "u % id = 0",
    "(u + id) * (u + id) > 0", "-(u - id) > 0",
    # decimal128 columns
    "d * 2 > 3", "d + e > id", "d % 3 = 1.5", "d = 3", "d + 1 > 5", "d - 20 < 0", "d + i32 > 5",
    "d * e < 0", "d / e > 1", "d % e > 0", "d / z > 1", "d % z = 0", "d / 0 > 1", "d + u > 10",
    "d * d * d * d * d > 100", "-d > 0", "abs(d) > 2", "d / id > 0", "d > 1.5", "d = 100000000000", "d + NULL > 1", "NULL % u = 1",
]


@pytest.mark.parametrize("predicate", DECIMAL_FILTERS)
def test_decimal_arithmetic_filter_matches_pylance(decimal_data, predicate: str) -> None:
    ref_ds, our_ds = decimal_data
    ref = _run(ref_ds, filter=predicate, with_row_id=True)
    ours = _run(our_ds, filter=predicate, with_row_id=True)
    _assert_same_result(ref, ours, predicate)


DECIMAL_PROJECTIONS = [
    "u % 3", "u + id", "u - id", "u * id", "u / nz", "u % nz", "nz % u", "u / id", "u + i32", "u * i32",
    "u % i32", "i32 % u", "(u + id) % 7", "(u + id) / 3", "u - 20", "u % -3", "id + nz",
    "d + e", "d - e", "d * e", "d / z", "d % z", "z / d", "d + id", "d * id", "d / nz", "d % nz",
    "d % i32", "d / 3", "d % 3", "d + 1", "d * 2", "d + 1.5", "d / 0", "d % 0", "u + d", "i32 + d",
    "d * d * d * d * d", "d * d * d * d * d * d * d * d * d * d", "e / e", "-d", "abs(d)",
    "(u + id) * (u + id)", "d + 100000000000",
]


@pytest.mark.parametrize("expression", DECIMAL_PROJECTIONS)
def test_decimal_arithmetic_projection_matches_pylance(decimal_data, expression: str) -> None:
    ref_ds, our_ds = decimal_data
    ref = _run(ref_ds, columns={"x": expression})
    ours = _run(our_ds, columns={"x": expression})
    _assert_same_result(ref, ours, expression)


def test_decimal_division_by_zero_is_our_typed_arrow_invalid(decimal_data) -> None:
    from lance_gpu.errors import DecimalArithmeticError, LanceGpuError

    _, our_ds = decimal_data
    for predicate in ("u % id = 0", "d / z > 1", "d % 0 > 1"):
        with pytest.raises(DecimalArithmeticError, match="Divide by zero") as info:
            our_ds.to_table(filter=predicate)
        assert isinstance(info.value, pa.ArrowInvalid) and isinstance(info.value, LanceGpuError)


def test_decimal_modulo_of_extreme_integers_is_exact() -> None:
    from lance_gpu.filter import parse_expression

    values = [2**64 - 1, 2**63, 2**63 - 1, 0, None, 12345678901234567891]
    divisors = [-(2**63), 2**63 - 1, -1, -7, 3, None]
    tbl = pa.table({"u": pa.array(values, pa.uint64()), "s": pa.array(divisors, pa.int64())})
    for text, op in (("u % s", "mod"), ("u + s", "add"), ("u - s", "sub"), ("u * s", "mul")):
        got = parse_expression(text, tbl.schema).evaluate(tbl).to_pylist()
        want: list[object] = []
        for a, b in zip(values, divisors, strict=True):
            if a is None or b is None:
                want.append(None)
            elif op == "mod":
                want.append(D(a % abs(b)))  # u is never negative: the remainder is not either
            else:
                want.append(D({"add": a + b, "sub": a - b, "mul": a * b}[op]))
        assert got == want, (text, got, want)


# DataFusion functions pylance 14 accepts (issue 26 item 5): math, NULL handling, strings
DATAFUSION_PROJECTIONS = [
    "sin(f)", "cos(f32)", "tan(i)", "asin(f32)", "acos(f32)", "atan(f)", "atan2(f, f32)", "atan2(f32, f32)", "cot(f)",
    "cot(f32)", "degrees(f)", "radians(f32)", "isnan(f)", "iszero(f32)", "iszero(i)", "nanvl(f, 1.0)", "nanvl(f32, f32)",
    "log(f)", "log(2, f)", "log(10, i)", "log(3.5, f32)", "nullif(i, 1)", "nullif(s, 'banana')", "ifnull(i, 0)",
    "nvl(s, 'z')", "nvl2(i, 1, 0)", "nvl2(s, f, f32)", "nvl2(s, i, 1)", "greatest(i, 2)", "least(i, 2, f)",
    "greatest(f, f32)", "least(s, 'b')", "split_part(s, 'a', 2)", "split_part(s, 'a', -1)", "split_part(s, 'p', 5)",
    "split_part(ls, 'e', 2)", "split_part(ls, 'an', -2)", "split_part(s, '', 1)", "split_part(s, '', 2)",
    "split_part(s, '', -1)", "split_part(s, NULL, 1)", "bit_length(s)", "bit_length(ls)", "instr(s, 'a')",
    "regexp_count(s, 'a')", "regexp_count(s, '[a-z]')", "regexp_count(s, 'A', 1, 'i')", "regexp_count(s, 'p', 3)",
    "regexp_count(ls, 'e')", "regexp_replace(s, 'a', 'A')", "regexp_replace(s, 'a', 'A', 'g')",
    "regexp_replace(s, '(a)(n)', '$2$1', 'g')", "regexp_replace(s, '(p)(p)', '${2}-${1}')", "regexp_replace(s, '(a)(n)', '\\2\\1')",
    "regexp_replace(ls, 'e', '_', 'g')", "regexp_replace(s, 'A', '_', 'gi')", "arrow_cast(i, 'Int64')",
    "arrow_cast(f, 'Float32')", "arrow_cast(i, 'Utf8')", "arrow_cast(s, 'LargeUtf8')", "arrow_cast(i, 'Int8')",
    "arrow_typeof(i)", "arrow_typeof(s)", "arrow_typeof(ls)", "arrow_typeof(f32)",
    "ascii(s)", "ascii(ls)", "md5(s)", "md5(ls)", "sha224(s)", "sha256(s)", "sha384(ls)", "sha512(s)", "to_hex(i)",
    "translate(s, 'ap', 'AP')", "translate(s, 'abc', 'x')", "translate(ls, 'e', 'E')", "levenshtein(s, 'apple')",
    "levenshtein(ls, 'x')", "find_in_set('b', s)", "find_in_set(s, 'x,cherry')", "find_in_set(ls, 'banana')",
    "substr_index(s, 'a', 1)", "substr_index(s, 'a', -1)", "substr_index(s, 'a', 0)", "substr_index(ls, 'e', 2)",
    "encode(s, 'hex')", "encode(s, 'base64')", "encode(ls, 'hex')",
]


@pytest.mark.parametrize("expression", DATAFUSION_PROJECTIONS)
def test_datafusion_functions_match_pylance(data, expression: str) -> None:
    """Values and types as pylance's, through a dataset scan and the compiled expression."""
    schema, tbl, ds = data
    ref = ds.to_table(columns={"v": expression}).column("v")
    compiled = compile_expression(expression, schema)
    ours = compiled.evaluate(tbl)
    assert ours.type == ref.type == compiled.type, (expression, ours.type, ref.type)
    assert repr(ours.to_pylist()) == repr(ref.to_pylist()), expression  # NaN equal to NaN


@pytest.mark.parametrize(
    "predicate",
    ["nullif(i, 1) IS NULL", "greatest(i, 2) > 2", "split_part(s, 'a', 2) = 'nan'", "isnan(f)", "sin(f) > 0",
     "nvl(i, 0) = 0", "instr(s, 'p') = 2", "least(f, f32) < 0"],
)
def test_datafusion_functions_in_filters_match_pylance(data, predicate: str) -> None:
    _schema, _tbl, ds = data
    import lance_gpu

    ours = lance_gpu.dataset(ds.uri).to_table(filter=predicate, columns=["id"]).column("id").to_pylist()
    assert ours == ds.to_table(filter=predicate, columns=["id"]).column("id").to_pylist(), predicate


def test_split_part_zero_is_refused_as_pylance_refuses_it(data) -> None:
    _schema, _tbl, ds = data
    import lance_gpu

    with pytest.raises(ValueError):
        ds.to_table(columns={"v": "split_part(s, 'a', 0)"})
    with pytest.raises(FilterError, match="must not be zero"):
        lance_gpu.dataset(ds.uri).to_table(columns={"v": "split_part(s, 'a', 0)"})


# More DataFusion functions (issue 26 item 5). ``ceil`` / ``floor`` / ``substr`` / ``substring`` /
# ``trim`` / ``extract`` are SQL keywords pylance 14's planner refuses unquoted, but DataFusion has
# them: pylance computes them when the name is backticked (`ceil`(f)), which is the reference here;
# lance-gpu takes both spellings.
MORE_FUNCTIONS = [
    "`ceil`(f)", "`ceil`(f32)", "`ceil`(i)", "`floor`(f)", "`floor`(f32)", "`substr`(s, 2)", "`substr`(s, 2, 3)",
    "`substr`(s, 0, 3)", "`substr`(s, -1, 3)", "`substr`(s, 2, 0)", "`substr`(s, i)", "`substr`(ls, 2, 2)",
    "`substr`(s, 2, -1)", "`substring`(s, 1, 2)", "`trim`(s)", "`trim`(ls)", "cbrt(f)", "cbrt(i)", "cbrt(f32)",
    "sinh(f)", "cosh(f32)", "tanh(i)", "asinh(f)", "acosh(f)", "atanh(f)", "atanh(f32)", "pi()", "gcd(i, 8)",
    "lcm(i, 8)", "gcd(i, i)", "factorial(abs(i))", "factorial(i)", "chr(abs(i) + 64)", "chr(i)",
    "concat_ws('-', s, ls)", "concat_ws('-', s, NULL, 'x')", "concat_ws(NULL, s)", "concat_ws('-', i, f)",
    "cardinality(nums)", "cardinality(tags)", "array_position(nums, 2)", "array_position(tags, 'c')",
    "array_position(nums, 1, 2)", "string_to_array(s, 'a')", "string_to_array(ls, 'e')", "string_to_array(s, '')",
    "string_to_array(s, NULL)", "string_to_array(s, 'a', '')", "array_to_string(nums, ',')",
    "array_to_string(tags, '-', '*')", "empty(nums)", "array_empty(tags)", "make_date(2024, 1, abs(i) + 1)",
    "make_date(2024, 2, 30)", "to_timestamp(i)", "to_timestamp(f)", "to_timestamp(ts)", "to_timestamp('2024-01-01')",
    "to_timestamp_seconds(i)", "to_timestamp_millis(i)", "to_timestamp_micros(i)", "to_timestamp_nanos(i)",
    "to_timestamp('2024-03-05T10:20:30.5Z')", "to_timestamp('2024-03-05 10:20', '%Y-%m-%d %H:%M')",
    "to_date(ts)", "to_date(i)", "to_date('2024-03-05T01:02:03')", "to_unixtime(ts)", "to_unixtime(d)",
    "from_unixtime(i)", "date_part('year', ts)", "date_part('month', d)", "date_part('hour', ts)",
    "date_part('second', ts)", "date_part('millisecond', ts)", "date_part('microsecond', ts)",
    "date_part('nanosecond', ts)", "date_part('dow', ts)", "date_part('doy', d)", "date_part('week', ts)",
    "date_part('quarter', ts)", "date_part('epoch', ts)", "date_part('epoch', d)", "datepart('DAY', ts)",
    # lists
    "array_sort(nums)", "array_sort(nums, 'DESC')", "array_sort(nums, 'DESC', 'NULLS LAST')", "list_sort(tags)",
    "array_distinct(tags)", "array_max(nums)", "array_min(tags)", "array_reverse(nums)", "array_append(nums, 9)",
    "array_append(nums, NULL)", "array_prepend(9, nums)", "array_concat(nums, [7, 8])", "array_cat(nums, nums)",
    "array_slice(nums, 1, 2)", "array_slice(nums, -2, -1)", "array_slice(nums, 0, 1)", "array_slice(nums, 1, 3, 2)",
    "array_remove(nums, 2)", "array_remove_all(tags, 'a')", "array_has([1, 2], i)", "list_has(nums, 1)",
    "array_has_any(nums, nums)", "array_has_all(tags, string_to_array(s, 'a'))", "array_positions(nums, 2)",
    "array_pop_back(nums)", "array_pop_front(tags)", "flatten(nums)",
    # structs, text of times, overlay, trunc
    "named_struct('a', i, 'b', s)", "struct(i, s)", "get_field(st, 'name')", "get_field(named_struct('a', i), 'a')",
    "to_char(ts, '%Y-%m')", "date_format(d, '%d/%m/%Y')", "to_char(ts, '%Y-%m-%d %H:%M:%S')",
    "`overlay`(s, 'X', 2, 1)", "`overlay`(s, 'XY', 2)", "`overlay`(s, 'X', 0, 1)", "trunc(f, 1)", "trunc(f32, 1)",
    "trunc(f, -1)",
    "array_union(nums, [9, 1])", "array_intersect(nums, [2, 3])", "array_except(tags, ['b'])",
    "array_replace(nums, 2, 5)", "array_replace_all(nums, 2, 5)", "array_replace_n(nums, 2, 5, 1)",
    "array_remove_n(nums, 1, 1)", "array_ndims(nums)", "array_dims(nums)", "array_repeat(i, 2)", "array_repeat(s, 0)",
    "array_resize(nums, 3, 0)", "array_resize(tags, 1)", "regexp_instr(s, 'a')", "regexp_instr(s, 'A', 1, 1, 'i')",
    "regexp_instr(s, 'a', 2)", "regexp_instr(s, '(a)(n)', 1, 1, '', 2)", "regexp_instr(s, 'a', 1, 2)",
    # DataFusion's other names and the rest of its list
    "substring_index(s, 'a', 1)", "array_indexof(nums, 2)", "list_join(tags, '-')", "array_join(tags, '-')",
    "make_list(i, 1)", "make_array(i, 1)", "make_array(s, 'x')", "string_to_list(s, 'a')", "datetrunc('month', ts)",
    "today()", "list_length(nums)", "decode(encode(s, 'base64'), 'base64')", "decode(encode(s, 'hex'), 'hex')",
    "decode(s, 'hex')", "digest(s, 'md5')", "digest(s, 'sha512')", "digest(s, 'blake2b')", "range(3)",
    "range(1, i)", "range(5, 1, -2)", "generate_series(1, 3)", "generate_series(3, 1, -1)",
    "array_distance(nums, [1, 2])", "array_distance([1.0, 2.0], [2.0, 2.0])",
    # differences of dates and timestamps
    "ts - ts", "d - d", "d - to_date('2024-01-01')", "ts - to_timestamp('2024-01-01')",
    "date_bin(INTERVAL '1 day', ts)", "date_bin(INTERVAL '15 minutes', ts, TIMESTAMP '2024-01-01 00:05:00')",
    "date_bin(INTERVAL '2' HOUR, ts)", "date_bin(INTERVAL '1 hour 30 minutes', ts)", "date_bin(INTERVAL '1 week', d)",
    "date_bin(INTERVAL '7 seconds', ts)", "date_bin(INTERVAL '1 month', ts)", "date_bin(INTERVAL '3 months', d)",
    "date_bin(INTERVAL '2 years', ts)",
    # TRY_CAST (one kernel per target type) and LIKE with a pattern per row
    "TRY_CAST(s AS INT)", "TRY_CAST(s AS TIMESTAMP)", "TRY_CAST(f AS INT)", "TRY_CAST(i AS TINYINT)",
    "TRY_CAST('12' AS INT)", "TRY_CAST('x' AS INT)", "TRY_CAST(s AS DATE)", "TRY_CAST(f AS STRING)",
    "s LIKE pat", "s LIKE concat(pat, '%')", "s ILIKE upper(s)", "s NOT LIKE pat", "ls LIKE concat('%', pat)",
    # CAST of text columns to times, read as pylance reads them
    "CAST(tt AS TIMESTAMP)", "CAST(tt AS DATE)", "CAST(tt AS TIMESTAMP(3))", "tt > '2024-03-05 05:00:00'",
    "CAST(s AS DATE)", "TRY_CAST(tt AS TIMESTAMP)",
]


def _project(ds, expression: str):
    try:
        return ds.to_table(columns={"id": "id", "v": expression}).column("v")
    except Exception as e:  # noqa: BLE001 - the caller compares the classes
        return e


@pytest.mark.parametrize("expression", MORE_FUNCTIONS)
def test_more_datafusion_functions_match_pylance(data, expression: str) -> None:
    import lance_gpu

    _schema, _tbl, ds = data
    ref = _project(ds, expression)
    ours = [_project(lance_gpu.dataset(ds.uri), text) for text in {expression, expression.replace("`", "")}]
    for got in ours:
        if isinstance(ref, Exception):
            assert isinstance(ref, pa.ArrowInvalid) and isinstance(got, pa.ArrowInvalid), (expression, ref, got)
            continue
        assert not isinstance(got, Exception), (expression, got)
        assert got.type == ref.type, (expression, got.type, ref.type)
        assert repr(got.to_pylist()) == repr(ref.to_pylist()), expression


@pytest.mark.parametrize(
    ("ours", "reference"),
    [("ceil(f) > 1", "`ceil`(f) > 1"), ("floor(f) < 0", "`floor`(f) < 0"), ("substr(s, 1, 2) = 'Ap'", "`substr`(s, 1, 2) = 'Ap'"),
     ("SUBSTRING(s FROM 2 FOR 3) = 'ana'", "`substring`(s, 2, 3) = 'ana'"), ("trim(s) = 'Apple'", "`trim`(s) = 'Apple'"),
     ("TRIM(BOTH 'a' FROM s) = 'banan'", "btrim(s, 'a') = 'banan'"), ("EXTRACT(YEAR FROM ts) = 2024", "date_part('year', ts) = 2024"),
     ("to_timestamp(ts) > to_timestamp('2024-03-01')", "to_timestamp(ts) > to_timestamp('2024-03-01')"),
     ("cardinality(tags) > 1 AND date_part('month', d) > 1", "cardinality(tags) > 1 AND date_part('month', d) > 1"),
     ("OVERLAY(s PLACING 'X' FROM 2 FOR 1) = 'AXple'", "`overlay`(s, 'X', 2, 1) = 'AXple'"),
     ("array_max(nums) > 1 AND named_struct('a', i).a > 0", "array_max(nums) > 1 AND named_struct('a', i).a > 0")],
)
def test_keyword_functions_filter_as_datafusion_computes_them(data, ours: str, reference: str) -> None:
    """The SQL keyword forms pylance refuses select the rows DataFusion's functions select."""
    import lance_gpu

    _schema, _tbl, ds = data
    want = ds.to_table(filter=reference, columns=["id"]).column("id").to_pylist()
    assert lance_gpu.dataset(ds.uri).to_table(filter=ours, columns=["id"]).column("id").to_pylist() == want
