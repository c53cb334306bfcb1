# SPDX-License-Identifier: Apache-2.0
"""CUDA kernels that know Lance byte layouts (the format-agnostic ones are in ``cuda_kernels``).

Written in the ``cuda_kernels._target`` style (plain-Python cores bound at compile time, so
they run on a GPU and under the numba CUDA simulator alike); nothing here imports CUDA until a
kernel is first compiled.  Every kernel covers many pages in one launch: a page (or chunk)
is a *segment* found by binary search over a prefix array, and bad input ORs a bit into the
device error flag (``cuda_kernels.errors``) instead of reading out of bounds.

* :func:`variable_spans` -- mini-block ``Variable`` chunk buffers (``offsets[count + 1]``
  relative to the chunk buffer, then bytes) to one ``(start, length)`` span per value.
* :func:`dictionary_spans` -- dictionary indices to the spans of the items they name
  (fixed-width items become copy ranges, variable-width items value spans).
* :func:`fullzip_walk` -- full-zip pages (``[control word][length][bytes]`` per item), one
  thread per row: a count pass, a scan, then a fill pass writing levels and values.
* :func:`rle_chunks` -- the runs of many RLE chunks expanded in one launch, each chunk's
  runs checked to add up to its value count on the device (nothing read back).
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, dual, gpu_kernel
from cuda_kernels.errors import ERR_BAD_LEVEL, ERR_OUT_OF_BOUNDS, new_error_flag, raise_if_flagged
from cuda_kernels.segments import _segment_of
from lance_gpu.gpu import _array

cuda = LAZY_CUDA

__all__ = ["dictionary_spans", "fullzip_walk", "rle_chunks", "variable_spans"]


@dual
def _read_le(data, p, w):
    """Unsigned little-endian integer of ``w`` bytes at ``data[p]`` (caller checks bounds)."""
    v = np.int64(0)
    for q in range(w):
        v |= np.int64(data[p + q]) << (8 * q)
    return v


# --------------------------------------------------------------------------------------------
# Mini-block Variable chunks -> value spans


@gpu_kernel
def _variable_spans_kernel(data, c_start, c_size, c_width, c_first, nchunks, c_dst, out_start, out_len, err):
    i = cuda.grid(1)
    if i >= np.int64(c_first[nchunks]):
        return
    c = _segment_of(c_first, nchunks, i)
    j = i - np.int64(c_first[c])
    count = np.int64(c_first[c + 1]) - np.int64(c_first[c])
    base = np.int64(c_start[c])
    size = np.int64(c_size[c])
    w = np.int64(c_width[c])
    d = np.int64(c_dst[c]) + j
    if base < 0 or base + size > data.shape[0] or (count + 1) * w > size or d < 0 or d >= out_start.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    o0 = _read_le(data, base + j * w, w)
    o1 = _read_le(data, base + (j + 1) * w, w)
    # offsets[0] is where the bytes start: right after the chunk's count + 1 offsets
    if o0 < 0 or o1 < o0 or o1 > size or (j == 0 and o0 != (count + 1) * w):
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        out_start[d] = base
        out_len[d] = 0
        return
    out_start[d] = base + o0
    out_len[d] = o1 - o0


def variable_spans(arena, chunks: dict, out_start, out_len, what: str = "variable_spans") -> None:
    """Fill ``out_start`` / ``out_len`` (int64 device arrays) from Variable chunk buffers.

    ``chunks`` holds host int64 arrays: ``start`` / ``size`` (bytes in ``arena``), ``width``
    (offset bytes, 4 or 8), ``count`` (values) and ``dst`` (index of the chunk's first value).
    """
    count = chunks["count"]
    n = int(count.sum())
    if not n:
        return
    first = np.zeros(count.size + 1, np.int64)
    np.cumsum(count, out=first[1:])
    dev = _device.to_device
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(n)
    _variable_spans_kernel.get()[blocks, tpb](
        arena, dev(chunks["start"]), dev(chunks["size"]), dev(chunks["width"]), dev(first),
        np.int64(count.size), dev(chunks["dst"]), out_start, out_len, err,
    )
    raise_if_flagged(err, what)


# --------------------------------------------------------------------------------------------
# Dictionary indices -> item spans


@gpu_kernel
def _dictionary_spans_kernel(
    indices, prefix, nseg, s_start, s_items, s_nitems, s_width, s_offsets, s_dst, arena,
    fixed_src, fixed_dst, out_start, out_len, err,
):
    i = cuda.grid(1)
    if i >= np.int64(prefix[nseg]):
        return
    s = _segment_of(prefix, nseg, i)
    k = i - np.int64(prefix[s])
    q = np.int64(s_start[s]) + k
    nitems = np.int64(s_nitems[s])
    v = np.int64(-1)
    if q >= 0 and q < indices.shape[0]:
        v = np.int64(indices[q])
    if v < 0 or v >= nitems:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    w = np.int64(s_width[s])
    if w > 0:
        # fixed-width items: a copy range of w bytes to byte s_dst + k * w
        fixed_src[i] = np.int64(s_items[s]) + v * w
        fixed_dst[i] = np.int64(s_dst[s]) + k * w
    else:
        # variable-width items: int64 offsets (relative to the items' bytes) staged in the arena
        d = np.int64(s_dst[s]) + k
        op = np.int64(s_offsets[s]) + 8 * v
        if op < 0 or op + 16 > arena.shape[0] or d < 0 or d >= out_start.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        o0 = _read_le(arena, op, 8)
        o1 = _read_le(arena, op + 8, 8)
        out_start[d] = np.int64(s_items[s]) + o0
        out_len[d] = o1 - o0


def dictionary_spans(indices, segs: dict, arena, fixed_src, fixed_dst, out_start, out_len) -> None:
    """Turn the dictionary indices of many pages into spans of their items (one launch).

    ``indices``: a device array holding every page's indices.  Per page (host int64 arrays
    of ``segs``): ``start`` / ``count`` (its indices in ``indices``), ``items`` (arena
    position of the items' bytes), ``nitems``, ``width`` (bytes per fixed-width item, 0 for
    variable width), ``offsets`` (arena position of the variable-width items' int64
    offsets) and ``dst`` (fixed width: byte position of the first value in the output;
    variable width: the first value slot).  Fixed-width values become copy ranges
    ``fixed_src[i] -> fixed_dst[i]`` of ``width`` bytes (``i`` counts the indices of all
    pages in order); variable-width values become spans ``out_start / out_len[slot]``.
    """
    count = segs["count"]
    prefix = np.zeros(count.size + 1, np.int64)
    np.cumsum(count, out=prefix[1:])
    n = int(prefix[-1])
    if not n:
        return
    dev = _device.to_device
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(n)
    _dictionary_spans_kernel.get()[blocks, tpb](
        indices, dev(prefix), np.int64(count.size), dev(segs["start"]), dev(segs["items"]), dev(segs["nitems"]),
        dev(segs["width"]), dev(segs["offsets"]), dev(segs["dst"]), arena, fixed_src, fixed_dst, out_start, out_len, err,
    )
    raise_if_flagged(err, "dictionary index out of range (dictionary_spans)")


# --------------------------------------------------------------------------------------------
# Full-zip pages


@dual
def _row_bounds(arena, p, r, p_data, p_size, p_index, p_iwidth, p_stride):
    """(start, end) of row ``r`` of page ``p`` as arena positions, or (-1, -1) if impossible."""
    base = np.int64(p_data[p])
    size = np.int64(p_size[p])
    ipos = np.int64(p_index[p])
    if ipos >= 0:
        w = np.int64(p_iwidth[p])
        q = ipos + r * w
        if q < 0 or q + 2 * w > arena.shape[0]:
            return np.int64(-1), np.int64(-1)
        s = _read_le(arena, q, w)
        e = _read_le(arena, q + w, w)
    else:
        st = np.int64(p_stride[p])
        s = r * st
        e = s + st
    if s < 0 or e < s or e > size:
        return np.int64(-1), np.int64(-1)
    return base + s, base + e


@gpu_kernel
def _fullzip_count_kernel(
    arena, p_rows, npages, p_data, p_size, p_index, p_iwidth, p_stride, p_ctrl, p_bits_def,
    p_offb, p_valb, p_inv, p_ninv, invisible, row_items, row_vis, err,
):
    g = cuda.grid(1)
    if g >= np.int64(p_rows[npages]):
        return
    p = _segment_of(p_rows, npages, g)
    r = g - np.int64(p_rows[p])
    pos, end = _row_bounds(arena, p, r, p_data, p_size, p_index, p_iwidth, p_stride)
    items = np.int64(0)
    vis = np.int64(0)
    if pos < 0:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    else:
        ctrl = np.int64(p_ctrl[p])
        offb = np.int64(p_offb[p])
        valb = np.int64(p_valb[p])
        dmask = (np.int64(1) << np.int64(p_bits_def[p])) - 1
        inv0 = np.int64(p_inv[p])
        ninv = np.int64(p_ninv[p])
        while pos < end:
            c = np.int64(0)
            if ctrl:
                if pos + ctrl > end:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    break
                c = _read_le(arena, pos, ctrl)
                pos += ctrl
            d = c & dmask
            if d >= ninv:
                cuda.atomic.or_(err, 0, ERR_BAD_LEVEL)
                break
            items += 1
            if invisible[inv0 + d]:
                continue
            vis += 1
            if offb:
                if d != 0:
                    continue
                if pos + offb > end:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    break
                n = _read_le(arena, pos, offb)
                # a negative length (64-bit offsets) would walk backwards or forever
                if n < 0 or pos + offb + n > end:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    break
                pos += offb + n
            else:
                pos += valb
            if pos > end:
                cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                break
    row_items[g] = items
    row_vis[g] = vis


@gpu_kernel
def _fullzip_check_kernel(item_off, vis_off, p_rows, npages, items, visible, err):
    """Page ``p`` must hold ``items[p]`` items of which ``visible[p]`` are visible."""
    p = cuda.grid(1)
    if p >= npages:
        return
    lo = np.int64(p_rows[p])
    hi = np.int64(p_rows[p + 1])
    if np.int64(item_off[hi]) - np.int64(item_off[lo]) != np.int64(items[p]) or np.int64(vis_off[hi]) - np.int64(vis_off[lo]) != np.int64(visible[p]):
        cuda.atomic.or_(err, 0, ERR_BAD_LEVEL)


@gpu_kernel
def _fullzip_fill_kernel(
    arena, p_rows, npages, p_data, p_size, p_index, p_iwidth, p_stride, p_ctrl, p_bits_def,
    p_offb, p_valb, p_inv, p_ninv, invisible, item_off, vis_off,
    p_rep_dst, p_def_dst, p_val_dst, levels, fixed, out_start, out_len, err,
):
    g = cuda.grid(1)
    if g >= np.int64(p_rows[npages]):
        return
    p = _segment_of(p_rows, npages, g)
    r = g - np.int64(p_rows[p])
    pos, end = _row_bounds(arena, p, r, p_data, p_size, p_index, p_iwidth, p_stride)
    if pos < 0:
        return
    ctrl = np.int64(p_ctrl[p])
    bits_def = np.int64(p_bits_def[p])
    offb = np.int64(p_offb[p])
    valb = np.int64(p_valb[p])
    dmask = (np.int64(1) << bits_def) - 1
    inv0 = np.int64(p_inv[p])
    first_row = np.int64(p_rows[p])
    it = np.int64(item_off[g]) - np.int64(item_off[first_row])
    vi = np.int64(vis_off[g]) - np.int64(vis_off[first_row])
    rep_dst = np.int64(p_rep_dst[p])
    def_dst = np.int64(p_def_dst[p])
    val_dst = np.int64(p_val_dst[p])
    nlev = levels.shape[0]
    while pos < end:
        c = np.int64(0)
        if ctrl:
            c = _read_le(arena, pos, ctrl)
            pos += ctrl
        d = c & dmask
        if rep_dst >= 0 and rep_dst + it < nlev:
            levels[rep_dst + it] = c >> bits_def
        if def_dst >= 0 and def_dst + it < nlev:
            levels[def_dst + it] = d
        it += 1
        if invisible[inv0 + d]:
            continue
        if offb:
            n = np.int64(0)
            start = pos
            if d == 0:
                n = _read_le(arena, pos, offb)
                start = pos + offb
                if n < 0 or start + n > end:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    break
                pos = start + n
            slot = val_dst + vi
            if slot < out_start.shape[0]:
                out_start[slot] = start
                out_len[slot] = n
            else:
                cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        else:
            o = val_dst + vi * valb
            if o < 0 or o + valb > fixed.shape[0]:
                cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            else:
                for q in range(valb):
                    fixed[o + q] = arena[pos + q]
            pos += valb
        vi += 1


def fullzip_walk(arena, pages: dict, invisible: np.ndarray, levels, fixed, out_start, out_len) -> None:
    """Walk every row of many full-zip pages: levels to ``levels`` (u16), fixed-width values to
    ``fixed`` (bytes), variable-width value spans to ``out_start`` / ``out_len`` (slots).

    ``pages`` holds host int64 arrays, one entry per page: ``rows``, ``data`` / ``size``
    (buffer 0 in the arena), ``index`` / ``iwidth`` (repetition index position and entry
    width, ``index = -1`` for fixed-stride rows of ``stride`` bytes), ``ctrl`` (control word
    bytes), ``bits_def``, ``offb`` (length bytes, 0 for fixed width), ``valb`` (fixed value
    bytes), ``inv`` / ``ninv`` (the page's slice of ``invisible``), ``rep_dst`` / ``def_dst``
    (first level of the page in ``levels``, -1 for none) and ``val_dst`` (byte position in
    ``fixed``, or first slot), ``items`` / ``visible`` (what the page header promises;
    checked on the device, every write bounded by its array).
    """
    rows = pages["rows"]
    npages = rows.size
    p_rows = np.zeros(npages + 1, np.int64)
    np.cumsum(rows, out=p_rows[1:])
    total = int(p_rows[-1])
    if not total:
        return
    dev = _device.to_device
    geo = [dev(pages[k]) for k in ("data", "size", "index", "iwidth", "stride", "ctrl", "bits_def", "offb", "valb", "inv", "ninv")]
    d_rows = dev(p_rows)
    d_inv = dev(np.ascontiguousarray(invisible, np.bool_))
    row_items = _device.device_empty(total, np.int64)
    row_vis = _device.device_empty(total, np.int64)
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(total)
    _fullzip_count_kernel.get()[blocks, tpb](arena, d_rows, np.int64(npages), *geo, d_inv, row_items, row_vis, err)
    raise_if_flagged(err, "full-zip walk")
    item_off = _device.exclusive_scan_device(row_items)
    vis_off = _device.exclusive_scan_device(row_vis)
    # every page must hold the items its header promises (checked on the device; the fill
    # below bounds every write, and the flag is read with the others)
    check = new_error_flag()
    cblocks, ctpb = _device.launch_dims(npages)
    _fullzip_check_kernel.get()[cblocks, ctpb](item_off, vis_off, d_rows, np.int64(npages), dev(pages["items"]), dev(pages["visible"]), check)
    raise_if_flagged(check, "full-zip pages hold other item counts than their headers say")
    _fullzip_fill_kernel.get()[blocks, tpb](
        arena, d_rows, np.int64(npages), *geo, d_inv, item_off, vis_off,
        dev(pages["rep_dst"]), dev(pages["def_dst"]), dev(pages["val_dst"]), levels, fixed, out_start, out_len, err,
    )
    raise_if_flagged(err, "full-zip walk")


# --------------------------------------------------------------------------------------------
# RLE chunks


@gpu_kernel
def _rle_chunks_kernel(values, runs, run_starts, first_run, first, nchunks, nruns, out, err):
    """Thread ``i < nruns`` writes run ``i`` (``runs[i]`` copies of ``values[i]``) at
    ``out[run_starts[i]:]``; thread ``i <= nchunks`` checks that chunk ``i``'s runs start
    where its values do (``run_starts[first_run[i]] == first[i]``; ``i == nchunks``: all the
    runs end where the last chunk's values do)."""
    i = cuda.grid(1)
    if i <= nchunks:
        if np.int64(run_starts[np.int64(first_run[i])]) != np.int64(first[i]):
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    if i < nruns:
        lo = np.int64(run_starts[i])
        hi = lo + np.int64(runs[i])
        if hi > out.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        v = values[i]
        for p in range(lo, hi):
            out[p] = v


def rle_chunks(values, runs, first_run: np.ndarray, first: np.ndarray, out) -> None:
    """Expand the runs of many RLE chunks into ``out`` (``first[-1]`` items), in one scan
    and one launch, nothing read back.

    ``values`` / ``runs`` (uint8 lengths): every chunk's runs, concatenated on the device;
    ``first_run`` / ``first``: host int64 prefixes of the chunks' run and value counts.  A
    chunk whose runs do not add up to its value count flags ``ERR_OUT_OF_BOUNDS`` (and no
    run is written past ``out``).
    """
    nruns = int(first_run[-1])
    nchunks = int(first_run.size - 1)
    run_starts = _device.exclusive_scan_device(runs[:nruns])
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(max(nruns, nchunks + 1))
    _rle_chunks_kernel.get()[blocks, tpb](
        values, runs, run_starts, _device.to_device(first_run), _device.to_device(first), np.int64(nchunks), np.int64(nruns), out, err,
    )
    raise_if_flagged(err, "RLE runs do not add up to their chunks' value counts")


# --------------------------------------------------------------------------------------------
# Validity


@gpu_kernel
def _and_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] and b[i]


def and_validity(a, b):
    """Element-wise AND of two device bool arrays (either may be None: all valid)."""
    if a is None:
        return b
    if b is None:
        return a
    n = int(a.shape[0])
    out = _array.empty(n, np.bool_)
    if n:
        blocks, tpb = _device.launch_dims(n)
        _and_kernel.get()[blocks, tpb](a, b, out)
    return out
