# SPDX-License-Identifier: Apache-2.0
"""Literals, indexing and casts in filters and projections (issue 26 item 5): binary literals
against ``large_binary``, array literals and list comparisons, list / struct indexing,
``arrow_cast`` / ``arrow_typeof`` with DataFusion's type names, the JSON functions on
``json_get``'s JSONB, and pylance's ``Invalid user input:`` messages — each against pylance
14.0.2 over the same pylance-written data."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.errors import FilterError  # noqa: E402


@pytest.mark.parametrize("predicate", ["lb = X'616263'", "b = X'616263'", "lb IN (X'78', X'616263')",
                                       "lb <> X'78'", "lb > X'6100'"])
def test_binary_literal_against_large_binary(tmp_path, predicate: str) -> None:
    uri = str(tmp_path / "b.lance")
    lance.write_dataset(pa.table({"lb": pa.array([b"abc", b"x", None], pa.large_binary()),
                                  "b": pa.array([b"abc", b"y", b"z"])}), uri)
    assert lance_gpu.dataset(uri).to_table(filter=predicate) == lance.dataset(uri).to_table(filter=predicate)


DOCS = [{"a": {"b": [1, 2, {"c": "x"}]}, "n": 5}, {"a": {"b": []}, "n": "7"}, None, {"a": 1}, {"a": {"b": [True]}}]


def _table() -> pa.Table:
    nan = float("nan")
    return pa.table({
        "id": pa.array(range(5), pa.int64()),
        "nums": pa.array([[1, 2], [3], None, [1, None], []], pa.list_(pa.int32())),
        "tags": pa.array([["a", "b"], ["c"], None, [], ["a", None]]),
        "v": pa.array([[1, 2], [3, 4], None, [1, 2], [nan, 0]], pa.list_(pa.float32(), 2)),
        "f": pa.array([[1.5], [nan], None, [-0.0], [0.0]]),
        "ls": pa.array([[{"x": 1, "y": True}], [{"x": 2, "y": False}, {"x": 3, "y": None}], None, [], [None]]),
        "st": pa.array([{"a": 1, "l": [1, 2]}, {"a": 2, "l": []}, None, {"a": None, "l": None}, {"a": 5, "l": [7]}]),
        "j": pa.array([None if d is None else json.dumps(d) for d in DOCS], pa.json_()),
        "lb": pa.array([b"\x01", b"", None, b"abc", b"\x80\x00\x00\x00"], pa.large_binary()),
        "i": pa.array([1, 2, None, 4, 5], pa.int64()),
    })


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory):
    uri = str(tmp_path_factory.mktemp("lit") / "lit.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=3)  # two fragments
    return lance.dataset(uri), lance_gpu.dataset(uri)


def _outcome(run):
    try:
        return run()
    except Exception as e:  # noqa: BLE001 - the caller compares the classes
        return e


def _same(ref, ours, what: str) -> None:
    if isinstance(ref, Exception):
        assert isinstance(ours, Exception), (what, ref, ours)
        if isinstance(ref, pa.ArrowInvalid):  # fails when evaluated, as pylance
            assert isinstance(ours, pa.ArrowInvalid), (what, ref, ours)
        else:
            assert isinstance(ours, FilterError), (what, ref, ours)
            assert type(ref) in type(ours).__mro__, (what, ref, ours)  # pylance's except clause catches ours
            assert str(ours).startswith("Invalid user input: "), (what, ours)
        return
    assert not isinstance(ours, Exception), (what, ref, ours)
    assert ours.schema == ref.schema, (what, ours.schema, ref.schema)
    assert repr(ours.to_pylist()) == repr(ref.to_pylist()), what  # NaN equal to NaN


PROJECTIONS = [
    # array literals compared with lists (element by element, NULL elements first, floats totally ordered)
    "nums = [1,2]", "nums = [1.0, 2.0]", "nums < [2]", "nums != [1,2]", "tags = ['a','b']", "v = [1.0,2.0]",
    "v = [1,2]", "[1,2] = nums", "nums > [1]", "v < [1.5, 0]", "tags > ['a']", "tags = [1]", "nums = ['1']",
    "nums IN ([1,2])", "nums NOT IN ([1,2],[3])", "f = [0.0]", "f = ['nan']", "f > [1.0]", "v = nums", "nums = v",
    "nums >= make_array(1, 2)", "nums = [1, 2.5]", "nums = [[1]]", "nums = tags", "nums = [id]",
    # list and struct indexing (1-based; negative from the end; out of range NULL)
    "nums[1]", "nums[0]", "nums[-1]", "nums[3]", "nums[id]", "tags[1]", "v[2]", "ls[1]", "ls[1]['x']", "ls[1].x",
    "ls[2]['y']", "st['l'][1]", "st.l[2]", "nums[1] = 1", "tags[NULL]", "nums[1 + 1]", "nums[2-1]", "nums[1] + 1",
    "nums[1.5]", "array_element(nums, 1)", "list_element(nums, -1)", "array_element(tags, i)", "ls[1]['z']",
    "id[1]",
    # arrow_cast / arrow_typeof with DataFusion's type names
    "arrow_cast(nums, 'List(Int64)')", "arrow_cast(nums, 'LargeList(Int64)')", "arrow_cast(nums, 'FixedSizeList(2, Int64)')",
    "arrow_cast(id, 'Timestamp(Second, None)')", "arrow_cast(id, 'Timestamp(Nanosecond, Some(\"+00:00\"))')",
    "arrow_cast(id, 'Timestamp(ms)')", "arrow_cast(id, 'Decimal128(10, 2)')", "arrow_cast(id, 'Decimal256(40, 2)')",
    "arrow_cast(id, 'Duration(Second)')", "arrow_cast(id, 'Time32(Second)')", "arrow_cast(id, 'Utf8View')",
    "arrow_cast(nums, 'List(nullable Int64)')", "arrow_cast(id, 'int64')", "arrow_cast(id, 'Date64')",
    "arrow_cast(id, 'Float16')", "arrow_cast(tags, 'List(Utf8View)')", "arrow_cast(id, 'Int32') + 1",
    "arrow_cast(id, 'FixedSizeList(2, Float32)')", "arrow_cast(id, 'Dictionary(Int32, Utf8)')",
    "arrow_typeof(nums)", "arrow_typeof(v)", "arrow_typeof(st)", "arrow_typeof(ls)",
    "arrow_typeof(arrow_cast(id, 'Timestamp(Microsecond, None)'))", "arrow_typeof(arrow_cast(id, 'Timestamp(ms, \"UTC\")'))",
    "arrow_typeof(arrow_cast(id, 'Decimal128(10, 2)'))", "arrow_typeof(arrow_cast(v, 'FixedSizeList(2, Float64)'))",
    # JSON functions on json_get's JSONB and on large_binary columns
    "json_get(json_get(j, 'a'), 'b')", "json_get_string(json_get(json_get(j, 'a'), 'b'), '2')",
    "json_get_int(json_get(j, 'a'), 'b')", "json_extract(json_get(j, 'a'), '$.b[2].c')",
    "json_exists(json_get(j, 'a'), '$.b')", "json_array_length(json_get(j, 'a'), '$.b')",
    "json_get_string(lb, 'a')", "json_get(lb, 'a')", "json_get_int(json_get(j, 'a'), 'zz')",
    "json_array_contains(json_get(j, 'a'), '$.b', 1)", "json_get_bool(json_get(json_get(j, 'a'), 'b'), 0)",
    "json_get_string(st, 'a')",
    "i IS DISTINCT FROM 2", "i IS NOT DISTINCT FROM NULL", "nums IS DISTINCT FROM NULL", "v IS NOT DISTINCT FROM nums",
]


@pytest.mark.parametrize("expression", PROJECTIONS)
def test_projection_matches_pylance(both, expression: str) -> None:
    ref_ds, ours_ds = both
    columns = {"id": "id", "v": expression}  # pylance refuses a projection of constants only
    _same(_outcome(lambda: ref_ds.to_table(columns=columns)), _outcome(lambda: ours_ds.to_table(columns=columns)),
          expression)


FILTERS = [
    "nums = [1,2]", "nums[1] = 1", "tags[-1] = 'b'", "ls[1].x > 1", "nums IN ([1,2],[3])", "v = [1,2] AND id > 0",
    "v >= [1, 2] OR tags = ['c']", "NOT (nums < [2])", "st['l'][1] IS NULL", "array_has(tags, 'a') AND nums[1] = 1",
    "json_get_string(json_get(json_get(j, 'a'), 'b'), '2') IS NULL", "json_get_int(json_get(j, 'a'), 'b') > 0",
    "arrow_cast(id, 'Int8') > 2", "arrow_typeof(nums) = 'List(Int32)'",
    # IS [NOT] DISTINCT FROM: NULL equal to NULL, never NULL
    "i IS DISTINCT FROM 2", "i IS NOT DISTINCT FROM NULL", "NOT (i IS NOT DISTINCT FROM 4)",
    "nums IS DISTINCT FROM [3]", "st.a IS NOT DISTINCT FROM i",
]


@pytest.mark.parametrize("predicate", FILTERS)
def test_filter_matches_pylance(both, predicate: str) -> None:
    ref_ds, ours_ds = both
    _same(_outcome(lambda: ref_ds.to_table(filter=predicate, columns=["id"])),
          _outcome(lambda: ours_ds.to_table(filter=predicate, columns=["id"])), predicate)


def test_update_with_an_array_literal_sets_a_fixed_size_list(tmp_path) -> None:
    """``update(vec="[42.0, 43.0]")`` on a ``fixed_size_list<float>[2]`` column, as pylance."""
    data = pa.table({"id": range(3), "vec": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.float32(), 2))})
    results = []
    for lib, where in ((lance, "ref"), (lance_gpu, "ours")):
        uri = str(tmp_path / where)
        lance.write_dataset(data, uri)
        ds = lib.dataset(uri)
        ds.update({"vec": "[42.0, 43.0]"}, where="id > 0")
        results.append(lance.dataset(uri).to_table().sort_by("id"))  # read back by pylance
    assert results[0] == results[1]
    assert results[1].column("vec").to_pylist() == [[1.0, 2.0], [42.0, 43.0], [42.0, 43.0]]


def test_add_columns_with_a_typed_null(tmp_path) -> None:
    """pylance's ``add_columns({"v": "arrow_cast(NULL, 'FixedSizeList(4, Float32)')"})``."""
    uri = str(tmp_path / "n.lance")
    lance.write_dataset(pa.table({"id": range(3)}), uri)
    lance_gpu.dataset(uri).add_columns({"vector": "arrow_cast(NULL, 'FixedSizeList(4, Float32)')"})
    got = lance.dataset(uri).to_table()
    assert got.schema.field("vector").type == pa.list_(pa.float32(), 4)
    assert got.column("vector").null_count == 3


@pytest.mark.parametrize(
    ("predicate", "words"),
    [("str BETWEEN 10 AND 20", "Invalid user input"), ("str > 10", "Invalid user input"),
     ("str AN", "Invalid user input"), ("🥞", "Invalid user input"), ("foo = 7", "No field named foo"),
     ("int", "does not return a boolean")],
)
def test_bad_filters_raise_pylance_words(tmp_path, predicate: str, words: str) -> None:
    """pylance's own test_illegal_predicates: a ValueError whose message matches these words."""
    uri = str(tmp_path / "w.lance")
    lance.write_dataset(pa.table({"int": [1, 2], "str": ["a", "b"]}), uri)
    for lib in (lance, lance_gpu):
        with pytest.raises(ValueError, match=words):
            lib.dataset(uri).to_table(filter=predicate)


@pytest.mark.parametrize(
    "predicate",
    ["id > 50 AND nums[1] = 1", "nums = [1, 7] OR id < 3", "array_has(tags, 'a') AND nums[-1] > 90",
     "(id IS DISTINCT FROM 5) AND id < 4", "array_has_any(tags, ['c']) AND array_max(nums) > 95",
     "id IN (1, 2) AND named_struct('a', id).a = 1", "NOT (nums[1] = 0) AND id < 10"],
)
def test_new_constructs_next_to_scalar_indices(tmp_path, predicate: str) -> None:
    """Terms a BTREE / LABEL_LIST index answers, joined with the new constructs (which the
    index planner leaves to the filter): the rows pylance gives."""
    uri = str(tmp_path / "ix.lance")
    data = pa.table({"id": range(100), "nums": pa.array([[i % 3, i] for i in range(100)], pa.list_(pa.int32())),
                     "tags": pa.array([["a", "b"] if i % 2 else ["c"] for i in range(100)])})
    ref = lance.write_dataset(data, uri)
    ref.create_scalar_index("id", "BTREE")
    ref.create_scalar_index("tags", "LABEL_LIST")
    want = lance.dataset(uri).to_table(filter=predicate).sort_by("id")
    assert lance_gpu.dataset(uri).to_table(filter=predicate).sort_by("id") == want


def test_list_comparisons_on_random_lists_match_pylance(tmp_path) -> None:
    """Random lists (NULL lists and items, NaN, -0.0, prefixes) against constant lists with
    every operator: the vectorised comparison gives pylance's rows."""
    import numpy as np

    rng = np.random.default_rng(7)
    pool_f = [0.0, -0.0, 1.5, float("nan"), None, -2.0]
    pool_s = ["a", "b", "", None, "ab"]
    rows_f, rows_s, rows_i = [], [], []
    for _ in range(400):
        size = int(rng.integers(0, 4))
        rows_f.append(None if rng.random() < 0.1 else [pool_f[int(rng.integers(len(pool_f)))] for _ in range(size)])
        rows_s.append(None if rng.random() < 0.1 else [pool_s[int(rng.integers(len(pool_s)))] for _ in range(size)])
        rows_i.append(None if rng.random() < 0.1 else [int(rng.integers(-1, 2)) for _ in range(size)])
    uri = str(tmp_path / "lists.lance")
    lance.write_dataset(pa.table({"id": range(400), "f": rows_f, "s": rows_s,
                                  "i": pa.array(rows_i, pa.list_(pa.int16()))}), uri)
    ref_ds, ours_ds = lance.dataset(uri), lance_gpu.dataset(uri)
    constants = {"f": ["[0.0]", "[-0.0, 1.5]", "['nan']", "[1.5, -2.0]", "[-2.0, 0.0, 1.5, 0.0]"], "s": ["['a']", "['a', 'b']", "['']"],
                 "i": ["[0]", "[-1, 1]", "[1, 0, -1]"]}
    for column, values in constants.items():
        for value in values:
            for op in ("=", "!=", "<", "<=", ">", ">="):
                predicate = f"{column} {op} {value}"
                want = ref_ds.to_table(filter=predicate, columns=["id"]).column("id").to_pylist()
                assert ours_ds.to_table(filter=predicate, columns=["id"]).column("id").to_pylist() == want, predicate


@pytest.mark.parametrize("expression", ["array_max(f)", "array_min(f)", "array_max(i)", "array_min(i)",
                                        "array_max(s)", "array_min(s)"])
def test_array_max_min_in_arrow_total_order_as_pylance(tmp_path, expression: str) -> None:
    """NaN above +inf, -0.0 below 0.0, NULL items skipped, NULL for empty / all-NULL lists."""
    nan, inf = float("nan"), float("inf")
    uri = str(tmp_path / "mm.lance")
    lance.write_dataset(pa.table({
        "id": range(8),
        "f": pa.array([[1.0, nan, -1.0], [-0.0, 0.0], [0.0, -0.0], [None, None], [], None, [-inf, inf], [nan]]),
        "i": pa.array([[3, -1, 2], [0], [None, 5], None, [], [-7, -9], [1], [2]], pa.list_(pa.int8())),
        "s": pa.array([["b", "a"], [""], [None, "z"], None, [], ["é", "e"], ["a"], ["b"]]),
    }), uri)
    columns = {"id": "id", "v": expression}
    _same(lance.dataset(uri).to_table(columns=columns), lance_gpu.dataset(uri).to_table(columns=columns), expression)


def test_errors_name_what_the_user_wrote(tmp_path) -> None:
    """An add_columns or update expression is not called a filter; an unknown function names
    the closest ones; each error is also the builtin pylance raises there."""
    uri = str(tmp_path / "e.lance")
    lance.write_dataset(pa.table({"a": [1, 2], "s": ["x", "y"]}), uri)
    ds = lance_gpu.dataset(uri)
    with pytest.raises(OSError, match="add_columns expression 'b' = 'abs\\(s\\)'") as info:
        ds.add_columns({"b": "abs(s)"})
    assert "filter" not in str(info.value)
    with pytest.raises(OSError, match="error resolving add_columns expression 'b' = 's > 10'"):
        ds.add_columns({"b": "s > 10"})
    with pytest.raises(ValueError, match="update expression 'a' = 'abs\\(s\\)'"):
        ds.update({"a": "abs(s)"})
    with pytest.raises(ValueError, match="did you mean 'array_max'"):
        ds.to_table(filter="arry_max(a) > 1")
    with pytest.raises(ValueError, match="No field named nope: there is no column 'nope' in filter"):
        ds.to_table(filter="nope = 1")


@pytest.mark.parametrize(
    ("predicate", "want"),
    [("nums[1] = 5", [2]), ("nums = [5, 6]", [2]), ("nums < [5, 6]", [0]), ("array_has(nums, 3)", []),
     ("array_has(nums, id * 3)", [2]), ("array_has_any(nums, [3, 5])", [2]), ("array_has_all(nums, [1, 2])", [0]),
     ("array_max(nums) = 6", [2]), ("cardinality(nums) = 2", [0, 2])],
)
def test_null_lists_whose_offsets_span_values(predicate: str, want: list[int]) -> None:
    """Arrow lets a NULL list's offsets span values (row 1 spans [3, 4] here); they belong to
    no row: pyarrow's list_flatten leaves them out, list_parent_indices does not."""
    from lance_gpu.filter import parse_filter

    nums = pa.ListArray.from_arrays(pa.array([0, 2, 4, 6], pa.int32()), pa.array([1, 2, 3, 4, 5, 6]),
                                    mask=pa.array([False, True, False]))
    table = pa.table({"id": [0, 1, 2], "nums": nums})
    assert parse_filter(predicate, table.schema).apply(table).column("id").to_pylist() == want


def test_random_and_uuid_are_drawn_per_row_as_in_pylance(tmp_path) -> None:
    """``random()`` is not folded into one constant (a filter keeps about the asked share),
    ``uuid()`` gives a distinct version-4 UUID per row; types as pylance's."""
    import uuid

    uri = str(tmp_path / "r.lance")
    lance.write_dataset(pa.table({"id": range(10000)}), uri, max_rows_per_file=4000)
    ours = lance_gpu.dataset(uri)
    kept = ours.count_rows(filter="random() < 0.5")
    assert 4500 < kept < 5500  # binomial(10000, 0.5): outside this range with probability ~1e-23
    columns = {"id": "id", "u": "uuid()", "r": "random()"}
    got = ours.to_table(columns=columns)
    assert got.schema.types == lance.dataset(uri).to_table(columns=columns).schema.types
    ids = got.column("u").to_pylist()
    assert len(set(ids)) == 10000 and all(uuid.UUID(u).version == 4 for u in ids)
    r = got.column("r").to_numpy()
    assert ((r >= 0) & (r < 1)).all() and len(set(r.tolist())) > 9990
