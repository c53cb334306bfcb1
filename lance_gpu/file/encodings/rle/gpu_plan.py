# SPDX-License-Identifier: Apache-2.0
"""Device planning of run-length encoded chunks (host side): where each chunk's run values
and run lengths lie and how many runs it has; the device expands them.

* Rle{Flat{V}, Flat{8}} mini-block values (and dictionary indices): two chunk buffers, the
  run values (``V / 8`` bytes each) and the u8 run lengths, one per run.
* Rle{Flat16, Flat8} levels, block form (one buffer per chunk): ``u64 values_bytes | u16
  values | u8 run lengths`` (``values_bytes / 2`` runs).

Emission (the registered ``rle`` family, dictionary indices and levels): one ``rle`` row per
chunk (``DeviceUnit.add_rle``, by value bits and destination): :func:`emit_chunks` (values,
indices), :func:`emit_values`, :func:`emit_levels`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, DeviceUnsupported

WORD_BITS = (8, 16, 32, 64)


def value_bits(enc) -> int | None:
    """The value bits of an Rle{Flat{8/16/32/64}, Flat{8}} encoding the device expands (None: another layout)."""
    rle = enc.rle
    v, r = rle.values, rle.run_lengths
    if v.WhichOneof("compression") != "flat" or r.WhichOneof("compression") != "flat":
        return None
    if v.flat.HasField("data") or r.flat.HasField("data") or int(r.flat.bits_per_value) != 8:
        return None
    bits = int(v.flat.bits_per_value)
    return bits if bits in WORD_BITS else None


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("rle", value bits)`` of a mini-block page's Rle{Flat, Flat8} values (two chunk
    buffers: run values, run lengths) expanded for a fixed-width ``leaf`` of as many bytes;
    raises :class:`DeviceUnsupported` otherwise."""
    bits = value_bits(enc)
    if nbuf != 2 or leaf.kind != "fixed" or bits != 8 * leaf.width:
        raise DeviceUnsupported("this Rle layout")
    return "rle", bits


def level_form(enc: Any) -> str | None:
    """``"rle"`` for block-form Rle{Flat16, Flat8} levels, else None."""
    return "rle" if value_bits(enc) == 16 else None


def chunk_runs(bufs: np.ndarray, value_bytes: int, ctx: DecodeContext) -> np.ndarray:
    """The run count of each chunk (``bufs``: chunks x 2 x (start, size): run values, run
    lengths); raises ``ctx.corrupt`` where the values are fewer than the runs."""
    nruns = bufs[:, 1, 1]
    if np.any(bufs[:, 0, 1] < nruns * value_bytes):
        raise ctx.corrupt("RLE values buffer shorter than its run count")
    return nruns


def level_runs(starts: np.ndarray, nruns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the run values and run lengths of block-form Rle{Flat16, Flat8} level buffers
    at bytes ``starts`` with ``nruns`` runs lie: ``(starts + 8, starts + 8 + 2 * nruns)``
    (after the u64 values_bytes word; the counts are checked on the device)."""
    vals = starts + 8
    return vals, vals + 2 * nruns


def emit_chunks(unit: DeviceUnit, dest: str, enc: Any, ch: Any, dst_byte: np.ndarray, ctx: DecodeContext) -> None:
    """Rle{Flat, Flat8} chunks of ``ch``: chunk ``i`` expands to byte ``dst_byte[i]`` of ``dest``."""
    vbits = value_bits(enc)
    if vbits is None:
        raise DeviceUnsupported("this Rle layout")
    nruns = chunk_runs(ch.bufs, vbits // 8, ctx)
    unit.add_rle(vbits, dest, vals=ch.bufs[:, 0, 0], runs=ch.bufs[:, 1, 0], nruns=nruns, count=ch.counts, dst=dst_byte)


def emit_values(unit: DeviceUnit, enc: Any, arg: int, ch: Any, dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of Rle{Flat, Flat8} value chunks (``arg``: the value bits, :func:`value_form`):
    chunk ``i`` of ``ch`` expanded to byte ``dst[i]`` of the fixed arena (:func:`emit_chunks`)."""
    emit_chunks(unit, "fixed", enc, ch, dst, ctx)


def emit_levels(unit: DeviceUnit, form: str, enc: Any, starts: np.ndarray, sizes: np.ndarray, nlevels: np.ndarray,
                dst: np.ndarray, ctx: DecodeContext, blocks: Any = None, runs: np.ndarray | None = None) -> None:
    """Block-form Rle{Flat16, Flat8} level buffers at arena bytes ``starts``, ``runs`` runs
    each (found by the device pre-pass): chunk ``i``'s ``nlevels[i]`` levels expand to level
    ``dst[i]``."""
    assert runs is not None  # found by the device pre-pass
    vals, lens = level_runs(starts, runs)
    unit.add_rle(16, "level", vals=vals, runs=lens, nruns=runs, count=nlevels, dst=2 * dst)


__all__ = ["WORD_BITS", "chunk_runs", "emit_chunks", "emit_levels", "emit_values", "level_form", "level_runs", "value_bits", "value_form"]
