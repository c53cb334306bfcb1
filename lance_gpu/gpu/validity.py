# SPDX-License-Identifier: Apache-2.0
"""A device column's validity, held as bitmask words or as bool bytes.

:class:`Validity` is what :attr:`lance_gpu.gpu.columns.DeviceColumn.validity` holds (None
there: no nulls).  It keeps the layout it was made in and gives the other one on demand,
made once (one launch) and kept:

words
    uint32 bitmask words in Arrow's (and cuDF's) bit order, 1 = valid, with a bit offset:
    slot ``i`` is bit ``(offset + i) & 31`` of word ``(offset + i) >> 5``.  ``offset`` is
    in ``[0, 32)`` (a slice moves the words' start, then keeps the rest of its row offset
    as bits); the words hold at least ``offset + length`` bits, and the bits outside
    ``[offset, offset + length)`` are **unspecified** (a slice shares the words of the rows
    around it), so every reader masks them: the segmented bit copy of
    :func:`cuda_kernels.pieces.pack_bitmask_segments_gpu` and ``gather_bits_segments_gpu``,
    the conversion to bytes and :meth:`Validity.host_bitmap` do.  This is what the level
    unravel writes for every layer (from bit 0 of a word of the layer's own: flat nullable
    columns and structs of them one word per 32 levels, list and item layers of leaves with
    repetition levels bit by bit after the scan), what combining
    writes (cuDF's masks, the ``"device"`` layout of :mod:`.combine`, gathered selections
    too) and what an upload of an Arrow bitmap gives.
bytes
    device ``bool[length]``, one byte per slot: what consumers that index slots read
    (``bytes()``: the writer's level encoding, the torch feed, vector search masks,
    struct-field AND), made from the words on demand.

A conversion is one launch (:func:`cuda_kernels.levels.bitmap_to_validity_gpu` for words to
bytes; :func:`cuda_kernels.levels.validity_to_bitmap_gpu` for the Arrow bitmap of bytes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import cuda_kernels as ck
from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from cuda_kernels.pieces import count_zero_bits_gpu
from lance_gpu.gpu import _array
from lance_gpu.gpu._array import DeviceArray

cuda = LAZY_CUDA


class Validity:
    """The validity of ``length`` slots (see the module docstring for the layouts)."""

    __slots__ = ("_bytes", "_words", "length", "offset")

    def __init__(self, length: int, *, words: DeviceArray | None = None, offset: int = 0, valid_bytes: DeviceArray | None = None) -> None:
        if words is None and valid_bytes is None:
            msg = "a Validity needs words or bytes"
            raise ValueError(msg)
        if words is not None and offset >= 32:
            words = words[offset >> 5 :]
            offset &= 31
        self.length = int(length)
        self._words = words
        self.offset = int(offset)
        self._bytes = valid_bytes

    @classmethod
    def of_bytes(cls, valid: DeviceArray, length: int | None = None) -> Validity:
        """Device bool (or uint8 0 / 1) bytes, one per slot (the first ``length``)."""
        n = int(valid.shape[0]) if length is None else int(length)
        return cls(n, valid_bytes=valid[:n].view(np.bool_))

    @classmethod
    def of_words(cls, words: DeviceArray, offset: int, length: int) -> Validity:
        """uint32 device words, slot 0 at bit ``offset``."""
        return cls(length, words=words.view(np.uint32), offset=offset)

    @classmethod
    def of_arrow(cls, arr: pa.Array) -> Validity | None:
        """An Arrow array's validity bitmap, uploaded as words (no launch; None: no nulls)."""
        if arr.null_count == 0 or pa.types.is_null(arr.type):
            return None
        buf = arr.buffers()[0]
        if buf is None:
            return None
        n = len(arr)
        first = arr.offset >> 3
        raw = np.frombuffer(buf, np.uint8)[first : (arr.offset + n + 7) >> 3]
        host = np.zeros(-(-max(raw.size, 1) // 4) * 4, np.uint8)
        host[: raw.size] = raw
        return cls.of_words(_array.upload(host.view(np.uint32)), arr.offset & 7, n)

    # -- layouts ------------------------------------------------------------------------------

    @property
    def is_words(self) -> bool:
        """Held as bitmask words (the bytes, if any, were made from them)."""
        return self._words is not None

    def words(self) -> tuple[DeviceArray, int] | None:
        """``(uint32 words, bit offset of slot 0)`` when held as words, else None (a
        consumer of words reads bytes then: :func:`cuda_kernels.pieces.pack_bitmask_segments_gpu`)."""
        return None if self._words is None else (self._words, self.offset)

    def bytes(self) -> DeviceArray:
        """Device ``bool[length]`` (made from the words by one launch, once)."""
        if self._bytes is None:
            assert self._words is not None
            self._bytes = _array.as_device(ck.bitmap_to_validity_gpu(self._words.view(np.uint8), self.length, self.offset))
        return self._bytes

    def source(self) -> tuple[DeviceArray, int, bool]:
        """``(array, position of slot 0, is words)``: the words and their bit offset where
        held as words, else the bytes and 0 (what combining copies from)."""
        if self._words is not None:
            return self._words, self.offset, True
        return self.bytes(), 0, False

    def host_bitmap(self) -> pa.Buffer:
        """The Arrow bitmap on the host (slot 0 at bit 0, the bits past ``length`` 0)."""
        n = self.length
        if self._words is None:
            return pa.py_buffer(_array.to_host(ck.validity_to_bitmap_gpu(self.bytes())))
        nwords = -(-(self.offset + n) // 32)
        raw = _array.to_host(self._words[:nwords]).view(np.uint8) if nwords else np.zeros(0, np.uint8)
        bits = np.unpackbits(raw, bitorder="little")[self.offset : self.offset + n]
        return pa.py_buffer(np.packbits(bits, bitorder="little"))

    # -- counts and row selection -------------------------------------------------------------

    def null_count(self) -> int:
        """Counted on the device: words by a population count
        (:func:`~cuda_kernels.pieces.count_zero_bits_gpu`: one launch, no upload), bytes by
        counting; one readback."""
        if not self.length:
            return 0
        if self._words is None:
            return _array.count_false(self.bytes())
        return count_zero_bits_gpu(self._words, self.offset, self.length)

    def slice(self, lo: int, hi: int) -> Validity:
        """Slots ``[lo, hi)``, views of the same buffers (no launch)."""
        b = None if self._bytes is None else self._bytes[lo:hi]
        if self._words is None:
            return Validity(hi - lo, valid_bytes=b)
        return Validity(hi - lo, words=self._words, offset=self.offset + lo, valid_bytes=b)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Validity({self.length}, {'words' if self.is_words else 'bytes'})"


def as_validity(v, length: int) -> Validity | None:
    """A :class:`Validity` of ``length`` slots from a Validity or device bool bytes (None: None)."""
    if v is None or isinstance(v, Validity):
        return v
    return Validity.of_bytes(v, length)


@gpu_kernel
def _and_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] and b[i]


def and_validity(a: Validity | None, b: Validity | None) -> Validity | None:
    """Valid where both are (either None: all valid); one launch on the bytes
    (``out[i] = a[i] and b[i]`` over ``a``'s bytes)."""
    if a is None:
        return b
    if b is None:
        return a
    ab, bb = a.bytes(), b.bytes()
    n = int(ab.shape[0])
    out = _array.empty(n, np.bool_)
    if n:
        blocks, tpb = _device.launch_dims(n)
        _and_kernel.get()[blocks, tpb](ab, bb, out)
    return Validity.of_bytes(out, a.length)


__all__ = ["Validity", "and_validity", "as_validity"]
