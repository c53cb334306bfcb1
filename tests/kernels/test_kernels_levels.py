"""Rep/def levels: ravel (encoder) and unravel (decoder) against a pure-Python reference.

The reference works from first principles on the *Python values* of a pyarrow
array (``to_pylist``), walking every row recursively along one leaf path and
emitting a (rep, def) level for every leaf slot, null item and null / empty
list.  Only the choice of layer kinds is read from the Arrow arrays (a layer is
nullable when its array has nulls, emptyable when it has a valid empty list),
which is what Lance's encoder does.

Checks:
* ``ravel_levels`` (from validity + offsets buffers) == reference levels;
* ``unravel_levels(ravel(x))`` rebuilds ``x`` (projected on the leaf path) exactly;
* known Lance examples give the documented levels.
"""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuda_kernels import (
    ALL_VALID_ITEM,
    ALL_VALID_LIST,
    EMPTYABLE_LIST,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
    CorruptInputError,
    bitmap_to_validity,
    ravel_levels,
    unravel_levels,
    validity_to_bitmap,
)

# --------------------------------------------------------------------------- reference


def leaf_paths(typ):
    """Leaf paths of a type; a path is a list of nodes ('list',) / ('struct', name) / ('leaf',)."""
    if pa.types.is_list(typ):
        return [[("list",)] + p for p in leaf_paths(typ.value_type)]
    if pa.types.is_struct(typ):
        fields = [typ.field(i) for i in range(typ.num_fields)]
        return [[("struct", f.name)] + p for f in fields for p in leaf_paths(f.type)]
    return [[("leaf",)]]


def arrays_along(arr, path):
    """The Arrow array at every node of the path (outer -> inner)."""
    out = [arr]
    for node in path[:-1]:
        cur = out[-1]
        out.append(cur.values if node[0] == "list" else cur.field(node[1]))
    return out


def ref_kinds(arrays, path):
    """Layer kinds, outer -> inner, chosen from the Arrow arrays as Lance does."""
    kinds = []
    for node, a in zip(path, arrays):
        nullable = a.null_count > 0
        if node[0] == "list":
            valid = np.asarray(a.is_valid())
            lengths = np.diff(np.asarray(a.offsets))
            empty = bool(np.any(valid & (lengths == 0)))
            kinds.append(
                {(True, True): NULL_AND_EMPTY_LIST, (True, False): NULLABLE_LIST, (False, True): EMPTYABLE_LIST}.get(
                    (nullable, empty), ALL_VALID_LIST
                )
            )
        else:
            kinds.append(NULLABLE_ITEM if nullable else ALL_VALID_ITEM)
    return kinds


def ref_levels(rows, path, kinds_outer_first):
    """Reference levels of Python row values along ``path``.

    Returns (rep list, def list, slots) where slots are (leaf_is_valid, value)
    for every visible value slot.
    """
    depth_n = len(path)
    null_def, empty_def = {}, {}
    nxt = 1
    for depth in range(depth_n - 1, -1, -1):  # inner -> outer
        k = kinds_outer_first[depth]
        if k in (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST):
            null_def[depth] = nxt
            nxt += 1
        if k in (EMPTYABLE_LIST, NULL_AND_EMPTY_LIST):
            empty_def[depth] = nxt
            nxt += 1
    is_list = [n[0] == "list" for n in path]
    lists_below = [sum(is_list[d + 1 :]) for d in range(depth_n)]  # list nodes strictly inside
    row_rep = sum(is_list)
    reps, defs, slots = [], [], []

    def emit(value, depth, cur_rep):
        node = path[depth]
        if value is None:
            reps.append(cur_rep)
            defs.append(null_def[depth])
            if not is_list[depth] and lists_below[depth] == 0:
                slots.append((False, None))  # a null item still has a value slot
            return
        if node[0] == "list":
            if len(value) == 0:
                reps.append(cur_rep)
                defs.append(empty_def[depth])
                return
            for t, elem in enumerate(value):
                emit(elem, depth + 1, cur_rep if t == 0 else lists_below[depth])
        elif node[0] == "struct":
            emit(value[node[1]], depth + 1, cur_rep)
        else:
            reps.append(cur_rep)
            defs.append(0)
            slots.append((True, value))

    for row in rows:
        emit(row, 0, row_rep)
    return reps, defs, slots


def project(value, path):
    """Keep only the leaf path of a Python value."""
    if value is None:
        return None
    node = path[0]
    if node[0] == "list":
        return [project(v, path[1:]) for v in value]
    if node[0] == "struct":
        return {node[1]: project(value[node[1]], path[1:])}
    return value


def ravel_input(arrays):
    """(validity, offsets) per layer, inner-most first, straight from the Arrow buffers."""
    layers = []
    for a in reversed(arrays):
        validity = np.asarray(a.is_valid()) if a.null_count else None
        offsets = np.asarray(a.offsets) if isinstance(a, pa.ListArray) else None
        layers.append((validity, offsets))
    return layers


def rebuild(unraveled, path, leaf_arr, value_index):
    """Arrow array rebuilt from unravelled layers + gathered leaf values."""
    layers = unraveled.layers
    leaf_valid = layers[0].validity
    leaf_vals = leaf_arr.take(pa.array(value_index, pa.int64())).to_pylist()
    if leaf_valid is not None:
        leaf_vals = [v if ok else None for v, ok in zip(leaf_vals, leaf_valid)]
    cur = pa.array(leaf_vals, type=leaf_arr.type)
    for m in range(1, len(layers)):
        node = path[len(path) - 1 - m]
        lay = layers[m]
        mask = None if lay.validity is None else pa.array(~np.asarray(lay.validity))
        if node[0] == "list":
            cur = pa.ListArray.from_arrays(pa.array(lay.offsets, pa.int32()), cur, mask=mask)
        else:
            cur = pa.StructArray.from_arrays([cur], names=[node[1]], mask=mask)
        assert len(cur) == lay.length
    return cur


def check_array(arr):
    """All checks for every leaf path of ``arr``."""
    rows = arr.to_pylist()
    for path in leaf_paths(arr.type):
        arrays = arrays_along(arr, path)
        kinds = ref_kinds(arrays, path)
        reps, defs, slots = ref_levels(rows, path, kinds)
        rav = ravel_levels(ravel_input(arrays), len(arr))
        inner_first = kinds[::-1]
        assert rav.layer_kinds.tolist() == inner_first, path
        n = len(reps)
        assert rav.num_levels == n
        if any(k in (2, 4, 5, 6) for k in kinds):
            assert rav.rep is not None and rav.rep.tolist() == reps, path
        else:
            assert rav.rep is None
        if any(k != ALL_VALID_ITEM and k != ALL_VALID_LIST for k in kinds):
            assert rav.def_ is not None and rav.def_.tolist() == defs, path
        else:
            assert rav.def_ is None and set(defs) <= {0}
        leaf = arrays[-1]
        assert len(rav.value_index) == len(slots)
        leaf_py = leaf.to_pylist()
        for (ok, value), j in zip(slots, rav.value_index):
            if ok:
                assert leaf_py[j] == value
        un = unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=n, num_rows=len(arr))
        assert un.num_values == len(slots)
        assert un.num_rows == len(arr)
        rebuilt = rebuild(un, path, leaf, rav.value_index)
        assert rebuilt.to_pylist() == [project(r, path) for r in rows], path
        for lay in un.layers:
            if lay.offsets is not None:
                assert lay.offsets[0] == 0 and np.all(np.diff(lay.offsets) >= 0)
            if lay.validity is not None:
                assert not lay.validity.all()
                assert lay.kind in (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST)


# --------------------------------------------------------------------------- known examples


def test_lance_list_null_and_empty_example():
    arr = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32()))
    rav = ravel_levels(ravel_input(arrays_along(arr, leaf_paths(arr.type)[0])), len(arr))
    assert rav.layer_kinds.tolist() == [ALL_VALID_ITEM, NULL_AND_EMPTY_LIST]
    assert rav.rep.tolist() == [1, 0, 1, 1, 1]
    assert rav.def_.tolist() == [0, 0, 1, 2, 0]  # def 1 = null list, def 2 = empty list
    un = unravel_levels(rav.rep, rav.def_, rav.layer_kinds)
    assert un.num_values == 3 and un.num_rows == 4
    assert un.layers[1].offsets.tolist() == [0, 2, 2, 2, 3]
    assert un.layers[1].validity.tolist() == [True, False, True, True]
    assert un.layers[0].validity is None
    check_array(arr)


def test_lance_struct_null_example():
    # rows [{"x": 1}, {"x": None}, None], built so that the child holds a null
    # under the null struct too (pa.array would put a valid 0 there)
    arr = pa.StructArray.from_arrays(
        [pa.array([1, None, None], pa.int32())], names=["x"], mask=pa.array([False, False, True])
    )
    rav = ravel_levels(ravel_input(arrays_along(arr, leaf_paths(arr.type)[0])), len(arr))
    assert rav.layer_kinds.tolist() == [NULLABLE_ITEM, NULLABLE_ITEM]
    assert rav.rep is None
    assert rav.def_.tolist() == [0, 1, 2]  # def 1 = x null, def 2 = struct null
    un = unravel_levels(None, rav.def_, rav.layer_kinds)
    assert un.num_values == 3
    assert un.layers[0].validity.tolist() == [True, False, False]
    assert un.layers[1].validity.tolist() == [True, True, False]
    check_array(arr)


def test_lance_doc_three_level_repetition_example():
    # [{<0,1>, <>, <2>}, {<3>}, {}], [], [{<4>}]
    rows = [[[[0, 1], [], [2]], [[3]], []], [], [[[4]]]]
    arr = pa.array(rows, pa.list_(pa.list_(pa.list_(pa.int64()))))
    rav = ravel_levels(ravel_input(arrays_along(arr, leaf_paths(arr.type)[0])), len(arr))
    assert rav.layer_kinds.tolist() == [ALL_VALID_ITEM, EMPTYABLE_LIST, EMPTYABLE_LIST, EMPTYABLE_LIST]
    assert rav.rep.tolist() == [3, 0, 1, 1, 2, 2, 3, 3]
    assert rav.def_.tolist() == [0, 0, 1, 0, 0, 2, 3, 0]
    un = unravel_levels(rav.rep, rav.def_, rav.layer_kinds)
    assert [lay.offsets.tolist() for lay in un.layers[1:]] == [[0, 2, 2, 3, 4, 5], [0, 3, 4, 4, 5], [0, 3, 3, 4]]
    check_array(arr)


def test_no_nulls_no_lists_has_no_levels():
    arr = pa.array([1, 2, 3], pa.int64())
    rav = ravel_levels([(None, None)], 3)
    assert rav.rep is None and rav.def_ is None and rav.layer_kinds.tolist() == [ALL_VALID_ITEM]
    assert rav.value_index.tolist() == [0, 1, 2]
    un = unravel_levels(None, None, [ALL_VALID_ITEM], num_levels=3)
    assert un.num_values == 3 and un.layers[0].validity is None
    check_array(arr)


def test_all_null_and_empty_columns():
    check_array(pa.array([None, None, None], pa.int64()))
    check_array(pa.array([None, None], pa.list_(pa.int64())))
    check_array(pa.array([[], []], pa.list_(pa.int64())))
    check_array(pa.array([], pa.list_(pa.struct([("a", pa.int64())]))))
    check_array(pa.array([], pa.int64()))
    un = unravel_levels(np.zeros(0, np.uint16), np.zeros(0, np.uint16), [ALL_VALID_ITEM, NULL_AND_EMPTY_LIST])
    assert un.num_values == 0 and un.num_rows == 0 and un.layers[1].offsets.tolist() == [0]


@pytest.mark.parametrize(
    ("rows", "typ"),
    [
        ([[1, None], [None], None, [], [2, 3]], pa.list_(pa.int64())),
        ([[[1], None, []], None, [], [[None, 2]], [[]]], pa.list_(pa.list_(pa.int64()))),
        (
            [{"a": [1, 2], "b": 3}, {"a": None, "b": None}, None, {"a": [], "b": 4}],
            pa.struct([("a", pa.list_(pa.int64())), ("b", pa.int64())]),
        ),
        (
            [[{"a": 1, "b": [1, None]}, None, {"a": None, "b": []}], None, [], [{"a": 2, "b": None}]],
            pa.list_(pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))])),
        ),
        ([{"s": {"x": 1}}, {"s": None}, None, {"s": {"x": None}}], pa.struct([("s", pa.struct([("x", pa.int64())]))])),
        ([["a", None, ""], None, [], ["bc"]], pa.list_(pa.string())),
        ([{"l": [[1], []]}, {"l": None}, {"l": [None]}, None], pa.struct([("l", pa.list_(pa.list_(pa.int64())))])),
    ],
)
def test_nested_shapes(rows, typ):
    check_array(pa.array(rows, typ))


def test_garbage_under_nulls_is_ignored():
    # A null list with a non-empty range, and a null struct over a non-empty list.
    values = pa.array([1, 2, 3, 4, 5, 6], pa.int64())
    lst = pa.ListArray.from_arrays(pa.array([0, 2, 4, 6], pa.int32()), values, mask=pa.array([False, True, False]))
    check_array(lst)
    st_arr = pa.StructArray.from_arrays([lst], names=["l"], mask=pa.array([True, False, False]))
    check_array(st_arr)
    rav = ravel_levels(ravel_input(arrays_along(st_arr, leaf_paths(st_arr.type)[0])), 3)
    # row 0 (null struct) and row 1 (null list) are single invisible levels
    assert rav.value_index.tolist() == [4, 5]
    outer = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), st_arr, mask=pa.array([False, False]))
    check_array(outer)


def test_forced_layer_kinds():
    rav = ravel_levels([(None, None)], 2, layer_kinds=[NULLABLE_ITEM])
    assert rav.def_.tolist() == [0, 0] and rav.layer_kinds.tolist() == [NULLABLE_ITEM]
    rav = ravel_levels(
        [(None, None), (None, np.array([0, 1, 2]))], 2, layer_kinds=[ALL_VALID_ITEM, NULL_AND_EMPTY_LIST]
    )
    assert rav.rep.tolist() == [1, 1] and rav.def_.tolist() == [0, 0]
    with pytest.raises(ValueError, match="cannot represent"):
        ravel_levels([(np.array([True, False]), None)], 2, layer_kinds=[ALL_VALID_ITEM])
    with pytest.raises(ValueError, match="cannot represent"):
        ravel_levels([(None, None), (None, np.array([0, 0, 2]))], 2, layer_kinds=[ALL_VALID_ITEM, NULLABLE_LIST])


# --------------------------------------------------------------------------- hypothesis


@st.composite
def arrow_columns(draw):
    leaf = st.sampled_from([pa.int64(), pa.string()])
    typ = draw(
        st.recursive(
            leaf,
            lambda children: st.one_of(
                children.map(pa.list_),
                st.lists(children, min_size=1, max_size=2).map(
                    lambda ts: pa.struct([(f"f{i}", t) for i, t in enumerate(ts)])
                ),
            ),
            max_leaves=4,
        )
    )

    def values(t):
        nullable = draw(st.booleans())
        if pa.types.is_list(t):
            base = st.lists(values(t.value_type), max_size=3)
        elif pa.types.is_struct(t):
            base = st.fixed_dictionaries({t.field(i).name: values(t.field(i).type) for i in range(t.num_fields)})
        elif pa.types.is_string(t):
            base = st.text(max_size=3)
        else:
            base = st.integers(-1000, 1000)
        return st.one_of(st.none(), base) if nullable else base

    rows = draw(st.lists(values(typ), max_size=8))
    return pa.array(rows, typ)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arr=arrow_columns())
def test_hypothesis_ravel_unravel_roundtrip(arr):
    check_array(arr)


# --------------------------------------------------------------------------- corrupt levels


def test_unravel_rejects_bad_levels():
    kinds = [ALL_VALID_ITEM, NULL_AND_EMPTY_LIST]
    with pytest.raises(CorruptInputError, match="max def"):
        unravel_levels(np.array([1, 0], np.uint16), np.array([0, 3], np.uint16), kinds)
    with pytest.raises(CorruptInputError):
        unravel_levels(np.array([1, 2], np.uint16), np.array([0, 0], np.uint16), kinds)
    with pytest.raises(CorruptInputError):  # first level does not start a row
        unravel_levels(np.array([0, 1], np.uint16), np.array([0, 0], np.uint16), kinds)
    with pytest.raises(CorruptInputError):
        unravel_levels(np.array([1, 0], np.uint16), np.array([0], np.uint16), kinds)
    with pytest.raises(CorruptInputError):  # lists need rep levels
        unravel_levels(None, np.array([0], np.uint16), kinds)
    with pytest.raises(CorruptInputError):  # rep levels without lists
        unravel_levels(np.array([0], np.uint16), None, [NULLABLE_ITEM])
    with pytest.raises(CorruptInputError):
        unravel_levels(np.array([1, 1], np.uint16), None, [ALL_VALID_ITEM, ALL_VALID_LIST], num_rows=3)
    with pytest.raises(CorruptInputError):
        unravel_levels(None, np.array([0, 1], np.int32) - 2, [NULLABLE_ITEM])
    with pytest.raises(ValueError):
        unravel_levels(None, None, [ALL_VALID_ITEM])
    with pytest.raises(ValueError):
        unravel_levels(None, None, [ALL_VALID_LIST], num_levels=1)
    with pytest.raises(ValueError):
        unravel_levels(None, None, [9], num_levels=1)


# --------------------------------------------------------------------------- bitmaps


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 64, 1000])
def test_bitmaps_match_numpy(n):
    rng = np.random.default_rng(n)
    valid = rng.random(n) < 0.6
    bm = validity_to_bitmap(valid)
    np.testing.assert_array_equal(bm, np.packbits(valid, bitorder="little"))
    np.testing.assert_array_equal(bitmap_to_validity(bm, n), valid)
    if n > 3:
        np.testing.assert_array_equal(bitmap_to_validity(bm, n - 3, offset=3), valid[3:])


def test_bitmap_matches_arrow():
    arr = pa.array([1, None, 3, None, None, 6, 7, 8, None], pa.int64())
    bm = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    np.testing.assert_array_equal(bitmap_to_validity(bm, len(arr)), np.asarray(arr.is_valid()))
    np.testing.assert_array_equal(validity_to_bitmap(np.asarray(arr.is_valid())), bm[:2])
    with pytest.raises(CorruptInputError):
        bitmap_to_validity(bm[:1], 9)


# --------------------------------------------------------------------------- chunked (parallel) unravel


@pytest.mark.parametrize(
    ("rows", "typ"),
    [
        ([[1, None], [None], None, [], [2, 3]] * 7, pa.list_(pa.int64())),
        ([[[1], None, []], None, [], [[None, 2]], [[]]] * 5, pa.list_(pa.list_(pa.int64()))),
        ([[{"a": 1, "b": [1, None]}, None, {"a": None, "b": []}], None, [], [{"a": 2, "b": None}]] * 5,
         pa.list_(pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))]))),
    ],
)
def test_unravel_in_many_chunks(monkeypatch, rows, typ):
    import cuda_kernels.levels as lv

    monkeypatch.setattr(lv, "_LEVELS_PER_CHUNK", 2)  # many tiny prange chunks
    check_array(pa.array(rows, typ))


def test_unravel_large_parallel_matches_single_chunk(monkeypatch):
    import cuda_kernels.levels as lv

    rng = np.random.default_rng(9)
    lengths = rng.integers(0, 6, 120_000)
    valid = rng.random(lengths.size) > 0.1
    offsets = np.concatenate([[0], np.cumsum(np.where(valid, lengths, 0))])
    item_valid = rng.random(int(offsets[-1])) > 0.2
    rav = ravel_levels([(item_valid, None), (valid, offsets)], lengths.size)
    par = unravel_levels(rav.rep, rav.def_, rav.layer_kinds)
    monkeypatch.setattr(lv, "_LEVELS_PER_CHUNK", 1 << 40)
    ser = unravel_levels(rav.rep, rav.def_, rav.layer_kinds)
    for a, b in zip(par.layers, ser.layers):
        assert (a.offsets is None) == (b.offsets is None)
        if a.offsets is not None:
            np.testing.assert_array_equal(a.offsets, b.offsets)
        np.testing.assert_array_equal(a.validity, b.validity)
    np.testing.assert_array_equal(par.layers[1].offsets, np.concatenate([[0], np.cumsum(np.where(valid, lengths, 0))]))
    np.testing.assert_array_equal(par.layers[1].validity, valid)
    np.testing.assert_array_equal(par.layers[0].validity, item_valid)


def test_unravel_flat_nullable_fast_path():
    d = np.array([0, 1, 2, 0, 1], np.uint16)
    un = unravel_levels(None, d, [NULLABLE_ITEM, NULLABLE_ITEM])
    assert un.layers[0].validity.tolist() == [True, False, False, True, False]
    assert un.layers[1].validity.tolist() == [True, True, False, True, True]
    assert un.num_values == 5 and un.num_rows == 5
    un = unravel_levels(None, np.zeros(3, np.uint16), [NULLABLE_ITEM])
    assert un.layers[0].validity is None
    with pytest.raises(CorruptInputError):
        unravel_levels(None, np.array([0, 3], np.uint16), [NULLABLE_ITEM, NULLABLE_ITEM])
