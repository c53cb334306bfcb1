# SPDX-License-Identifier: Apache-2.0
"""Device decode of full-zip pages (:mod:`.fullzip` holds the layout and its CPU decode).

* :func:`fullzip_walk` -- the pages' rows (``[control word][length][bytes]`` per item, a row
  found through the repetition index or a fixed stride), one thread per row: a count pass,
  a scan, a check of each page's item counts against its header, then a fill pass writing
  levels and values.  A page is a *segment* found by binary search over the prefix of the
  pages' row counts.  A fixed-width value of a fixed-size list with item validity (a page's
  ``idim`` > 0) is split as it is written: its first ``ceil(idim / 8)`` bytes, the items'
  validity bits (LSB first), to ``idim`` bytes of 0 / 1, then, nested lists with a second
  layer of item validity (``idim2`` > 0), the next ``ceil(idim2 / 8)`` bytes to ``idim2``
  bytes of 0 / 1 (at ``item_dst2``), the rest, its items, to the values.

Written in the ``cuda_kernels._target`` style (plain-Python cores bound at compile time,
so they run on a GPU and under the numba CUDA simulator alike); nothing here imports CUDA
until a kernel is first compiled.  One launch per pass covers every page; bad input ORs a bit
into the device error flag (``cuda_kernels.errors``) instead of reading out of bounds.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, dual, gpu_kernel
from cuda_kernels.errors import ERR_BAD_LEVEL, ERR_OUT_OF_BOUNDS, new_error_flag, raise_if_flagged
from cuda_kernels.segments import _read_le, _segment_of

cuda = LAZY_CUDA

__all__ = ["fullzip_walk"]


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
    p_rep_dst, p_def_dst, p_val_dst, p_idim, p_item_dst, p_idim2, p_item_dst2, levels, fixed, out_start, out_len, err,
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
    idim = np.int64(p_idim[p])
    item_dst = np.int64(p_item_dst[p])
    idim2 = np.int64(p_idim2[p])
    item_dst2 = np.int64(p_item_dst2[p])
    vb1 = (idim + 7) // 8
    vb = vb1 + (idim2 + 7) // 8  # a value's item validity bytes (each layer's), before its items
    outb = valb - vb
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
            o = val_dst + vi * outb
            if idim:
                b = item_dst + vi * idim
                if b < 0 or b + idim > fixed.shape[0] or outb < 0:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    o = np.int64(-1)
                else:
                    for q in range(idim):
                        fixed[b + q] = (arena[pos + q // 8] >> (q % 8)) & 1
            if idim2:
                b = item_dst2 + vi * idim2
                if b < 0 or b + idim2 > fixed.shape[0] or outb < 0:
                    cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
                    o = np.int64(-1)
                else:
                    for q in range(idim2):
                        fixed[b + q] = (arena[pos + vb1 + q // 8] >> (q % 8)) & 1
            if o < 0 or o + outb > fixed.shape[0]:
                cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            else:
                for q in range(outb):
                    fixed[o + q] = arena[pos + vb + q]
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
    checked on the device, every write bounded by its array); optionally ``idim`` /
    ``item_dst`` (fixed-size lists with item validity: items per value, and the byte of
    ``fixed`` where the page's first item's validity byte goes; absent: none) and ``idim2``
    / ``item_dst2`` (nested lists' second layer of item validity, after the first's bytes in
    each value; absent: none).
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
        dev(pages["rep_dst"]), dev(pages["def_dst"]), dev(pages["val_dst"]), dev(pages.get("idim", np.zeros(npages, np.int64))),
        dev(pages.get("item_dst", np.full(npages, -1, np.int64))), dev(pages.get("idim2", np.zeros(npages, np.int64))),
        dev(pages.get("item_dst2", np.full(npages, -1, np.int64))), levels, fixed, out_start, out_len, err,
    )
    raise_if_flagged(err, "full-zip walk")
