# SPDX-License-Identifier: Apache-2.0
"""The read lists arena's placement on the host (``lance_gpu.gpu.readlists``): which layers
of which leaves are placed, slot sizes, each unit's rows and shifts, and the columns left
to combining.  No device: the arena is not allocated, ``targets`` is given stand-in arrays."""

import pyarrow as pa

from lance_gpu.gpu.plan import FieldPlan, LeafPlan
from lance_gpu.gpu.readlists import ReadLists, used_layers

ITEM, NULL_ITEM, LIST, NULL_LIST = 1, 3, 2, 4


def test_used_layers_follow_the_assemblers_first_leaf():
    """A struct / list / map layer is read from the first leaf below it: that leaf uses
    every layer from its own up to there, the others their own layers below their node."""
    assert used_layers(pa.int32()) == [1]
    assert used_layers(pa.list_(pa.int32())) == [2]
    assert used_layers(pa.list_(pa.list_(pa.string()))) == [3]
    assert used_layers(pa.map_(pa.string(), pa.int32())) == [3, 1]  # the map's list and struct layers: its keys'
    assert used_layers(pa.list_(pa.struct([("a", pa.int16()), ("b", pa.string())]))) == [3, 1]
    assert used_layers(pa.struct([("l", pa.list_(pa.int64())), ("x", pa.int32())])) == [3, 1]
    assert used_layers(pa.struct([("x", pa.int32()), ("l", pa.list_(pa.int64()))])) == [2, 2]
    assert used_layers(pa.list_(pa.int16(), 2)) == [1]  # a fixed-size list is a leaf


def _leaf(layers, values, levels, rows, pending=False, rep=True):
    return LeafPlan(None, 0, pa.int32(), "fixed", 4, layers=tuple(layers), num_values=values, num_levels=levels, num_rows=rows,
                    has_rep=rep, has_def=True, levels_pending=pending)


def _fields(t, leaves_per_fragment):
    return [{"c": FieldPlan(k, "c", pa.field("c", t), leaves, leaves[0].num_rows)} for k, leaves in enumerate(leaves_per_fragment)]


def test_slots_rows_and_shifts_over_units():
    """list<int> of three fragments: the item layer's slot holds every fragment's values,
    the list layer's their rows (offsets: one more, from a 64-byte boundary); each unit's
    runs get the entries written before them as their row, the list layer the items before
    it as its shift; a unit whose leaves skip a fragment leaves the column out."""
    frags = [[_leaf((NULL_ITEM, NULL_LIST), 7, 9, 4)], [_leaf((NULL_ITEM, NULL_LIST), 5, 6, 3)], [_leaf((ITEM, LIST), 2, 2, 2)]]
    rl = ReadLists(_fields(pa.list_(pa.int32()), frags))
    ((key, layers),) = rl.slots.items()
    assert layers == [(-1, 0, 14), (0, 512, 9)]  # items: bits only; the list layer: offsets and bits
    assert (rl.entries, rl.words) == (16, 32) and rl.nbytes == 4 * 16 + 4 * 32
    assert rl.targets([frags[0][0]], [0]) is None  # not allocated: nothing to target
    rl.offsets, rl.bits = "offsets", "bits"  # (stand-ins: targets hands them on)
    offs, bits, spec = rl.targets([frags[0][0], frags[1][0]], [0, 0])
    assert (offs, bits) == ("offsets", "bits")
    assert spec == {0: ((-1, 0, 14, 0, 0), (0, 512, 9, 0, 0))}
    rl.unraveled([frags[0][0], frags[1][0]], [[7, 4], [5, 3]])
    _o, _b, spec = rl.targets([frags[2][0]], [3])
    assert spec == {3: ((-1, 0, 14, 12, 0), (0, 512, 9, 7, 12))}  # row: entries so far; shift: the items before
    # the same column decoded out of order: left out
    rl2 = ReadLists(_fields(pa.list_(pa.int32()), frags))
    rl2.offsets, rl2.bits = "offsets", "bits"
    assert rl2.targets([frags[1][0]], [0]) is None
    rl2.unraveled([frags[1][0]], [[5, 3]])
    assert rl2.done[key] is None and rl2.targets([frags[0][0]], [0]) is None


def test_estimated_layers_and_columns_not_placed():
    """list<list<int>>: the inner list layer (between the leaf's values and rows) is sized by
    the leaves' levels; where they are in-band (an estimate) a unit whose settled levels
    could pass the room left writes that layer in slots of its own (first entry and bit
    -1), the other layers still placed.  Columns without repetition levels and the second
    leaf of a list of structs' own layers below the struct are placed; a map's value leaf
    only its item layer."""
    t = pa.list_(pa.list_(pa.int32()))
    frags = [[_leaf((NULL_ITEM, NULL_LIST, NULL_LIST), 6, 10, 2, pending=True)], [_leaf((NULL_ITEM, NULL_LIST, NULL_LIST), 6, 10, 2, pending=True)]]
    rl = ReadLists(_fields(t, frags))
    ((key, layers),) = rl.slots.items()
    assert [n for _e, _b, n in layers] == [12, 20, 4] and rl.estimated[key] == [False, True, False]
    rl.offsets, rl.bits = "o", "b"
    frags[0][0].num_levels = 11  # settled by the unit's pre-pass: 11 <= 20
    _o, _b, spec = rl.targets(frags[0], [0])
    assert spec[0][1][:2] != (-1, -1)
    rl.unraveled(frags[0], [[6, 9, 2]])
    frags[1][0].num_levels = 12  # 9 + 12 > 20: the inner layer in the unit's own slots
    _o, _b, spec = rl.targets(frags[1], [0])
    assert spec[0][1][:2] == (-1, -1) and spec[0][0][1] >= 0 and spec[0][2][0] >= 0
    assert spec[0][2][3:] == (2, 9)  # the outer layer's shift: the inner layer's entries so far, counted all the same
    flat = ReadLists(_fields(pa.int32(), [[_leaf((NULL_ITEM,), 5, 5, 5, rep=False)]]))
    assert not flat.slots
    m = pa.map_(pa.string(), pa.int32())
    keys, values = _leaf((ITEM, ITEM, NULL_LIST), 4, 5, 2), _leaf((NULL_ITEM, ITEM, NULL_LIST), 4, 5, 2)
    rl = ReadLists([{"m": FieldPlan(0, "m", pa.field("m", m), [keys, values], 2)}])
    assert [b >= 0 for _e, b, _n in rl.slots[("m", 0)]] == [True, True, True]
    assert [b >= 0 for _e, b, _n in rl.slots[("m", 1)]] == [True, False, False]
