"""Repetition / definition levels <-> Arrow validity and offsets.

Conventions (Lance's, the reverse of Parquet's):

* The layers of a leaf are listed **inner-most first** (the leaf item is
  layer 0).  Layer kinds: 1 ``ALL_VALID_ITEM``, 2 ``ALL_VALID_LIST``,
  3 ``NULLABLE_ITEM``, 4 ``NULLABLE_LIST``, 5 ``EMPTYABLE_LIST``,
  6 ``NULL_AND_EMPTY_LIST``.  A struct contributes an item layer.
* Definition level 0 means "valid at every layer".  Going inner -> outer, a
  nullable item, nullable list or emptyable list adds one level, a
  NULL_AND_EMPTY list adds two (null first, then empty).  A level's def is
  the one of the *outer-most* null (or empty list) on its path.
* With ``k`` list layers, rep ``k`` starts a new row; rep ``j`` (1..k) starts
  a new list at the ``j``-th list layer counted from the inner-most (and so
  a new entry at every layer inside it); rep 0 continues the inner-most list.
* A null or empty list has a level but no items below it ("invisible"); a
  null item (e.g. a null struct) still has one slot in each item layer below
  it down to the first list layer, whose entry is then a null (or, when the
  list layer cannot hold nulls, empty) list.

Worked example: ``list<int32>`` with layers ``[ALL_VALID_ITEM,
NULL_AND_EMPTY_LIST]`` and rows ``[[1, 2], None, [], [3]]`` has
``rep = [1, 0, 1, 1, 1]``, ``def = [0, 0, 1, 2, 0]`` (def 1 = null list,
def 2 = empty list), 3 visible values, and unravels to offsets
``[0, 2, 2, 2, 3]`` with validity ``[T, F, T, T]``.

Decoding rule used here (equivalent to Lance's layer-by-layer unraveller):
let ``c(M)`` be the number of list layers at or inside layer ``M`` and
``ltr(d)`` the ``c`` of the layer that def value ``d`` belongs to
(``ltr(0) = 0``).  Level ``i`` has an entry at layer ``M`` iff
``rep[i] >= c(M)`` and ``ltr(def[i]) <= c(M)``.  That entry is valid iff
``def[i] <= below(M)`` (the number of def values of the layers inside ``M``)
or ``def[i]`` is ``M``'s empty-list level.  A list entry's offset is the
number of entries of layer ``M - 1`` that precede level ``i``.  Every layer
is therefore independent: a count pass and a fill pass on the CPU, a flag
kernel + one scan + a scatter kernel on the GPU.

:func:`ravel_levels` is the encoder direction (validity + offsets -> levels),
needed by writers; it reproduces what Lance's ``RepDefBuilder`` writes.

Also here: :func:`validity_to_bitmap` / :func:`bitmap_to_validity` (Arrow
bitmaps, least significant bit first).
"""

from typing import NamedTuple

import numpy as np

from . import _device, _twins
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .compact import compact_fixed_gpu
from .errors import (
    ERR_BAD_LEVEL,
    CorruptInputError,
    describe_error_code,
    new_error_flag,
    pending_flags,
    raise_if_flagged,
    settle_flags,
)
from .segments import _segment_of32, launch_dims32

cuda = LAZY_CUDA

__all__ = [
    "ALL_VALID_ITEM",
    "ALL_VALID_LIST",
    "EMPTYABLE_LIST",
    "NULLABLE_ITEM",
    "NULLABLE_LIST",
    "NULL_AND_EMPTY_LIST",
    "DefTable",
    "LayerResult",
    "LevelSegment",
    "Raveled",
    "RaveledGpu",
    "Unraveled",
    "bitmap_to_validity",
    "bitmap_to_validity_gpu",
    "check_restarts_segments_gpu",
    "def_table",
    "ravel_levels",
    "ravel_levels_gpu",
    "unravel_levels",
    "unravel_levels_gpu",
    "unravel_segments_gpu",
    "validity_to_bitmap",
    "validity_to_bitmap_gpu",
]

ALL_VALID_ITEM = 1
ALL_VALID_LIST = 2
NULLABLE_ITEM = 3
NULLABLE_LIST = 4
EMPTYABLE_LIST = 5
NULL_AND_EMPTY_LIST = 6

_LIST_KINDS = (ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST)
_NULLABLE_KINDS = (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST)
_NUM_DEF = {
    ALL_VALID_ITEM: 0,
    ALL_VALID_LIST: 0,
    NULLABLE_ITEM: 1,
    NULLABLE_LIST: 1,
    EMPTYABLE_LIST: 1,
    NULL_AND_EMPTY_LIST: 2,
}


class LayerResult(NamedTuple):
    """One unravelled layer.

    ``validity``: bool per entry, or None when the layer has no null entry
    (always None for kinds that cannot hold nulls); with ``words``, uint32 bitmask words
    instead (Arrow's bit order: entry ``i`` is bit ``i & 31`` of word ``i >> 5``, 1 = valid;
    the bits past ``length`` in the last word are 0).  ``offsets``: int64
    ``[length + 1]`` into the entries of the next-inner layer (list layers),
    or None (item layers).  ``length``: number of entries.
    """

    kind: int
    validity: object
    offsets: object
    length: int
    null_count: int = -1  # null entries, where the unraveller counted them (-1: not counted)
    words: bool = False  # validity as bitmask words (every layer of the segmented unravel)
    bit_offset: int = 0  # words: entry ``i`` is bit ``bit_offset + i`` (a segment of a run)
    #: a list layer of a segment of a run (``unravel_segments_gpu(cudf=True)``): the run's
    #: layer's offsets from 0 over its segments in order, int32 (cuDF's list offsets), and the
    #: entry of this segment's first in them; None: not written
    cudf_offsets: object = None
    cudf_row: int = 0


class Unraveled(NamedTuple):
    """Result of :func:`unravel_levels`: layers inner-most first."""

    layers: list
    num_values: int  # entries of layer 0 = value slots in the leaf buffer
    num_rows: int  # entries of the outer-most layer


class Raveled(NamedTuple):
    """Result of :func:`ravel_levels`."""

    rep: object  # uint16[num_levels] or None (no list layer)
    def_: object  # uint16[num_levels] or None (nothing null or empty)
    layer_kinds: np.ndarray  # uint8[num_layers], inner-most first
    value_index: np.ndarray  # int64[num_values]: leaf-layer entry of each visible value slot
    num_levels: int


class DefTable(NamedTuple):
    """Per-layer and per-def-value lookup tables derived from the layer kinds."""

    kinds: np.ndarray  # int64[L]
    is_list: np.ndarray  # int64[L] (0/1)
    c: np.ndarray  # int64[L]: list layers at or inside each layer
    below: np.ndarray  # int64[L]: def values used by the layers inside each layer
    null_level: np.ndarray  # int64[L]: def value of "null here", 0 if none
    empty_level: np.ndarray  # int64[L]: def value of "empty list here", 0 if none
    ltr: np.ndarray  # int64[max_def + 1]: c of the layer owning each def value
    max_def: int
    max_rep: int


def def_table(layer_kinds):
    """Build the :class:`DefTable` of a layer stack (inner-most first)."""
    kinds = np.asarray(layer_kinds, dtype=np.int64).reshape(-1)
    n = kinds.shape[0]
    if n == 0:
        msg = "at least one layer is needed"
        raise ValueError(msg)
    bad = [int(k) for k in kinds if int(k) not in _NUM_DEF]
    if bad:
        msg = f"unknown layer kind(s) {bad}"
        raise ValueError(msg)
    if kinds[0] in _LIST_KINDS:
        msg = "the inner-most layer must be an item layer"
        raise ValueError(msg)
    is_list = np.array([1 if k in _LIST_KINDS else 0 for k in kinds], dtype=np.int64)
    c = np.cumsum(is_list).astype(np.int64)
    below = np.zeros(n, dtype=np.int64)
    null_level = np.zeros(n, dtype=np.int64)
    empty_level = np.zeros(n, dtype=np.int64)
    ltr = [0]
    nxt = 1
    for m, k in enumerate(kinds):
        below[m] = nxt - 1
        if k in (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST):
            null_level[m] = nxt
            ltr.append(int(c[m]))
            nxt += 1
        if k in (EMPTYABLE_LIST, NULL_AND_EMPTY_LIST):
            empty_level[m] = nxt
            ltr.append(int(c[m]))
            nxt += 1
    return DefTable(
        kinds=kinds,
        is_list=is_list,
        c=c,
        below=below,
        null_level=null_level,
        empty_level=empty_level,
        ltr=np.array(ltr, dtype=np.int64),
        max_def=nxt - 1,
        max_rep=int(c[-1]),
    )


# --------------------------------------------------------------------------
# Cores
# --------------------------------------------------------------------------


@dual
def _level_at(levels, has, i):
    """levels[i] as int64, or 0 when the level buffer is absent."""
    if has:
        return np.int64(levels[i])
    return np.int64(0)


@dual
def _level_ok(r, d, max_rep, max_def):
    """Is (rep r, def d) inside the ranges of the layer stack?  (Guards the ltr[d] lookup.)"""
    return 0 <= r <= max_rep and 0 <= d <= max_def


@dual
def _is_entry(r, d, ltr, cm):
    """Does a level (rep r, def d) have an entry at a layer with c(M) = cm?

    Written with ``&`` (no short circuit): branch-free, which matters on the
    CPU where the outcome is data dependent (d must be validated).
    """
    return (r >= cm) & (ltr[d] <= cm)


@dual
def _is_valid(d, below, empty_level):
    """Is the entry of a level with def d valid at a layer (below / empty level)?"""
    return (d <= below) | ((empty_level > 0) & (d == empty_level))


@dual
def _bitmap_byte(valid, n, b):
    """Byte ``b`` of the LSB-first bitmap of ``valid[:n]``."""
    v = 0
    base = b * 8
    for k in range(8):
        p = base + k
        if p < n and valid[p]:
            v |= 1 << k
    return np.uint8(v)


@dual
def _bitmap_bit(bitmap, offset, i):
    """Bit ``offset + i`` of an LSB-first bitmap."""
    p = offset + i
    return (np.int64(bitmap[p >> 3]) >> (p & 7)) & 1 == 1


# --------------------------------------------------------------------------
# CPU drivers: unravel
# --------------------------------------------------------------------------


@cpu_driver(twin=_twins.unravel_count_range)
def _unravel_count_range(rep, has_rep, def_, has_def, c, ltr, max_rep, max_def, counts, lo, hi):
    """counts[M] = entries of layer M among levels lo..hi.  Returns -1 or the first bad level.

    One tight loop per layer (scalar accumulator, no inner layer loop): the
    layer count is small and the loops stay vectorisable.
    """
    for i in range(lo, hi):
        r = _level_at(rep, has_rep, i)
        d = _level_at(def_, has_def, i)
        if not _level_ok(r, d, max_rep, max_def):
            return i
    if lo == 0 and hi > 0 and _level_at(rep, has_rep, 0) != max_rep:
        return 0
    for m in range(c.shape[0]):
        cm = c[m]
        cnt: int | np.int64 = 0  # a local annotation: the compiled bytecode is unchanged
        for i in range(lo, hi):
            cnt += np.int64(_is_entry(_level_at(rep, has_rep, i), _level_at(def_, has_def, i), ltr, cm))
        counts[m] = cnt
    return -1


@cpu_driver
def _fill_layer_range(
    rep, has_rep, def_, has_def, ltr, cm, c_inner, is_list_m, below_m, empty_m,
    offsets_all, off_base_m, off_scratch, valid_all, val_base_m, val_scratch, p, q, lo, hi,
):
    """Offsets / validity of one layer for levels lo..hi; returns its null count.

    ``p`` / ``q``: entries of this layer / of the next inner layer before level
    lo.  Branch-free: every level stores, either at its entry's slot or at a
    scratch slot private to this (chunk, layer).
    """
    nulls = np.int64(0)
    for i in range(lo, hi):
        r = _level_at(rep, has_rep, i)
        d = _level_at(def_, has_def, i)
        e = _is_entry(r, d, ltr, cm)
        ok = _is_valid(d, below_m, empty_m)
        ei = np.int64(e)
        valid_all[val_scratch + (val_base_m + p - val_scratch) * ei] = ok
        if is_list_m:
            offsets_all[off_scratch + (off_base_m + p - off_scratch) * ei] = q
            q += np.int64(_is_entry(r, d, ltr, c_inner))
        nulls += ei & np.int64(not ok)
        p += ei
    return nulls


@cpu_driver(twin=_twins.unravel_fill_range)
def _unravel_fill_range(
    rep, has_rep, def_, has_def, c, ltr, is_list, below, empty_level,
    off_base, val_base, offsets_all, valid_all, pos, null_counts, scratch, lo, hi,
):
    """Fill offsets (list layers) and validity of every layer for levels lo..hi (validated).

    ``pos[M]`` = entries of layer M before level ``lo``; ``scratch`` = first
    of this chunk's private scratch slots (one per layer) at the end of
    ``offsets_all`` and ``valid_all``.
    """
    nl = c.shape[0]
    off_scratch0 = offsets_all.shape[0] - scratch - nl
    val_scratch0 = valid_all.shape[0] - scratch - nl
    for m in range(nl):
        inner = m - 1 if m > 0 else 0
        null_counts[m] = _fill_layer_range(
            rep, has_rep, def_, has_def, ltr, c[m], c[inner], is_list[m] != 0, below[m], empty_level[m],
            offsets_all, off_base[m], off_scratch0 + m, valid_all, val_base[m], val_scratch0 + m,
            pos[m], pos[inner], lo, hi,
        )


@cpu_driver(parallel=True)
def _unravel_count_parallel(rep, has_rep, def_, has_def, n, c, ltr, max_rep, max_def, counts, bads):
    """counts[ch, M] per chunk of levels; bads[ch] = first bad level of the chunk or -1."""
    nchunks = counts.shape[0]
    for ch in prange(nchunks):
        bads[ch] = _unravel_count_range(
            rep, has_rep, def_, has_def, c, ltr, max_rep, max_def, counts[ch],
            ch * n // nchunks, (ch + 1) * n // nchunks,
        )


@cpu_driver(parallel=True)
def _unravel_fill_parallel(
    rep, has_rep, def_, has_def, n, c, ltr, is_list, below, empty_level,
    off_base, val_base, offsets_all, valid_all, starts, null_counts,
):
    """Fill per chunk; ``starts[ch, M]`` = entries of layer M before the chunk."""
    nchunks = starts.shape[0]
    nl = c.shape[0]
    for ch in prange(nchunks):
        _unravel_fill_range(
            rep, has_rep, def_, has_def, c, ltr, is_list, below, empty_level, off_base, val_base,
            offsets_all, valid_all, starts[ch], null_counts[ch], (nchunks - 1 - ch) * nl,
            ch * n // nchunks, (ch + 1) * n // nchunks,
        )


@cpu_driver(twin=_twins.defs_le)
def _defs_le(def_, bound, out):
    """out[i] = def_[i] <= bound; returns the number of False (nulls)."""
    nulls = 0
    for i in range(def_.shape[0]):
        ok = def_[i] <= bound
        out[i] = ok
        nulls += 0 if ok else 1
    return nulls


@cpu_driver(twin=_twins.max_level)
def _max_level(levels):
    m = np.int64(0)
    for i in range(levels.shape[0]):
        v = np.int64(levels[i])
        if v > m:
            m = v
    return m


# --------------------------------------------------------------------------
# CPU drivers: ravel (encoder direction)
# --------------------------------------------------------------------------


@cpu_driver
def _ravel_item(defs, idx, special, validity, has_validity, null_level, n_entries):
    """Apply an item layer's validity to the current levels.  Returns -1 or a bad index."""
    for i in range(defs.shape[0]):
        if special[i] or defs[i] != 0:
            continue
        j = idx[i]
        if j < 0 or j >= n_entries:
            return i
        if has_validity and not validity[j]:
            defs[i] = null_level
    return -1


@cpu_driver
def _ravel_list_count(defs, idx, special, validity, has_validity, offsets, n_entries):
    """Number of levels after expanding a list layer (or -1 if an index is bad)."""
    total = 0
    for i in range(defs.shape[0]):
        if special[i] or defs[i] != 0:
            total += 1
            continue
        j = idx[i]
        if j < 0 or j >= n_entries:
            return -1
        if has_validity and not validity[j]:
            total += 1
            continue
        length = offsets[j + 1] - offsets[j]
        if length <= 0:
            total += 1
        else:
            total += length
    return total


@dual
def _ravel_list_level(
    r, d, hidden, j, validity, has_validity, offsets, base, null_level, empty_level, rep_level,
    w, new_reps, new_defs, new_idx, new_mark, hidden_mark,
):
    """Expand one level ``(r, d)`` through a list layer, writing its levels at ``new_*[w:]``;
    returns how many (the list's length, else 1).  Mirrors Lance's
    ``SerializerContext::record_offsets``.

    ``hidden``: the level has no entry at this layer (a special level of a layer above);
    ``j``: its entry (read only when it has one and ``d == 0``).  A hidden level keeps its
    rep and def; a level masked by a null parent item (``d != 0``), a null list
    (``null_level``) and an empty list (``empty_level``) become one hidden level at the
    list's rep level; a list of ``n > 0`` items becomes ``n`` visible levels (rep
    ``list_level`` then 0, def 0) indexing items ``offsets[j] - base ...``.  ``new_mark[w]``
    is ``hidden_mark`` for a hidden output level and ``not hidden_mark`` for a visible one
    (the CPU driver keeps "special" flags, the GPU kernel "visible" flags).
    """
    list_level = r if r != 0 else rep_level
    out_def = d
    if not hidden and d == 0:
        if has_validity and not validity[j]:
            out_def = null_level
        else:
            start = offsets[j]
            length = offsets[j + 1] - start
            if length > 0:
                for t in range(length):
                    new_reps[w + t] = list_level if t == 0 else 0
                    new_defs[w + t] = 0
                    new_idx[w + t] = start - base + t
                    new_mark[w + t] = not hidden_mark
                return length
            out_def = empty_level
    new_reps[w] = r if hidden else list_level
    new_defs[w] = out_def
    new_idx[w] = -1
    new_mark[w] = hidden_mark
    return 1


@cpu_driver
def _ravel_list_fill(
    reps, defs, idx, special, validity, has_validity, offsets, null_level, empty_level, rep_level,
    new_reps, new_defs, new_idx, new_special,
):
    """Expand a list layer (one pass of :func:`_ravel_list_level`); returns the levels written."""
    w = 0
    for i in range(defs.shape[0]):
        w += _ravel_list_level(
            reps[i], defs[i], special[i], idx[i], validity, has_validity, offsets, 0, null_level, empty_level,
            rep_level, w, new_reps, new_defs, new_idx, new_special, True,
        )
    return w


# --------------------------------------------------------------------------
# CPU drivers: bitmaps
# --------------------------------------------------------------------------


@cpu_driver
def _to_bitmap_cpu(valid, out):
    n = valid.shape[0]
    for b in range(out.shape[0]):
        out[b] = _bitmap_byte(valid, n, b)


@cpu_driver
def _from_bitmap_cpu(bitmap, offset, out):
    for i in range(out.shape[0]):
        out[i] = _bitmap_bit(bitmap, offset, i)


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _unravel_flags_kernel(rep, has_rep, def_, has_def, n, c, ltr, max_rep, max_def, flags, err):
    """flags[M * n + i] = 1 if level i has an entry at layer M."""
    i = cuda.grid(1)
    if i >= n:
        return
    r = _level_at(rep, has_rep, i)
    d = _level_at(def_, has_def, i)
    nl = c.shape[0]
    if not _level_ok(r, d, max_rep, max_def) or (i == 0 and r != max_rep):
        cuda.atomic.or_(err, 0, ERR_BAD_LEVEL)
        for m in range(nl):
            flags[m * n + i] = 0
        return
    for m in range(nl):
        flags[m * n + i] = 1 if _is_entry(r, d, ltr, c[m]) else 0


@gpu_kernel
def _unravel_scatter_kernel(
    rep, has_rep, def_, has_def, n, c, ltr, is_list, below, empty_level,
    excl, off_base, val_base, offsets_all, valid_all,
):
    """Write offsets / validity; excl is the exclusive scan of the flattened flags."""
    i = cuda.grid(1)
    nl = c.shape[0]
    if i == 0:
        for m in range(1, nl):
            if is_list[m]:
                length = excl[(m + 1) * n] - excl[m * n]
                offsets_all[off_base[m] + length] = excl[m * n] - excl[(m - 1) * n]
    if i >= n:
        return
    r = _level_at(rep, has_rep, i)
    d = _level_at(def_, has_def, i)
    for m in range(nl):
        if _is_entry(r, d, ltr, c[m]):
            p = excl[m * n + i] - excl[m * n]
            if is_list[m]:
                offsets_all[off_base[m] + p] = excl[(m - 1) * n + i] - excl[(m - 1) * n]
            valid_all[val_base[m] + p] = _is_valid(d, below[m], empty_level[m])


# Segmented unravel: every leaf of a read unit in one pass.  ``desc`` is one int64 array
# holding, at the positions given by the scalar arguments:
#   seg[S, _SEG_FIELDS]  per segment: rep position (-1: none), def position (-1: none),
#                        levels, first layer (global index), layers, first ltr entry,
#                        max rep, max def, first flag, flag stride (layer m's flags of the
#                        segment start at first flag + m * stride), first flag of its run
#                        (the segments of a run with repetition levels lay each layer's flags
#                        one after the other: stride = the run's levels, so the scan's
#                        positions less the run's layer start are the run's entries)
#   level_start[S + 1]   exclusive prefix of the levels of the segments with repetition
#                        levels (0 for the others): the flags kernel's thread -> segment map
#   thread_start[S + 1]  exclusive prefix of the scatter kernel's first threads: one per
#                        level of a segment with repetition levels (one if it has none: it
#                        writes the final offsets), one per _WORD levels of a segment without
#                        them whose bits go to ``words_into`` (none for the others: their
#                        words are owned, below)
#   lay[L, _LAY_FIELDS]  per global layer: c, is_list, below, empty level, offsets base,
#                        cuDF offsets base (-1: none; the run's layer's int32 offsets from
#                        0 in ``cudf_all``, written by its segments' entries; -2 - e: from
#                        entry e of ``cudf_into``, each value plus the shift below), validity
#                        base (a *bit* of ``words_all``: a layer's words
#                        start at a 64-byte aligned slot of their own, room for one bit
#                        per level, or -- the layers of a segment of a run, see below --
#                        at the run's bit of its segment in the slot the run shares; -1 - b:
#                        from bit b of ``words_into`` (no repetition levels) or of
#                        ``words_lists`` (a run with them: each valid entry's bit OR-ed)),
#                        the shift added to a ``cudf_into`` layer's offsets, and the room
#                        of a layer written into the caller's arrays (its entries that fit
#                        there: the offsets of entries 0 .. room, the bits of 0 .. room - 1;
#                        what lies past it is not written)
#   ltr[...]             the segments' ltr tables, concatenated
#   own[W, _OWN_FIELDS]  the owned word ranges of ``words_all`` (first word, words, first
#                        member, members), then the exclusive prefix of their words [W + 1]
#                        (the scatter's thread -> range map), then their members
#                        [_OWN_MEMBER each: layer, segment, first bit in the range]
#   positions[...]       the caller's positions to read back (``read_also``)
# ``result`` (int64[2 * L + S], then what else is read back): entries per layer, null
# entries per layer, then the OR of the error codes of each segment.  It travels up at the
# front of the same upload, zeroed but for the entries of the layers without repetition
# levels (their levels), so that no launch zeroes anything.
#
# A segment without repetition levels (no list layer: a flat nullable column, a struct of
# them) has level ``j`` as entry ``j`` of every layer, so it needs neither flags nor scan.
# Each word of its layers' slots (Arrow's bit order, in ``words_all``: no byte per entry)
# is *owned* by one thread of the scatter, which computes it whole from the definition
# levels of the segments whose bits it holds (a run's segments', one after the other; zero
# past them), checks those levels and adds their nulls (one atomic per segment and word):
# every word is stored once, so the words need no zeroing.  Segments whose bits go to the
# caller's words (``words_into``, zeroed by the caller and shared with other calls) take a
# thread per _WORD levels instead, OR-ing their bits there.  A unit whose leaves are all
# flat makes one launch, the scatter, whose last threads also gather what is read back
# with the counts.  The segments of a *run* (a column's leaves of consecutive fragments:
# ``LevelSegment.run``) write each layer's bits one after the other into one slot, which is
# then the column's whole validity mask.
#
# A segment with repetition levels writes its layers' validity as the same words: an entry's
# position is known only after the scan, so the flags launch sets every word of its layers
# to all-valid (the thread of level 32 k, word k: a layer has at most one entry per level),
# and the scatter clears the bit of each null entry with one atomic AND (beside the atomic
# that counts it), and the thread of level 0 clears the bits past the layer's entries in
# its last word (the slot's words past those of its levels are owned words: zeros).  No
# validity byte is written for any layer.  Segments of a run with
# repetition levels (``cudf``) do the same over the run: level and entry positions are the
# run's (the level's place in the run, the scan's position less the run's layer start), one
# slot per layer, the bits past the run's entries cleared by its first segment.
_SEG_FIELDS = 11
_LAY_FIELDS = 9
_WORD = 32
_OWN_FIELDS = 4  # an owned word range: first word of words_all, words, first member, members
_OWN_MEMBER = 3  # a member of one: layer, segment, first bit in the range


@gpu_kernel
def _unravel_segments_flags_kernel(levels, desc, seg0, ls0, lay0, ltr0, nseg, total, flags, words_all, result, err0):
    """flags[first flag + m * stride + j] = 1 if level j of a segment with repetition levels has
    an entry at its layer m (``total``: the levels of those segments); the thread of level
    ``32 k`` also sets word ``k`` of every layer's validity words to all-valid (the scatter
    clears the null entries' bits and the bits past the layer's entries)."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i >= np.uint32(total):
        return
    s = np.int64(_segment_of32(desc[ls0:], nseg, i))
    b = seg0 + s * _SEG_FIELDS
    j = np.int64(np.uint32(i - np.uint32(desc[ls0 + s])))
    n = desc[b + 2]
    lev = desc[b + 8] - desc[b + 10] + j  # the level's place in its run (j: a segment alone)
    if lev % _WORD == 0:
        for m in range(desc[b + 4]):
            first = desc[lay0 + (desc[b + 3] + m) * _LAY_FIELDS + 6]
            if first >= 0:  # (a layer of the caller's words_lists: its valid bits OR-ed by the scatter)
                words_all[first // _WORD + lev // _WORD] = np.uint32(0xFFFFFFFF)
    r = np.int64(levels[desc[b] + j])
    d = np.int64(0)
    dp = desc[b + 1]
    if dp >= 0:
        d = np.int64(levels[dp + j])
    l0 = desc[b + 3]
    nl = desc[b + 4]
    ltr = desc[ltr0 + desc[b + 5]:]
    fb = desc[b + 8] + j
    stride = desc[b + 9]
    if not _level_ok(r, d, desc[b + 6], desc[b + 7]) or (j == 0 and r != desc[b + 6]):
        cuda.atomic.or_(result, err0 + s, ERR_BAD_LEVEL)
        for m in range(nl):
            flags[fb + m * stride] = 0
        return
    for m in range(nl):
        flags[fb + m * stride] = 1 if _is_entry(r, d, ltr, desc[lay0 + (l0 + m) * _LAY_FIELDS]) else 0


@dual
def _flat_word(levels, dp, lo, hi, max_def, below, empty_level):
    """The validity of levels ``[lo, hi)`` (at most 32) of a leaf without repetition levels at
    one of its layers (``below`` / ``empty_level``): ``(bits, from bit 0; nulls; whether a
    level exceeds max_def)``; ``dp``: its definition levels in ``levels`` (-1: none, all
    valid)."""
    bits = np.uint32(0)
    nulls = np.int64(0)
    bad = False
    for k in range(lo, hi):
        d = np.int64(0)
        if dp >= 0:
            d = np.int64(levels[dp + k])
        if d > max_def:
            bad = True
        if _is_valid(d, below, empty_level):
            bits |= np.uint32(1) << np.uint32(k - lo)
        else:
            nulls += 1
    return bits, nulls, bad


@dual
def _gathered(src, positions, flags, i):
    """Entry ``i`` of what the unravel reads back after its counts: ``src[positions[i]]``
    (-1 outside ``src``), then the earlier launches' error ``flags``."""
    n = positions.shape[0]
    if i < n:
        p = positions[i]
        if 0 <= p < src.shape[0]:
            return np.int64(src[p])
        return np.int64(-1)
    return np.int64(flags[i - n])


@gpu_kernel
def _unravel_segments_scatter_kernel(levels, desc, seg0, ts0, lay0, ltr0, nseg, total, excl, offsets_all, words_all, result, nlayers,
                                     cudf_all, words_into, cudf_into, words_lists, ws0, wm0, nws, nwords, src, positions, flags, ngather):
    """Offsets, validity, entry and null counts of every layer of every segment (threads:
    ``thread_start``, see above), and the runs' list layers' cuDF offsets.  A layer of a
    segment without repetition levels whose first bit (``desc[lb + 6]``) is negative writes
    its bits from bit ``-1 - first bit`` of ``words_into`` instead of ``words_all``.  A
    layer of a run with repetition levels whose cuDF offsets base (``desc[lb + 5]``) is
    below -1 writes its offsets from entry ``-2 - base`` of ``cudf_into``, each plus
    ``desc[lb + 7]``; one whose first bit is negative ORs the bit of each valid entry into
    ``words_lists`` from bit ``-1 - first bit`` (zeroed by the caller: null entries' bits
    stay 0, the words shared with bits written before keep them); both only for entries
    within the layer's room (``desc[lb + 8]``).

    After those ``total`` threads, ``nwords`` threads each write one word of ``words_all``
    that no other thread writes (``words_all`` is not zeroed; :func:`_owned_words`): the
    ``nws`` word ranges at ``desc[ws0:]`` (:data:`_OWN_FIELDS` each: first word, words, first
    member, members; their words' prefix after them) hold the slots of the layers of
    segments without repetition levels (each member a layer at ``desc[wm0:]``: layer,
    segment, first bit in the range), whose bits the thread computes from the members'
    definition levels (its word's whole value: the bits of no member 0), adding their nulls
    and flagging a level out of range; ranges without members are the padding of the slots
    of layers with repetition levels, past the words the flags launch set (0).  Then
    ``ngather`` threads fill ``result[2 * nlayers + nseg:]`` with :func:`_gathered` (the
    caller's values and the earlier launches' flags, read back with the counts)."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i >= np.uint32(total + nwords + ngather):
        return
    if i >= np.uint32(total + nwords):
        g = np.int64(i) - total - nwords
        result[2 * nlayers + nseg + g] = _gathered(src, positions, flags, g)
        return
    if i >= np.uint32(total):
        t = np.uint32(i - np.uint32(total))
        r = np.int64(_segment_of32(desc[ws0 + nws * _OWN_FIELDS:], nws, t))
        rb = ws0 + r * _OWN_FIELDS
        w = np.int64(np.uint32(t - np.uint32(desc[ws0 + nws * _OWN_FIELDS + r])))
        lo = w * _WORD
        hi = lo + _WORD
        m0 = desc[rb + 2]
        m1 = m0 + desc[rb + 3]
        # the first member whose bits end after lo (members' bits ascend, one after the other)
        a = m0
        z = m1
        while a < z:
            mid = (a + z) >> 1
            mb = wm0 + mid * _OWN_MEMBER
            if desc[mb + 2] + desc[seg0 + desc[mb + 1] * _SEG_FIELDS + 2] <= lo:
                a = mid + 1
            else:
                z = mid
        word = np.uint32(0)
        while a < m1:
            mb = wm0 + a * _OWN_MEMBER
            rel = desc[mb + 2]
            if rel >= hi:
                break
            g = desc[mb]
            s = desc[mb + 1]
            b = seg0 + s * _SEG_FIELDS
            first = max(lo, rel)
            last = min(hi, rel + desc[b + 2])
            if last > first:
                lb = lay0 + g * _LAY_FIELDS
                bits, nulls, bad = _flat_word(levels, desc[b + 1], first - rel, last - rel, desc[b + 7], desc[lb + 2], desc[lb + 3])
                word |= bits << np.uint32(first - lo)
                if nulls:
                    cuda.atomic.add(result, nlayers + g, nulls)
                if bad:
                    cuda.atomic.or_(result, 2 * nlayers + s, ERR_BAD_LEVEL)
            a += 1
        words_all[desc[rb] + w] = word
        return
    s = np.int64(_segment_of32(desc[ts0:], nseg, i))
    b = seg0 + s * _SEG_FIELDS
    j = np.int64(np.uint32(i - np.uint32(desc[ts0 + s])))
    n = desc[b + 2]
    rp = desc[b]
    dp = desc[b + 1]
    l0 = desc[b + 3]
    nl = desc[b + 4]
    if rp < 0:
        # no repetition levels, bits into the caller's words (words_into; the others'
        # are owned words, above): thread j takes levels [32 j, 32 j + 32), entries
        # [32 j, 32 j + 32) of every layer, OR-ed into their place (another unit's bits
        # may share the first and last words), their nulls added (one atomic per layer)
        lo = j * _WORD
        hi = min(lo + _WORD, n)
        for m in range(nl):
            lb = lay0 + (l0 + m) * _LAY_FIELDS
            at = -1 - desc[lb + 6] + lo  # the bit of level lo
            bits, nulls, bad = _flat_word(levels, dp, lo, hi, desc[b + 7], desc[lb + 2], desc[lb + 3])
            if bad:
                cuda.atomic.or_(result, 2 * nlayers + s, ERR_BAD_LEVEL)
            w = at // _WORD
            sh = at % _WORD
            if sh == 0 and hi - lo == _WORD:
                words_into[w] = bits
            elif sh == 0:
                cuda.atomic.or_(words_into, w, bits)
            else:  # bits start inside a word: its high part, then the next word's low part
                cuda.atomic.or_(words_into, w, bits << np.uint32(sh))
                if hi - lo > _WORD - sh:
                    cuda.atomic.or_(words_into, w + 1, bits >> np.uint32(_WORD - sh))
            if nulls:
                cuda.atomic.add(result, nlayers + l0 + m, nulls)
        return
    fb = desc[b + 8]
    stride = desc[b + 9]
    rb = desc[b + 10]  # the run's first flag (its layer m's: rb + m * stride)
    if j == 0:
        for m in range(nl):
            lb = lay0 + (l0 + m) * _LAY_FIELDS
            count = excl[fb + m * stride + n] - excl[fb + m * stride]
            result[l0 + m] = count
            if m > 0 and desc[lb + 1]:
                offsets_all[desc[lb + 4] + count] = excl[fb + (m - 1) * stride + n] - excl[fb + (m - 1) * stride]
                cb = desc[lb + 5]
                if cb != -1 and fb == rb:  # the run's final offset (its first segment's thread)
                    run_n = excl[rb + (m + 1) * stride] - excl[rb + m * stride]
                    last = excl[rb + m * stride] - excl[rb + (m - 1) * stride]
                    if cb >= 0:
                        cudf_all[cb + run_n] = last
                    elif run_n <= desc[lb + 8]:
                        cudf_into[-2 - cb + run_n] = last + desc[lb + 7]
            # the bits past the run's layer's entries in its last word: 0 (by its first segment)
            total = excl[rb + m * stride + stride] - excl[rb + m * stride]
            if fb == rb and total % _WORD and desc[lb + 6] >= 0:
                keep = (np.uint32(1) << np.uint32(total % _WORD)) - np.uint32(1)
                cuda.atomic.and_(words_all, desc[lb + 6] // _WORD + total // _WORD, keep)
    if j >= n:  # the one thread of a segment without levels
        return
    r = np.int64(levels[rp + j])
    d = np.int64(0)
    if dp >= 0:
        d = np.int64(levels[dp + j])
    if not _level_ok(r, d, desc[b + 6], desc[b + 7]):
        return
    ltr = desc[ltr0 + desc[b + 5]:]
    for m in range(nl):
        lb = lay0 + (l0 + m) * _LAY_FIELDS
        if _is_entry(r, d, ltr, desc[lb]):
            at = fb + m * stride
            p = excl[at + j] - excl[at]
            q = excl[at + j] - excl[rb + m * stride]  # the entry's place in the run's layer
            if desc[lb + 1]:
                inner = at - stride
                offsets_all[desc[lb + 4] + p] = excl[inner + j] - excl[inner]
                cb = desc[lb + 5]
                if cb >= 0:  # the run's entry, at its position in the run's layer
                    cudf_all[cb + q] = excl[inner + j] - excl[rb + (m - 1) * stride]
                elif cb < -1 and q <= desc[lb + 8]:  # the caller's, shifted by the entries before the run
                    cudf_into[-2 - cb + q] = excl[inner + j] - excl[rb + (m - 1) * stride] + desc[lb + 7]
            first = desc[lb + 6]
            if not _is_valid(d, desc[lb + 2], desc[lb + 3]):  # a null entry: its bit (at its run place) cleared
                if first >= 0:
                    cuda.atomic.and_(words_all, first // _WORD + q // _WORD, ~(np.uint32(1) << np.uint32(q % _WORD)))
                cuda.atomic.add(result, nlayers + l0 + m, 1)
            elif first < 0 and q < desc[lb + 8]:  # a valid entry of the caller's words: its bit set
                bit = -1 - first + q
                cuda.atomic.or_(words_lists, bit // _WORD, np.uint32(1) << np.uint32(bit % _WORD))


@gpu_kernel
def _gather_into_kernel(src, positions, flags, nflags, out, base):
    """``out[:base] = 0``, then ``out[base + i] = src[positions[i]]`` (-1 outside ``src``),
    then the first ``nflags`` of ``flags``, then zeros to the end of ``out`` (one launch of
    ``out.size`` threads)."""
    t = cuda.grid(1)
    if t >= out.shape[0]:
        return
    if t < base:
        out[t] = 0
        return
    i = t - base
    if i < positions.shape[0] + nflags:
        out[t] = _gathered(src, positions, flags, i)
    else:
        out[t] = 0


@gpu_kernel
def _to_bitmap_kernel(valid, n, out):
    b = cuda.grid(1)
    if b < out.shape[0]:
        out[b] = _bitmap_byte(valid, n, b)


@gpu_kernel
def _from_bitmap_kernel(bitmap, offset, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = _bitmap_bit(bitmap, offset, i)


# --------------------------------------------------------------------------
# Public API: unravel
# --------------------------------------------------------------------------

_EMPTY_U16 = np.zeros(0, dtype=np.uint16)
_LEVELS_PER_CHUNK = 1 << 16


def _as_levels(levels, name):
    if levels is None:
        return None
    arr = np.ascontiguousarray(levels)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        msg = f"{name} levels must be a 1-D integer array"
        raise TypeError(msg)
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        msg = f"{name} levels hold negative values"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)
    return arr


def _num_levels(rep, def_, num_levels):
    lens = {a.shape[0] for a in (rep, def_) if a is not None}
    if len(lens) > 1:
        msg = "rep and def levels differ in length"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)
    if lens:
        n = lens.pop()
        if num_levels is not None and int(num_levels) != n:
            msg = f"expected {num_levels} levels, got {n}"
            raise CorruptInputError(msg, ERR_BAD_LEVEL)
        return n
    if num_levels is None:
        msg = "num_levels is required when both rep and def levels are absent"
        raise ValueError(msg)
    return int(num_levels)


def _layout(tab, counts):
    """Per-layer base offsets into the concatenated offsets / validity buffers."""
    nl = tab.kinds.shape[0]
    off_base = np.zeros(nl, dtype=np.int64)
    val_base = np.zeros(nl, dtype=np.int64)
    off_total = 0
    val_total = 0
    for m in range(nl):
        val_base[m] = val_total
        val_total += int(counts[m])
        off_base[m] = off_total
        if tab.is_list[m]:
            off_total += int(counts[m]) + 1
    return off_base, val_base, off_total, val_total


def _check_structure(tab, rep):
    if tab.max_rep and rep is None:
        msg = "list layers need repetition levels"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)
    if not tab.max_rep and rep is not None:
        msg = "repetition levels given but no list layer"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)


def _bad_level(tab, rep, def_, bad):
    r = int(rep[bad]) if rep is not None else 0
    d = int(def_[bad]) if def_ is not None else 0
    msg = (
        f"level {bad} (rep {r}, def {d}) is invalid for layers {tab.kinds.tolist()} "
        f"(max rep {tab.max_rep}, max def {tab.max_def}; the first level must start a row)"
    )
    return CorruptInputError(msg, ERR_BAD_LEVEL)


def _unravel_flat(def_, tab, n):
    """No list layer: every level is an entry of every layer; validity is ``def <= below``."""
    nl = tab.kinds.shape[0]
    counts = np.full(nl, n, dtype=np.int64)
    if def_ is not None and n:
        top = _max_level(def_)
        if top > tab.max_def:
            bad = int(np.argmax(def_.astype(np.int64) > tab.max_def))
            raise _bad_level(tab, None, def_, bad)
    layers = []
    for m in range(nl):
        kind = int(tab.kinds[m])
        validity = None
        if def_ is not None and kind in _NULLABLE_KINDS:
            v = np.empty(n, dtype=np.bool_)
            if _defs_le(def_, tab.below[m], v):
                validity = v
        layers.append(LayerResult(kind, validity, None, n))
    return layers, counts


def _unravel_general(rep, def_, tab, n):
    nl = tab.kinds.shape[0]
    rep_a = rep if rep is not None else _EMPTY_U16
    def_a = def_ if def_ is not None else _EMPTY_U16
    has_rep = rep is not None
    has_def = def_ is not None
    nchunks = max(1, min(4 * numba.get_num_threads(), n // _LEVELS_PER_CHUNK))
    chunk_counts = np.zeros((nchunks, nl), dtype=np.int64)
    if nchunks == 1:
        bad = _unravel_count_range(
            rep_a, has_rep, def_a, has_def, tab.c, tab.ltr, tab.max_rep, tab.max_def, chunk_counts[0], 0, n
        )
    else:
        bads = np.full(nchunks, -1, dtype=np.int64)
        _unravel_count_parallel(
            rep_a, has_rep, def_a, has_def, n, tab.c, tab.ltr, tab.max_rep, tab.max_def, chunk_counts, bads
        )
        bad = next((int(b) for b in bads if b >= 0), -1)
    if bad >= 0:
        raise _bad_level(tab, rep, def_, bad)
    counts = chunk_counts.sum(axis=0)
    starts = np.zeros_like(chunk_counts)
    np.cumsum(chunk_counts[:-1], axis=0, out=starts[1:])
    off_base, val_base, off_total, val_total = _layout(tab, counts)
    # nchunks * nl scratch slots at the end of both buffers (see _fill_layer_range)
    offsets_all = np.empty(off_total + nchunks * nl, dtype=np.int64)
    valid_all = np.empty(val_total + nchunks * nl, dtype=np.bool_)
    null_counts = np.zeros((nchunks, nl), dtype=np.int64)
    args = (tab.c, tab.ltr, tab.is_list, tab.below, tab.empty_level, off_base, val_base, offsets_all, valid_all)
    if nchunks == 1:
        _unravel_fill_range(rep_a, has_rep, def_a, has_def, *args, starts[0], null_counts[0], 0, 0, n)
    else:
        _unravel_fill_parallel(rep_a, has_rep, def_a, has_def, n, *args, starts, null_counts)
    for m in range(1, nl):
        if tab.is_list[m]:
            offsets_all[off_base[m] + counts[m]] = counts[m - 1]
    nulls = null_counts.sum(axis=0)
    layers = []
    for m in range(nl):
        cnt = int(counts[m])
        kind = int(tab.kinds[m])
        validity = None
        if kind in _NULLABLE_KINDS and nulls[m]:
            validity = valid_all[val_base[m] : val_base[m] + cnt]
        offsets = None
        if tab.is_list[m]:
            offsets = offsets_all[off_base[m] : off_base[m] + cnt + 1]
        layers.append(LayerResult(kind, validity, offsets, cnt))
    return layers, counts


def unravel_levels(rep, def_, layer_kinds, num_levels=None, num_rows=None):
    """Turn rep/def levels into per-layer validity and offsets (CPU).

    :param rep: ``uint16[n]`` repetition levels, or None (no list layer).
    :param def_: ``uint16[n]`` definition levels, or None (nothing null or empty).
    :param layer_kinds: layer kinds, inner-most first (see module docstring).
    :param num_levels: number of levels; required when ``rep`` and ``def_`` are both None.
    :param num_rows: optional expected number of rows (checked).
    :returns: :class:`Unraveled` (``layers`` inner-most first).
    :raises CorruptInputError: a level is out of range, the first level does
        not start a row, or the row count does not match ``num_rows``.
    """
    tab = def_table(layer_kinds)
    rep = _as_levels(rep, "repetition")
    def_ = _as_levels(def_, "definition")
    _check_structure(tab, rep)
    n = _num_levels(rep, def_, num_levels)
    if rep is None:
        layers, counts = _unravel_flat(def_, tab, n)
    else:
        layers, counts = _unravel_general(rep, def_, tab, n)
    rows = int(counts[-1])
    if num_rows is not None and rows != int(num_rows):
        msg = f"levels describe {rows} rows, expected {num_rows}"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)
    return Unraveled(layers, int(counts[0]), rows)


def unravel_levels_gpu(rep, def_, layer_kinds, num_levels=None, num_rows=None, *, threads_per_block=256):
    """GPU twin of :func:`unravel_levels`.

    One flag kernel marks, for every (layer, level), whether the level has an
    entry there; one exclusive scan over the flattened flags gives every
    entry's position; one scatter kernel writes all offsets and validity.
    Returned arrays are device arrays (CuPy if any input was CuPy).
    """
    tab = def_table(layer_kinds)
    use_cp = _device.wants_cupy(rep, def_)
    _check_structure(tab, rep)
    d_rep = _device.to_device(rep) if rep is not None else None
    d_def = _device.to_device(def_) if def_ is not None else None
    n = _num_levels(d_rep, d_def, num_levels)
    nl = tab.kinds.shape[0]
    if d_rep is None:
        d_rep = _device.to_device(np.zeros(1, dtype=np.uint16))
    if d_def is None:
        d_def = _device.to_device(np.zeros(1, dtype=np.uint16))
    cuda_mod = _device.cuda_module()
    d_c = cuda_mod.to_device(tab.c)
    d_ltr = cuda_mod.to_device(tab.ltr)
    flags = _device.device_empty(max(nl * n, 1), np.int32)
    blocks, tpb = _device.launch_dims(n, threads_per_block)
    if n:
        err = new_error_flag()
        _unravel_flags_kernel.get()[blocks, tpb](
            d_rep, rep is not None, d_def, def_ is not None, np.int64(n), d_c, d_ltr,
            np.int64(tab.max_rep), np.int64(tab.max_def), flags, err,
        )
        raise_if_flagged(err, "unravel_levels_gpu")
    excl, _total = _device.exclusive_scan(flags[: nl * n])
    # Layer boundaries of the flattened scan: excl[m * n] for m = 0..nl.
    bounds = np.array([int(_device.to_host(excl[m * n : m * n + 1])[0]) for m in range(nl + 1)])
    counts = np.diff(bounds)
    off_base, val_base, off_total, val_total = _layout(tab, counts)
    offsets_all = _device.device_zeros(max(off_total, 1), np.int64)
    valid_all = _device.device_empty(max(val_total, 1), np.bool_)
    _unravel_scatter_kernel.get()[blocks, tpb](
        d_rep, rep is not None, d_def, def_ is not None, np.int64(n), d_c, d_ltr,
        cuda_mod.to_device(tab.is_list), cuda_mod.to_device(tab.below), cuda_mod.to_device(tab.empty_level),
        excl, cuda_mod.to_device(off_base), cuda_mod.to_device(val_base), offsets_all, valid_all,
    )
    cp = _device.get_cupy()
    layers = []
    for m in range(nl):
        cnt = int(counts[m])
        kind = int(tab.kinds[m])
        validity = None
        if kind in _NULLABLE_KINDS and cnt:
            v = valid_all[val_base[m] : val_base[m] + cnt]
            all_valid = bool(cp.asarray(v).all()) if cp is not None else bool(_device.to_host(v).all())
            if not all_valid:
                validity = _device.as_output(v, use_cp)
        offsets = None
        if tab.is_list[m]:
            offsets = _device.as_output(offsets_all[off_base[m] : off_base[m] + cnt + 1], use_cp)
        layers.append(LayerResult(kind, validity, offsets, cnt))
    rows = int(counts[-1])
    if num_rows is not None and rows != int(num_rows):
        msg = f"levels describe {rows} rows, expected {num_rows}"
        raise CorruptInputError(msg, ERR_BAD_LEVEL)
    return Unraveled(layers, int(counts[0]), rows)


class LevelSegment(NamedTuple):
    """The levels of one leaf within a shared ``uint16`` level buffer (see
    :func:`unravel_segments_gpu`): positions of its repetition / definition levels (-1:
    absent), their count, and its layer kinds (inner-most first)."""

    rep_pos: int
    def_pos: int
    num_levels: int
    layer_kinds: tuple
    #: segments without repetition levels of one run (>= 0; the same layer kinds) write each
    #: layer's validity bits one after the other, in segment order, into one 64-byte aligned
    #: slot padded to 64 bytes (a column's mask over its leaves of consecutive fragments);
    #: -1: the layers' own slots
    run: int = -1


_tables: dict[tuple, DefTable] = {}

#: the most levels a run's list offsets are written for as int32 (``unravel_segments_gpu(cudf=True)``)
CUDF_RUN_MAX_LEVELS = 2**31 - 1


def _flag_layout(segments, has_rep, ns, nls, cudf: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    """Where the flags of every segment with repetition levels go: ``(first flag (S + 1:
    the last is the total), stride, the first flag of its run, runs)``.  A segment's layer
    ``m`` flags start at its first flag + ``m * stride``.  Alone, a segment's layers follow
    one another (stride: its levels); with ``cudf``, the segments of a run (two or more, or
    one; their list layers at the same places, repetition levels all) lay each layer's flags one after the other
    (stride: the run's levels; a segment's first flag: the run's plus the levels of the
    run's segments before it).  ``runs``: the segments of each run so laid out, in order."""
    nseg = len(segments)
    first = np.zeros(nseg + 1, np.int64)
    stride = np.array(ns, np.int64)
    run_first = np.zeros(nseg, np.int64)
    groups: dict[int, list[int]] = {}
    if cudf:
        for k, sg in enumerate(segments):
            if has_rep[k] and sg.run >= 0:
                groups.setdefault(int(sg.run), []).append(k)
    runs = [g for g in groups.values() if len({_list_layers(segments[k].layer_kinds) for k in g}) == 1
            and int(sum(int(ns[k]) for k in g)) <= CUDF_RUN_MAX_LEVELS]
    in_run = {k: r for r, g in enumerate(runs) for k in g}
    at = 0
    placed = set()
    for k in range(nseg):
        if not has_rep[k] or k in placed:
            continue
        r = in_run.get(k)
        members = [k] if r is None else runs[r]
        total = int(sum(int(ns[x]) for x in members))
        lev = 0
        for x in members:
            first[x] = at + lev
            stride[x] = total
            run_first[x] = at
            lev += int(ns[x])
            placed.add(x)
        at += total * int(nls[k])
    first[nseg] = at
    for k in range(nseg):
        if not has_rep[k]:
            first[k] = at  # (no flags)
            run_first[k] = at
    return first, stride, run_first, runs


def _list_layers(kinds) -> tuple[bool, ...]:
    """Which layers (inner-most first) are lists: the segments of a run lay their flags out
    together where these agree (their layers' null / empty kinds may differ by fragment)."""
    return tuple(bool(_cached_table(tuple(int(k) for k in kinds)).is_list[m]) for m in range(len(kinds)))


def _cudf_slots(runs, tabs, ns, layer_first, nlayers, lists_into=None) -> tuple[np.ndarray, int]:
    """The first int32 of every run's list layer's cuDF offsets (room for an entry per level
    of the run, and the final one), set on every layer of the run's segments; -1 elsewhere;
    a layer of ``lists_into`` (:func:`_lists_into`) whose offsets the caller places takes
    ``-2 - its first entry`` in the caller's array (no room here)."""
    base = np.full(nlayers, -1, np.int64)
    size = 0
    for g in runs:
        tab = tabs[g[0]]
        total = int(sum(int(ns[k]) for k in g))
        for m in range(tab.kinds.shape[0]):
            if tab.is_list[m]:
                spec = None if lists_into is None else lists_into.get(int(layer_first[g[0]]) + m)
                if spec is not None and spec[0] >= 0:
                    for k in g:
                        base[int(layer_first[k]) + m] = -2 - (spec[0] + spec[3])
                    continue
                for k in g:
                    base[int(layer_first[k]) + m] = size
                size += total + 1
    return base, size


def _lists_into(segments, runs, ns, nls, layer_first, spec) -> dict[int, tuple[int, int, int, int, int]]:
    """Every layer of the runs with repetition levels that ``unravel_segments_gpu``'s
    ``lists_into`` places (``{run: per layer (first entry, first bit, entries, row, shift)}``:
    a run of every segment of that run, its layers as many), by global layer; a list
    layer's offsets only where they stay int32 (its shift plus the run's levels, a bound of
    the inner layer's entries, at most :data:`CUDF_RUN_MAX_LEVELS`: else first entry -1)."""
    out: dict[int, tuple[int, int, int, int, int]] = {}
    if not spec:
        return out
    for g in runs:
        run = int(segments[g[0]].run)
        got = spec.get(run)
        if got is None or len(got) != int(nls[g[0]]) or sum(1 for sg in segments if int(sg.run) == run) != len(g):
            continue
        levels = int(sum(int(ns[k]) for k in g))
        for m, lay in enumerate(got):
            entry, bit, entries, row, shift = (int(x) for x in lay)
            if entry >= 0 and shift + levels > CUDF_RUN_MAX_LEVELS:
                entry = -1
            if entry >= 0 or bit >= 0:
                for k in g:
                    out[int(layer_first[k]) + m] = (entry, bit, entries, row, shift)
    return out


def _cudf_results(runs, cudf_all, cudf_base, counts, layer_first, nls) -> tuple[dict[int, int], dict[int, object]]:
    """Per global layer of a run's segment: the row of its first entry in the run's layer
    (the entries of the run's segments before it: its validity's bit in the run's slot),
    and, per list layer, the run's cuDF offsets view (its entries + 1)."""
    rows: dict[int, int] = {}
    views: dict[int, object] = {}
    for g in runs:
        for m in range(int(nls[g[0]])):
            layers = [int(layer_first[k]) + m for k in g]
            row = 0
            for x in layers:
                rows[x] = row
                row += int(counts[x])
            b = int(cudf_base[layers[0]])
            if b >= 0:
                view = cudf_all[b : b + row + 1]
                views.update((x, view) for x in layers)
    return rows, views


def _lists_results(runs, into_lay, lists_out, counts, layer_first, nls, cudf_rows, cudf_views) -> dict[int, int]:
    """Per global layer of ``lists_into`` (:func:`_lists_into`): the row of its segment's
    first entry in the caller's slot (the entries before the call, then the run's before the
    segment); a list layer whose offsets are there gets the slot as its ``cudf_views``.
    Raises CorruptInputError where a run's layer holds more entries than the slot's room."""
    rows: dict[int, int] = {}
    for g in runs:
        for m in range(int(nls[g[0]])):
            spec = into_lay.get(int(layer_first[g[0]]) + m)
            if spec is None:
                continue
            entry, _bit, entries, row, _shift = spec
            total = int(sum(int(counts[int(layer_first[k]) + m]) for k in g))
            if row + total > entries:
                msg = f"unravel_segments_gpu: a run's layer of {total} entries after {row} overflows its slot of {entries}"
                raise CorruptInputError(msg, ERR_BAD_LEVEL)
            view = lists_out[entry : entry + entries + 1] if entry >= 0 else None
            for k in g:
                x = int(layer_first[k]) + m
                rows[x] = row + cudf_rows.get(x, 0)
                if view is not None:
                    cudf_views[x] = view
    return rows


def _cached_table(kinds: tuple) -> DefTable:
    tab = _tables.get(kinds)
    if tab is None:
        tab = _tables[kinds] = def_table(kinds)
    return tab


_SLOT_WORDS = 16  # a validity slot: 64 bytes (cuDF's mask padding)


def _validity_slots(segments, has_rep, ns, nls, layer_first, rep_runs=(), into=None,
                    lists_into=None) -> tuple[np.ndarray, int, list[list[int]], list[tuple[int, int, list[tuple[int, int, int]]]]]:
    """The first validity bit of every layer (room for a bit per level of its segment) and
    the words of all: every layer a slot of its own of whole 64-byte blocks, but the layers
    of a run's segments (``LevelSegment.run``, no repetition levels), which take the bits
    after the previous segment's in the slot of their run and layer; a run of ``into``
    (``{run: first bit of each layer}``) takes them from those bits of the caller's words,
    written ``-1 - bit`` (no slot); so does a layer of a run with repetition levels that
    ``lists_into`` places (:func:`_lists_into`: its first bit there, plus its row).

    Also the *owned* word ranges (``(first word, words, members)``, members ``(layer,
    segment, first bit in the range)``): every slot of layers without repetition levels
    (its members' bits one after the other, then zeros to the slot's end), and the padding
    of every slot of layers with repetition levels past the words of its levels (which the
    flags launch sets): the words that one thread each of the scatter writes whole, so that
    the slots need no zeroing."""
    owned: list[tuple[int, int, list[tuple[int, int, int]]]] = []
    nlayers = int(layer_first[-1])
    bit_base = np.zeros(nlayers, np.int64)
    runs: dict[int, list[int]] = {}
    for s, sg in enumerate(segments):
        if sg.run >= 0 and not has_rep[s]:
            runs.setdefault(int(sg.run), []).append(s)
    in_run = np.zeros(len(segments), np.bool_)
    rep_run_of = {k: g for g in rep_runs for k in g}
    shared: list[list[int]] = []  # the layers of each slot that runs share
    word = 0
    for s in range(len(segments)):
        if in_run[s]:
            continue
        if s in rep_run_of:  # a run of segments with repetition levels (_flag_layout): each
            members = rep_run_of[s]  # layer one slot, its entries at their run places
            slot = -(-max(int(sum(int(ns[k]) for k in members)), 1) // (_WORD * _SLOT_WORDS)) * _SLOT_WORDS
            for m in range(int(nls[s])):
                spec = None if lists_into is None else lists_into.get(int(layer_first[s]) + m)
                if spec is not None and spec[1] >= 0:  # the caller's words (no slot here)
                    for k in members:
                        in_run[k] = True
                        bit_base[int(layer_first[k]) + m] = -1 - (spec[1] + spec[3])
                    continue
                for k in members:
                    in_run[k] = True
                    bit_base[int(layer_first[k]) + m] = _WORD * word
                shared.append([int(layer_first[k]) + m for k in members])
                _own_padding(owned, word, slot, int(sum(int(ns[k]) for k in members)))
                word += slot
            continue
        members = runs.get(int(segments[s].run), [s]) if segments[s].run >= 0 and not has_rep[s] else [s]
        if len({int(nls[k]) for k in members}) != 1:
            members = [s]
        given = None if into is None or segments[s].run < 0 or has_rep[s] else into.get(int(segments[s].run))
        if given is not None and len(members) == len(runs.get(int(segments[s].run), ())) and len(given) == int(nls[s]):
            for m in range(int(nls[s])):
                bit = int(given[m])
                for k in members:
                    in_run[k] = True
                    bit_base[int(layer_first[k]) + m] = -1 - bit
                    bit += int(ns[k])
            continue
        total = int(sum(int(ns[k]) for k in members))
        slot = -(-max(total, 1) // (_WORD * _SLOT_WORDS)) * _SLOT_WORDS
        for m in range(int(nls[s])):
            bit = _WORD * word
            parts = []
            for k in members:
                in_run[k] = True
                bit_base[int(layer_first[k]) + m] = bit
                parts.append((int(layer_first[k]) + m, k, bit - _WORD * word))
                bit += int(ns[k])
            if len(members) > 1:
                shared.append([int(layer_first[k]) + m for k in members])
            if has_rep[s]:
                _own_padding(owned, word, slot, total)
            else:
                owned.append((word, slot, parts))
            word += slot
    return bit_base, word, shared, owned


def _own_padding(owned, word: int, slot: int, levels: int) -> None:
    """The words of a slot of a layer with repetition levels (``levels`` of them) that the
    flags launch does not set (one per 32 levels from the slot's first): an owned range
    without members (zeros)."""
    head = -(-levels // _WORD)
    if slot > head:
        owned.append((word + head, slot - head, []))


def unravel_segments_gpu(levels, segments, *, read_also=None, cudf=False, words_into=None, lists_into=None, threads_per_block=256):
    """Unravel many leaves' levels at once: :func:`unravel_levels_gpu` for every
    :class:`LevelSegment` of ``segments``, with one copy back to the host (entry counts,
    null counts and error codes of every layer and segment).  Segments with repetition
    levels take a flags launch and one scan over all of them; segments without (no list
    layer: level ``j`` is entry ``j`` of every layer, as in a flat nullable column) take
    neither: a thread per word of their validity bitmask computes it whole from their
    levels, checks them and adds their nulls, in the one scatter launch that every segment
    shares, whose last threads also gather what is read back (nothing is zeroed on the
    device: the counts travel up zeroed with the descriptors).  So a unit of flat leaves
    only makes one launch.

    ``levels`` is a ``uint16`` device array holding every segment's levels.  Returns one
    :class:`Unraveled` per segment, whose arrays are views of two shared device buffers:
    ``int64`` offsets, and the validity of every layer as ``uint32`` bitmask words
    (``LayerResult.words`` is True for all: Arrow's bit order, each layer from bit 0 of a word
    of its own, the bits past its entries 0; layers of segments with repetition levels
    included, their null bits cleared by atomics after the scan); validity is ``None`` for a
    layer without null entries.
    Every host-side descriptor travels in one upload.  The launches number their threads and
    search their segments in unsigned 32 bits: a call of more than ``2 ** 31 - 1`` levels with
    repetition levels, or threads of the scatter (levels, owned words, values read back),
    raises ``ValueError``.

    ``read_also``: optional ``(values, positions)``, a device ``int64`` array and host
    positions in it, read back in the same copy; then ``(results, values[positions])`` is
    returned (-1 for a position outside ``values``).

    ``cudf``: the segments with repetition levels of a run (``LevelSegment.run``: a column's
    leaves of consecutive fragments, the same layers) lay each layer's flags one after the
    other, so that the one scan numbers the run's entries as one column's; the scatter then
    also writes every list layer of the run as one column's int32 offsets from 0 (cuDF's
    list offsets: ``LayerResult.cudf_offsets`` and ``cudf_row``), beside each segment's own,
    and every layer's validity bits at the entries' run places in one slot per layer (a
    segment's validity: from bit ``cudf_row`` of it), which is then the column's mask.
    Not for a run of more than 2^31 - 1 levels (its offsets would not fit).

    ``words_into``: optional ``(words, {run: first bit of each layer})``, ``words`` a zeroed
    ``uint32`` device array: each such run of segments without repetition levels (all of
    the run's segments here, layers alike) writes each layer's bits one after the other from
    that bit of ``words`` (OR-ed: the words it shares with bits written before, by another
    call, keep those), instead of a slot of the result's; every segment of it with entries
    gets its validity (a view of ``words``), nulls or not (a read's column mask over
    several units, written once: ``lance_gpu.gpu.read``).

    ``lists_into``: optional ``(offsets, words, {run: per layer (entry, bit, entries, row,
    shift)})``, ``offsets`` an ``int32`` and ``words`` a zeroed ``uint32`` device array:
    with ``cudf``, each such run of segments with repetition levels (every segment of that
    run here, layers alike) writes each list layer with ``entry >= 0`` as the cuDF offsets of
    a column's layer whose ``row`` entries before it (an earlier call's) are written: from
    entry ``entry + row`` of ``offsets``, each offset plus ``shift`` (the entries of the
    layer inside before it), instead of a slot of its own; and each layer with ``bit >= 0``
    ORs the bits of its valid entries into ``words`` from bit ``bit + row`` (null entries'
    bits stay 0; the words shared with earlier bits keep them).  ``entries``: what the
    caller's slot holds (``entries + 1`` offsets, ``entries`` bits from ``entry`` / ``bit``):
    a run writing past it raises :class:`CorruptInputError` (its entries past it are not
    written).  Every segment of such a layer with entries gets its validity there (a view of
    ``words``), nulls or not (not a list layer of a kind that cannot be null holding nulls:
    a struct's above it), and each of its list layers ``cudf_offsets`` the caller's slot
    (``entries + 1`` offsets from ``entry``) with ``cudf_row`` its first entry's row there
    (a read's list offsets and masks over several units, written once: ``lance_gpu.gpu.read``).

    In a run's layer (either kind of run) with a null anywhere, a segment without nulls also
    gets its validity (all valid, null count 0): its bits of the run's slot, so that every
    segment of the run has them (not for a list layer of a kind that cannot be null: the
    bits of its empty lists are cleared, and are no validity).

    :raises CorruptInputError: a segment's levels are out of range for its layers or its
        first level does not start a row; ``segment`` on the exception is the index of the
        first such segment.
    """
    segments = list(segments)
    nseg = len(segments)
    extra = 0 if read_also is None else int(np.asarray(read_also[1]).size)
    if not nseg:
        if read_also is None:
            return []
        if not extra:
            return [], np.zeros(0, np.int64)
        got = _device.device_empty(extra, np.int64)
        _gather_into_kernel.get()[_device.launch_dims(extra)](
            read_also[0], _device.to_device(np.asarray(read_also[1], np.int64)), got, np.int64(0), got, np.int64(0),
        )
        return [], _device.to_host(got)
    tabs = [_cached_table(tuple(int(k) for k in sg.layer_kinds)) for sg in segments]
    for sg, tab in zip(segments, tabs, strict=True):
        try:
            _check_structure(tab, None if sg.rep_pos < 0 else True)
        except CorruptInputError as exc:
            exc.segment = segments.index(sg)
            raise
    nls = np.array([t.kinds.shape[0] for t in tabs], np.int64)
    ns = np.array([int(sg.num_levels) for sg in segments], np.int64)
    nlayers = int(nls.sum())
    layer_first = np.zeros(nseg + 1, np.int64)
    np.cumsum(nls, out=layer_first[1:])
    has_rep = np.array([sg.rep_pos >= 0 for sg in segments])
    level_start = np.zeros(nseg + 1, np.int64)  # the flags kernel: segments with repetition levels
    np.cumsum(np.where(has_rep, ns, 0), out=level_start[1:])
    flag_first, stride, run_first, runs = _flag_layout(segments, has_rep, ns, nls, cudf)
    lists_out, lists_words, lists_spec = (None, None, None) if lists_into is None else lists_into
    into_lay = _lists_into(segments, runs, ns, nls, layer_first, lists_spec)
    into_words, into_runs = (None, None) if words_into is None else words_into
    bit_base, nwords, shared, owned = _validity_slots(segments, has_rep, ns, nls, layer_first, runs, into_runs, into_lay)
    # the scatter kernel's threads: a level of a segment with repetition levels (an empty
    # list leaf: one, its final offsets), a word of levels of one without whose bits go to
    # the caller's words (words_into); the others' words are owned (below)
    to_caller = ~has_rep & (bit_base[layer_first[:-1]] < 0)
    thread_start = np.zeros(nseg + 1, np.int64)
    np.cumsum(np.where(has_rep, np.maximum(ns, 1), np.where(to_caller, -(-ns // _WORD), 0)), out=thread_start[1:])
    ltr_len = np.array([t.ltr.shape[0] for t in tabs], np.int64)
    ltr_first = np.zeros(nseg + 1, np.int64)
    np.cumsum(ltr_len, out=ltr_first[1:])
    seg = np.empty((nseg, _SEG_FIELDS), np.int64)
    seg[:, 0] = [sg.rep_pos for sg in segments]
    seg[:, 1] = [sg.def_pos for sg in segments]
    seg[:, 2] = ns
    seg[:, 3] = layer_first[:-1]
    seg[:, 4] = nls
    seg[:, 5] = ltr_first[:-1]
    seg[:, 6] = [t.max_rep for t in tabs]
    seg[:, 7] = [t.max_def for t in tabs]
    seg[:, 8] = flag_first[:-1]
    seg[:, 9] = stride
    seg[:, 10] = run_first
    # every layer gets room for one entry per level of its segment (the entry counts are
    # only known after the scan); list layers one more offset
    seg_of_layer = np.repeat(np.arange(nseg), nls)
    is_list = np.concatenate([t.is_list for t in tabs])
    cap = ns[seg_of_layer]
    off_cap = np.where(is_list != 0, cap + 1, 0)
    off_base = np.zeros(nlayers + 1, np.int64)
    np.cumsum(off_cap, out=off_base[1:])
    lay = np.empty((nlayers, _LAY_FIELDS), np.int64)
    lay[:, 0] = np.concatenate([t.c for t in tabs])
    lay[:, 1] = is_list
    lay[:, 2] = np.concatenate([t.below for t in tabs])
    lay[:, 3] = np.concatenate([t.empty_level for t in tabs])
    lay[:, 4] = off_base[:-1]
    cudf_base, cudf_size = _cudf_slots(runs, tabs, ns, layer_first, nlayers, into_lay)
    lay[:, 5] = cudf_base
    lay[:, 6] = bit_base
    lay[:, 7] = 0
    lay[:, 8] = 0
    for g, spec in into_lay.items():
        lay[g, 7] = spec[4]  # the shift of its offsets
        lay[g, 8] = spec[2] - spec[3]  # the room left in the caller's slot
    # the error flags of the enclosing deferred_errors block's launches come back in the same copy
    flags_back = pending_flags()
    nback = 0 if flags_back is None else flags_back[1]
    head = 2 * nlayers + nseg  # entry counts, null counts, error codes
    back = head + extra + nback  # what is read back: then the caller's values and the flags
    # what is read back travels up zeroed at the front of the descriptors (one upload, no
    # zeroing launch), the entry counts of the layers without repetition levels (their
    # levels) already in place; the scatter adds the nulls and error codes there and its
    # last threads gather the caller's values and the flags after them
    result_init = np.zeros(back, np.int64)
    result_init[:nlayers] = np.where(has_rep[seg_of_layer], 0, cap)
    own_words = np.array([n for _w, n, _m in owned], np.int64)
    own_prefix = np.zeros(len(owned) + 1, np.int64)
    np.cumsum(own_words, out=own_prefix[1:])
    own_first = np.zeros(len(owned) + 1, np.int64)
    np.cumsum([len(m) for _w, _n, m in owned], out=own_first[1:])
    own = np.array([(w, n, f, len(m)) for (w, n, m), f in zip(owned, own_first, strict=False)], np.int64).reshape(-1)
    members = np.array([x for _w, _n, m in owned for x in m], np.int64).reshape(-1)
    parts = [result_init, seg.reshape(-1), level_start, thread_start, lay.reshape(-1), np.concatenate([t.ltr for t in tabs]),
             own, own_prefix, members, np.asarray(read_also[1] if extra else np.zeros(0), np.int64)]
    starts = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([p.size for p in parts], out=starts[1:])
    up = _device.to_device(np.concatenate(parts))
    result = up[:back]
    desc = up[back:]
    seg0, ls0, ts0, lay0, ltr0, ws0, _wp, wm0 = (np.int64(x - back) for x in starts[1:9])
    pos = up[starts[9] : starts[10]]
    rep_levels = int(level_start[-1])
    threads = int(thread_start[-1])
    d_levels = _device.to_device(levels) if levels is not None and levels.shape[0] else _device.device_zeros(1, np.uint16)
    # every layer's validity words, not zeroed (each word is written whole by one thread of
    # the scatter, or set all-valid by the flags launch and its null bits cleared by the
    # scatter's atomics; see _validity_slots' owned words), from a 64-byte boundary; then
    # the runs' cuDF list offsets
    words_end = -(-max(nwords, 1) // 2)  # (a 64-byte boundary: whole slots of words)
    block = _device.device_empty(words_end + -(-cudf_size // 2), np.int64)
    words_all = block[:words_end].view(np.uint32)
    cudf_all = block[words_end:].view(np.int32) if cudf_size else block[:1].view(np.int32)  # (else never written)
    src = read_also[0] if extra else block
    flag_src = flags_back[0] if nback else block
    offsets_all = _device.device_empty(max(int(off_base[-1]), 1), np.int64)
    excl = result  # read by the threads of segments with repetition levels only
    if rep_levels:
        nflags = int(flag_first[-1])
        flags = _device.device_empty(nflags, np.int32)
        blocks, tpb = launch_dims32(rep_levels, threads_per_block, "unravel_segments_gpu (flags)")
        _unravel_segments_flags_kernel.get()[blocks, tpb](
            d_levels, desc, seg0, ls0, lay0, ltr0, np.int64(nseg), np.int64(rep_levels), flags, words_all, result, np.int64(2 * nlayers),
        )
        excl = _device.exclusive_scan_device(flags)
    ngather = extra + nback
    launched = threads + int(own_prefix[-1]) + ngather
    if launched:  # (the one launch of a call whose segments have no repetition levels)
        blocks, tpb = launch_dims32(launched, threads_per_block, "unravel_segments_gpu")
        _unravel_segments_scatter_kernel.get()[blocks, tpb](
            d_levels, desc, seg0, ts0, lay0, ltr0, np.int64(nseg), np.int64(threads), excl, offsets_all, words_all, result,
            np.int64(nlayers), cudf_all, into_words if into_words is not None else words_all,
            lists_out if lists_out is not None else cudf_all, lists_words if lists_words is not None else words_all,
            ws0, wm0, np.int64(len(owned)), np.int64(own_prefix[-1]), src, pos, flag_src, np.int64(ngather),
        )
    host = _device.to_host(result)
    counts, nulls, errs = host[:nlayers], host[nlayers : 2 * nlayers], host[2 * nlayers : 2 * nlayers + nseg]
    also = host[2 * nlayers + nseg : 2 * nlayers + nseg + extra]
    if flags_back is not None:  # earlier launches' flags explain a failure first
        try:
            settle_flags(host[2 * nlayers + nseg + extra :])
        except CorruptInputError as exc:
            exc.earlier = True  # not this call's input
            raise
    bad = np.flatnonzero(errs)
    if bad.size:
        s = int(bad[0])
        err = CorruptInputError(
            f"unravel_segments_gpu: segment {s}: corrupt input ({describe_error_code(int(errs[s]))}): levels out of range for "
            f"layers {tabs[s].kinds.tolist()} or the first level does not start a row",
            int(errs[s]),
        )
        err.segment = s
        raise err
    cudf_rows, cudf_views = _cudf_results(runs, cudf_all, cudf_base, counts, layer_first, nls)
    lists_rows = _lists_results(runs, into_lay, lists_out, counts, layer_first, nls, cudf_rows, cudf_views)
    # a run's layer with a null anywhere: every segment's validity is its bits of the run's
    # slot (written for all), so that the run's slot is the column's whole mask
    # (a layer of a kind that cannot be null counts its empty lists as nulls: its bits are no
    # validity, and where it has such, the segment's own validity stays None)
    nullable = np.isin(np.concatenate([t.kinds for t in tabs]), list(_NULLABLE_KINDS))
    in_nulls_run = {g for layers in shared if any(nulls[x] and nullable[x] for x in layers) for g in layers}
    out = []
    for s in range(nseg):
        tab = tabs[s]
        layers = []
        for m in range(int(nls[s])):
            g = int(layer_first[s]) + m
            cnt = int(counts[g])
            kind = int(tab.kinds[m])
            validity = None
            first_bit = int(bit_base[g]) + cudf_rows.get(g, 0)  # (a run's layers: its entries' place in the run)
            if g in lists_rows and into_lay[g][1] >= 0:  # bits of lists_into: at its row in the caller's slot
                first_bit = -1
                if cnt and (kind in _NULLABLE_KINDS or not nulls[g]):
                    assert lists_words is not None
                    first_bit = into_lay[g][1] + lists_rows[g]
                    validity = lists_words[first_bit // _WORD : (first_bit + cnt + _WORD - 1) // _WORD]
            elif first_bit < 0:  # a run of words_into: every segment with entries has its bits there
                assert into_words is not None
                first_bit = -1 - first_bit
                if cnt:
                    validity = into_words[first_bit // _WORD : (first_bit + cnt + _WORD - 1) // _WORD]
            elif (nulls[g] and kind in _NULLABLE_KINDS) or (cnt and g in in_nulls_run and (kind in _NULLABLE_KINDS or not nulls[g])):
                validity = words_all[first_bit // _WORD : (first_bit + cnt + _WORD - 1) // _WORD]
            offsets = None
            if tab.is_list[m]:
                offsets = offsets_all[off_base[g] : off_base[g] + cnt + 1]
            layers.append(LayerResult(kind, validity, offsets, cnt, int(nulls[g]) if validity is not None and kind in _NULLABLE_KINDS else 0,
                                      words=validity is not None, bit_offset=first_bit % _WORD if validity is not None else 0,
                                      cudf_offsets=cudf_views.get(g),
                                      cudf_row=lists_rows[g] if g in lists_rows and into_lay[g][0] >= 0 else cudf_rows.get(g, 0)))
        out.append(Unraveled(layers, layers[0].length if int(ns[s]) else 0, layers[-1].length))
    return out if read_also is None else (out, also)


# --------------------------------------------------------------------------
# Public API: ravel (encoder direction)
# --------------------------------------------------------------------------


def _layer_kind(is_list_layer, validity, offsets):
    has_nulls = validity is not None and not bool(np.all(validity))
    if not is_list_layer:
        return NULLABLE_ITEM if has_nulls else ALL_VALID_ITEM
    lengths = np.diff(offsets)
    empty = lengths == 0
    if validity is not None:
        empty &= validity
    has_empty = bool(empty.any())
    if has_nulls and has_empty:
        return NULL_AND_EMPTY_LIST
    if has_nulls:
        return NULLABLE_LIST
    if has_empty:
        return EMPTYABLE_LIST
    return ALL_VALID_LIST


def _kind_allows(kind, computed):
    """Can a forced layer kind hold what the data needs (``computed``)?"""
    need_null = computed in _NULLABLE_KINDS
    need_empty = computed in (EMPTYABLE_LIST, NULL_AND_EMPTY_LIST)
    if (kind in _LIST_KINDS) != (computed in _LIST_KINDS):
        return False
    if need_null and kind not in _NULLABLE_KINDS:
        return False
    return not (need_empty and kind not in (EMPTYABLE_LIST, NULL_AND_EMPTY_LIST))


def ravel_levels(layers, num_rows, layer_kinds=None):
    """Build rep/def levels from per-layer validity and offsets (encoder direction).

    :param layers: sequence, inner-most first, of ``(validity, offsets)``
        pairs: ``validity`` is a bool array (one per entry of that layer) or
        None; ``offsets`` is an integer ``[entries + 1]`` array into the next
        inner layer's entries for a list layer, None for an item layer
        (struct or leaf).  A struct's child layer has the struct's entries;
        Arrow offsets under null lists may be non-empty (they are ignored).
    :param num_rows: entries of the outer-most layer.
    :param layer_kinds: optional kinds to use instead of the ones derived from
        the data (e.g. ``NULLABLE_ITEM`` for a column declared nullable); they
        must be able to represent the data.
    :returns: :class:`Raveled` with ``rep`` / ``def_`` (uint16, None when not
        needed), the layer kinds and ``value_index``: for every visible value
        slot, the entry of the leaf layer (layer 0) it holds (null slots
        included, in level order).
    """
    nl = len(layers)
    if nl == 0:
        msg = "at least one layer is needed"
        raise ValueError(msg)
    vals = []
    offs = []
    for m, (validity, offsets) in enumerate(layers):
        v = None if validity is None else np.ascontiguousarray(validity, dtype=np.bool_)
        o = None if offsets is None else np.ascontiguousarray(offsets, dtype=np.int64)
        if m == 0 and o is not None:
            msg = "the inner-most layer must be an item layer (offsets=None)"
            raise ValueError(msg)
        vals.append(v)
        offs.append(o)
    kinds = np.array([_layer_kind(offs[m] is not None, vals[m], offs[m]) for m in range(nl)], dtype=np.int64)
    if layer_kinds is not None:
        forced = np.asarray(layer_kinds, dtype=np.int64).reshape(-1)
        if forced.shape[0] != nl:
            msg = f"layer_kinds has {forced.shape[0]} entries for {nl} layers"
            raise ValueError(msg)
        for m in range(nl):
            if not _kind_allows(int(forced[m]), int(kinds[m])):
                msg = f"layer {m}: kind {int(forced[m])} cannot represent this data (needs {int(kinds[m])})"
                raise ValueError(msg)
        kinds = forced
    tab = def_table(kinds)
    num_rows = int(num_rows)
    reps = np.full(num_rows, tab.max_rep, dtype=np.int64)
    defs = np.zeros(num_rows, dtype=np.int64)
    idx = np.arange(num_rows, dtype=np.int64)
    special = np.zeros(num_rows, dtype=np.bool_)
    n_entries = num_rows
    dummy_valid = np.ones(0, dtype=np.bool_)
    for m in range(nl - 1, -1, -1):
        v = vals[m]
        has_v = v is not None
        if v is not None and v.shape[0] != n_entries:
            msg = f"layer {m}: validity has {v.shape[0]} entries, expected {n_entries}"
            raise ValueError(msg)
        if not tab.is_list[m]:
            bad = _ravel_item(defs, idx, special, v if has_v else dummy_valid, has_v, tab.null_level[m], n_entries)
            if bad >= 0:
                msg = f"layer {m}: entry index out of range"
                raise ValueError(msg)
            continue
        o = offs[m]
        assert o is not None  # a list layer has offsets (a forced kind is a list kind exactly when the data's is)
        if o.shape[0] != n_entries + 1:
            msg = f"layer {m}: offsets have {o.shape[0]} entries, expected {n_entries + 1}"
            raise ValueError(msg)
        total = _ravel_list_count(defs, idx, special, v if has_v else dummy_valid, has_v, o, n_entries)
        if total < 0:
            msg = f"layer {m}: entry index out of range"
            raise ValueError(msg)
        new_reps = np.empty(total, dtype=np.int64)
        new_defs = np.empty(total, dtype=np.int64)
        new_idx = np.empty(total, dtype=np.int64)
        new_special = np.empty(total, dtype=np.bool_)
        _ravel_list_fill(
            reps, defs, idx, special, v if has_v else dummy_valid, has_v, o,
            tab.null_level[m], tab.empty_level[m], tab.c[m], new_reps, new_defs, new_idx, new_special,
        )
        reps, defs, idx, special = new_reps, new_defs, new_idx, new_special
        n_entries = int(o[-1]) if o.shape[0] else 0
        if n_entries < 0:
            msg = f"layer {m}: negative offsets"
            raise ValueError(msg)
    value_index = idx[~special]
    rep_out = reps.astype(np.uint16) if tab.max_rep else None
    def_out = defs.astype(np.uint16) if tab.max_def else None
    return Raveled(rep_out, def_out, kinds.astype(np.uint8), value_index, int(reps.shape[0]))


# --------------------------------------------------------------------------
# GPU ravel (encoder direction): the same steps as ravel_levels, as kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _ravel_item_kernel(defs, idx, visible, validity, null_level, n_entries, n, err):
    # grid-stride over levels: a valid level's entry that is null takes the layer's level
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        if not visible[i] or defs[i] != 0:
            continue
        j = idx[i]
        if j < 0 or j >= n_entries:
            err[0] = 1
            continue
        if not validity[j]:
            defs[i] = null_level


@gpu_kernel
def _ravel_list_count_kernel(defs, idx, visible, validity, has_validity, offsets, n_entries, n, counts, err):
    # grid-stride over levels: how many levels each becomes (its list's length, else 1)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        counts[i] = 1
        if not visible[i] or defs[i] != 0:
            continue
        j = idx[i]
        if j < 0 or j >= n_entries:
            err[0] = 1
            continue
        if has_validity and not validity[j]:
            continue
        length = offsets[j + 1] - offsets[j]
        if length > 0:
            counts[i] = length


@gpu_kernel
def _ravel_list_fill_kernel(
    reps, defs, idx, visible, validity, has_validity, offsets, base, null_level, empty_level, rep_level, n, pos,
    new_reps, new_defs, new_idx, new_visible,
):
    # grid-stride over levels: each writes its levels at pos[i] (ravel_levels' fill, one
    # level per thread instead of one pass)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        _ravel_list_level(
            reps[i], defs[i], not visible[i], idx[i], validity, has_validity, offsets, base, null_level,
            empty_level, rep_level, pos[i], new_reps, new_defs, new_idx, new_visible, False,
        )


@gpu_kernel
def _empty_valid_lists_kernel(offsets, validity, has_validity, n, count):
    # grid-stride: lists that are empty and valid (one atomic add per thread)
    local = 0
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        if offsets[i + 1] == offsets[i] and (not has_validity or validity[i]):
            local += 1
    if local:
        cuda.atomic.add(count, 0, local)


def _stride_dims(n):
    """Grid-stride launches: about 8 items a thread on a GPU; a few looping threads under
    the simulator (each thread is a Python thread there)."""
    if _device.is_simulator():
        return max(1, min(4, -(-n // 256))), 32
    return _device.launch_dims(max(1, -(-n // 8)), 256)


def _layer_kind_gpu(validity, offsets, n_entries):
    """:func:`_layer_kind` of a layer held on the device (one count read back a test)."""
    has_nulls = validity is not None
    if offsets is None:
        return NULLABLE_ITEM if has_nulls else ALL_VALID_ITEM
    count = _device.device_zeros(1, np.int64)
    if n_entries:
        blocks, tpb = _stride_dims(n_entries)
        dummy = validity if has_nulls else _device.device_zeros(1, np.bool_)
        _empty_valid_lists_kernel.get()[blocks, tpb](offsets, dummy, has_nulls, np.int64(n_entries), count)
    has_empty = int(count.copy_to_host()[0]) > 0
    if has_nulls and has_empty:
        return NULL_AND_EMPTY_LIST
    if has_nulls:
        return NULLABLE_LIST
    if has_empty:
        return EMPTYABLE_LIST
    return ALL_VALID_LIST


class RaveledGpu(NamedTuple):
    """Result of :func:`ravel_levels_gpu` (device arrays)."""

    rep: object  # device uint16[num_levels] or None (no list layer)
    def_: object  # device uint16[num_levels] or None (nothing null or empty)
    visible: object  # device bool[num_levels]: the level holds a value slot
    layer_kinds: np.ndarray  # host uint8[num_layers], inner-most first
    value_index: object  # device int64[num_values]: leaf-layer entry of each visible slot
    num_levels: int


def ravel_levels_gpu(layers, num_rows):
    """:func:`ravel_levels` on the device: the same levels, kinds and value index.

    :param layers: inner-most first, ``(validity, offsets, entries)``: ``validity`` a device
        bool array (one per entry of the layer) or None when no entry is null; ``offsets``
        device int64 ``[entries + 1]`` into the next inner layer's entries (they may start
        anywhere: entry ``offsets[k] - offsets[0]`` is the first of list ``k``), None for
        an item layer; ``entries`` the layer's entry count (host int).
    :param num_rows: entries of the outer-most layer.

    Per layer, outer first: an item layer marks its null entries' levels (one kernel); a
    list layer counts the levels each level becomes, scans the counts (the total read back
    to size the next arrays) and writes them (one thread per level).  A layer kind takes
    one count read back (empty valid lists).  Entry indices out of range raise
    ``ValueError`` as :func:`ravel_levels` does.
    """
    nl = len(layers)
    if nl == 0:
        msg = "at least one layer is needed"
        raise ValueError(msg)
    if layers[0][1] is not None:
        msg = "the inner-most layer must be an item layer (offsets=None)"
        raise ValueError(msg)
    kinds = np.array([_layer_kind_gpu(v, o, int(e)) for v, o, e in layers], dtype=np.int64)
    tab = def_table(kinds)
    n = int(num_rows)
    reps = _device.device_full(n, np.uint16, tab.max_rep)
    defs = _device.device_zeros(n, np.uint16)
    idx = _device.to_device(np.arange(n, dtype=np.int64))
    visible = _device.device_full(n, np.bool_, True)
    n_entries = n
    err = _device.device_zeros(1, np.int32)
    dummy_valid = _device.device_zeros(1, np.bool_)
    for m in range(nl - 1, -1, -1):
        v, o, entries = layers[m]
        has_v = v is not None
        if int(entries) != n_entries:
            msg = f"layer {m}: {int(entries)} entries, expected {n_entries}"
            raise ValueError(msg)
        if not tab.is_list[m]:
            if has_v and n:
                blocks, tpb = _stride_dims(n)
                _ravel_item_kernel.get()[blocks, tpb](defs, idx, visible, v, np.uint16(tab.null_level[m]), np.int64(n_entries), np.int64(n), err)
            continue
        counts = _device.device_empty(n, np.int64)
        vv = v if has_v else dummy_valid
        if n:
            blocks, tpb = _stride_dims(n)
            _ravel_list_count_kernel.get()[blocks, tpb](defs, idx, visible, vv, has_v, o, np.int64(n_entries), np.int64(n), counts, err)
        if int(err.copy_to_host()[0]):
            msg = f"layer {m}: entry index out of range"
            raise ValueError(msg)
        pos, total = _device.exclusive_scan(counts)
        new_reps = _device.device_empty(total, np.uint16)
        new_defs = _device.device_empty(total, np.uint16)
        new_idx = _device.device_empty(total, np.int64)
        new_visible = _device.device_empty(total, np.bool_)
        # offsets[0] and offsets[entries]: two one-value copies (a strided view of the two
        # would copy everything between them)
        base = int(o[0:1].copy_to_host()[0])
        last = int(o[n_entries : n_entries + 1].copy_to_host()[0])
        if n:
            _ravel_list_fill_kernel.get()[blocks, tpb](
                reps, defs, idx, visible, vv, has_v, o, np.int64(base), np.uint16(tab.null_level[m]), np.uint16(tab.empty_level[m]),
                np.uint16(tab.c[m]), np.int64(n), pos, new_reps, new_defs, new_idx, new_visible,
            )
        reps, defs, idx, visible = new_reps, new_defs, new_idx, new_visible
        n = total
        n_entries = last - base
    if int(err.copy_to_host()[0]):
        msg = "entry index out of range"
        raise ValueError(msg)
    value_index = compact_fixed_gpu(idx, visible) if n else idx
    return RaveledGpu(
        reps if tab.max_rep else None, defs if tab.max_def else None, visible, kinds.astype(np.uint8), value_index, n
    )


# --------------------------------------------------------------------------
# Public API: bitmaps
# --------------------------------------------------------------------------


def validity_to_bitmap(validity):
    """Bool array -> Arrow validity bitmap (``uint8[ceil(n / 8)]``, LSB first, zero padded)."""
    valid = np.ascontiguousarray(validity, dtype=np.bool_).reshape(-1)
    out = np.empty((valid.shape[0] + 7) // 8, dtype=np.uint8)
    _to_bitmap_cpu(valid, out)
    return out


def bitmap_to_validity(bitmap, length, offset=0):
    """Arrow validity bitmap -> bool array of ``length`` items starting at bit ``offset``."""
    bm = np.ascontiguousarray(bitmap).view(np.uint8).reshape(-1)
    length = int(length)
    offset = int(offset)
    if offset < 0 or length < 0 or offset + length > bm.shape[0] * 8:
        msg = f"bitmap of {bm.shape[0]} bytes is too short for {length} bits at offset {offset}"
        raise CorruptInputError(msg)
    out = np.empty(length, dtype=np.bool_)
    _from_bitmap_cpu(bm, offset, out)
    return out


def validity_to_bitmap_gpu(validity, *, threads_per_block=256):
    """GPU twin of :func:`validity_to_bitmap` (one thread per output byte)."""
    use_cp = _device.wants_cupy(validity)
    d_valid = _device.to_device(validity)
    n = d_valid.shape[0]
    nbytes = (n + 7) // 8
    out = _device.device_empty(nbytes, np.uint8)
    if nbytes:
        blocks, tpb = _device.launch_dims(nbytes, threads_per_block)
        _to_bitmap_kernel.get()[blocks, tpb](d_valid, np.int64(n), out)
    return _device.as_output(out, use_cp)


def bitmap_to_validity_gpu(bitmap, length, offset=0, *, threads_per_block=256):
    """GPU twin of :func:`bitmap_to_validity` (one thread per output item)."""
    use_cp = _device.wants_cupy(bitmap)
    d_bm = _device.to_device(bitmap, np.uint8)
    length = int(length)
    offset = int(offset)
    if offset < 0 or length < 0 or offset + length > d_bm.shape[0] * 8:
        msg = f"bitmap of {d_bm.shape[0]} bytes is too short for {length} bits at offset {offset}"
        raise CorruptInputError(msg)
    out = _device.device_empty(length, np.bool_)
    if length:
        blocks, tpb = _device.launch_dims(length, threads_per_block)
        _from_bitmap_kernel.get()[blocks, tpb](d_bm, np.int64(offset), out)
    return _device.as_output(out, use_cp)



# --------------------------------------------------------------------------
# Items continuing a list their previous level left null or empty


@gpu_kernel
def _restart_check_kernel(levels, seg_rep, seg_def, prefix, nseg, total, restart, restart_len, err, first_bad):
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s = np.int64(_segment_of32(prefix, nseg, k))
    rel = np.int64(np.uint32(k - np.uint32(prefix[s])))
    n = np.int64(prefix[s + 1]) - np.int64(prefix[s])
    d = np.int64(levels[np.int64(seg_def[s]) + rel])
    if d >= np.int64(restart_len[s]):
        return  # an out-of-range level: the unravel says so
    need = np.int64(restart[s, d])
    if not need:
        return
    rep = np.int64(seg_rep[s])
    bad: bool | np.bool_ = np.int64(levels[rep + rel]) < need  # a local annotation: the compiled bytecode is unchanged
    if rel + 1 < n and np.int64(levels[rep + rel + 1]) < need:
        bad = True
    if bad:
        cuda.atomic.or_(err, 0, ERR_BAD_LEVEL)
        cuda.atomic.min(first_bad, 0, s)


def check_restarts_segments_gpu(levels, rep_pos, def_pos, counts, restart, *, on_bad=None, threads_per_block=256):
    """Check, over many leaves in one launch, that no item continues a list its level left
    null or empty: for segment ``s`` (``counts[s]`` levels, repetition levels at
    ``levels[rep_pos[s]:]``, definition levels at ``levels[def_pos[s]:]``, in the shared
    ``uint16`` buffer ``levels``), a position with definition level ``d`` needs repetition
    level at least ``restart[s][d]`` there and at the next position (``restart``: one host
    table per segment, the Lance-side meaning of the levels; definition levels past a table
    are left to the unravel).  A violation flags ``ERR_BAD_LEVEL``; ``on_bad(segment)``
    (optional) makes the exception, given the first bad segment (read back only then)."""
    counts = np.asarray(counts, np.int64)
    nseg = counts.size
    total = int(counts.sum())
    if not nseg or not total:
        return
    width = max(1, max(len(t) for t in restart))
    table = np.zeros((nseg, width), np.int64)
    lens = np.zeros(nseg, np.int64)
    for s, t in enumerate(restart):
        table[s, : len(t)] = t
        lens[s] = len(t)
    prefix = np.zeros(nseg + 1, np.int64)
    np.cumsum(counts, out=prefix[1:])
    err = new_error_flag()
    first_bad = _device.to_device(np.full(1, nseg, np.int64))
    blocks, tpb = launch_dims32(total, threads_per_block, "check_restarts_segments_gpu")
    _restart_check_kernel.get()[blocks, tpb](
        levels, _device.to_device(np.asarray(rep_pos, np.int64)), _device.to_device(np.asarray(def_pos, np.int64)),
        _device.to_device(prefix), np.int64(nseg), np.int64(total), _device.to_device(table), _device.to_device(lens), err, first_bad,
    )
    explain = None
    if on_bad is not None:
        def explain():
            return on_bad(int(_device.to_host(first_bad)[0]))
    raise_if_flagged(err, "check_restarts_segments_gpu", explain)
