# SPDX-License-Identifier: Apache-2.0
"""Encoding pages on the GPU (file versions 2.1 and 2.2): the device twin of
:func:`lance_gpu.file.writer.pages.encode_leaf` for columns held in device memory.

The choices are the CPU encoder's, made from statistics computed on the device (null
count, all-equal test, run count, 1024-value block widths, the distinct values of a sample)
with the same rules and thresholds, so the pages are byte for byte the CPU encoder's (the
page layout and chunk metadata come from the same code: :func:`pages._miniblock` with a
:class:`DeviceBackend`).  The per-value work runs in numba-cuda kernels, through the
encoders registered in :data:`lance_gpu.file.encodings.ENCODERS`: definition levels from
validity and their OutOfLineBitpacking per chunk, boolean bit-packing, FastLanes
InlineBitpacking, RLE, page dictionaries (keys from the CPU encoder's sample, lookup and
first-occurrence ranks on the device), FSST (symbol table trained on the host from the CPU
encoder's sample, compression on the device), variable-width chunks, full-zip values with
their control and length words, and the mini-block assembly (one range copy per section).
Each page buffer then comes back once, device -> pinned host (:class:`StagedBuffer`, on a
copy stream while the next columns encode), to be written.

Covered on the device: columns of ints, floats, booleans, temporal types, decimals and
fixed-size binaries, strings and binaries, JSON (the JSONB documents a device JSON column
holds), embeddings and other fixed-size lists (of fixed-size lists) of numbers or booleans
(item validity of one layer included), with or without nulls; page dictionaries whose
values the sample missed (found on the device); lists, maps and structs of those, nested
(fixed-size lists among the leaves, with null items or not; the rep / def levels made on the
device by the steps the CPU encoder takes; values gathered on the device -- a null entry's slot zero or empty, a null fixed-size list
row's items null, as pyarrow's ``take`` leaves them for the CPU encoder; rows whose levels
overflow a chunk split in halves, as the CPU writer splits them).  Field metadata steering the encoder (``lance-encoding:compression``
/ ``structural-encoding`` / ``dict-size-ratio``) is followed as the CPU encoder follows
it.  Left to the CPU encoder, from a host copy of the column (counted by reason in
:data:`host_fallbacks`): full-zip values compressed one by one with zstd (over 32 KiB, or
where field metadata names a general scheme), mini-block string chunks compressed with the
general scheme field metadata names, and file version 2.0.  The zstd / lz4 step is the
reason: no device zstd gives libzstd's bytes (nvCOMP's frames differ, and it is not a
dependency); as the values must come to the host for it anyway, the column's buffers come
once, as they are, and the CPU encoder makes the whole page there (its levels, control
words and row index too).  (Arrow
dictionary columns never reach it: no device column holds one, a ``DeviceTable``'s stays
on the host.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.file.encodings import ENCODERS, bitpacking
from lance_gpu.file.encodings.base import MiniBlockChunks
from lance_gpu.file.encodings.bitpacking import device as bitpacking_device
from lance_gpu.file.page import ALL_VALID_ITEM, LIST_LAYERS, NULLABLE_ITEM
from lance_gpu.file.v2_1.fullzip import _ctrl_bytes
from lance_gpu.file.writer import pages
from lance_gpu.file.writer.pages import EncodedPage, PageBackend
from lance_gpu.file.writer.shred import LeafColumn
from lance_gpu.gpu import _array
from lance_gpu.gpu import _array as arrays
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.validity import Validity
from lance_gpu.table.schema import LanceField
from lance_gpu.write.device_input import concat_columns, offset_ends, slice_column

__all__ = ["DeviceBackend", "StagedBuffer", "encode_device_column", "encode_device_field", "host_fallbacks", "to_pinned_host"]

#: why pages of this process went to the CPU encoder: reason -> count
host_fallbacks: dict[str, int] = {}


class StagedBuffer:
    """A page buffer on its way from the device into page-locked host memory.

    With CuPy (a real GPU), the copy is queued on a non-blocking copy stream after an event
    that marks the end of the encoding kernels queued so far on the legacy stream: the DMA
    runs while the next columns encode, and the writer waits for it only when it writes the
    buffer (``numpy.asarray(buffer)``).  Elsewhere (the simulator) the copy is done at once.
    The device array is kept alive until the copy has finished."""

    def __init__(self, dev) -> None:
        from numba import cuda


        n = int(dev.shape[0])
        self.nbytes = n
        self._host = cuda.pinned_array(n, np.uint8)
        self._dev = dev
        self._done = None
        if not n:
            return
        cp = arrays.cupy()
        if cp is None:
            dev.view(np.uint8).copy_to_host(self._host)
            self._dev = None
            return
        stream = _copy_stream(cp)
        encoded = cp.cuda.Event(block=False, disable_timing=True)
        encoded.record(cp.cuda.Stream.null)
        stream.wait_event(encoded)
        src = dev.__cuda_array_interface__["data"][0]
        cp.cuda.runtime.memcpyAsync(self._host.ctypes.data, src, n, cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        self._done = cp.cuda.Event(block=False, disable_timing=True)
        self._done.record(stream)

    def result(self) -> np.ndarray:
        """The host bytes (waits for the copy)."""
        if self._done is not None:
            self._done.synchronize()
            self._done = None
            self._dev = None
        return self._host

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.result()
        return out if dtype is None else out.astype(dtype)

    @property
    def size(self) -> int:
        return self.nbytes


_streams: dict[int, Any] = {}


def _copy_stream(cp) -> Any:
    """One non-blocking copy stream per device (page buffers come back in order on it)."""
    dev = int(cp.cuda.runtime.getDevice())
    stream = _streams.get(dev)
    if stream is None:
        stream = _streams[dev] = cp.cuda.Stream(non_blocking=True)
    return stream


def to_pinned_host(dev) -> StagedBuffer:
    """Start copying a device array into new page-locked host memory (see :class:`StagedBuffer`)."""
    return StagedBuffer(dev)


class DeviceBackend(PageBackend):
    """:class:`~lance_gpu.file.writer.pages.PageBackend` over device arrays (host repetition
    levels of list leaves are uploaded for their chunks)."""

    def level_max(self, levels) -> int:
        if isinstance(levels, np.ndarray):
            return int(levels.max()) if levels.size else 0
        return self._max

    def __init__(self, level_max: int = 1) -> None:
        self._max = level_max

    def level_chunks(self, levels, bounds: np.ndarray, width: int):
        if isinstance(levels, np.ndarray):
            levels = _array.upload(levels)
        return _encoder("out_of_line_bitpacking")(levels, bounds, width)

    def zeros(self, nbytes: int):
        return _array.zeros(nbytes, np.uint8)

    def scatter(self, out, dst_starts, data, src_starts, sizes) -> None:
        from cuda_kernels.segments import copy_ranges_gpu

        keep = sizes > 0
        if not keep.any():
            return
        src = _array.upload(np.ascontiguousarray(data)) if isinstance(data, np.ndarray) else data
        copy_ranges_gpu(src, src_starts[keep], sizes[keep], out, dst_starts[keep])

    def finish(self, out) -> StagedBuffer:  # type: ignore[override]
        return to_pinned_host(out)


@dataclass(slots=True)
class DeviceLeaf:
    """A leaf whose values are on the device, with what :func:`pages._miniblock` asks of a
    leaf: ``def_`` device u16 levels (or None); for a list leaf also ``rep`` (host u16), the
    host ``visible`` flags and the counts."""

    field: LanceField
    def_: Any
    layers: tuple[int, ...]
    num_values: int
    rep: np.ndarray | None = None
    visible: np.ndarray | None = None
    max_rep: int = 0
    rows: int = -1
    levels: int = -1
    max_level: int = 1
    host_def: np.ndarray | None = None  # host u16 def levels, read back when needed
    validity: Any = None  # device validity of a flat leaf (for host_def)

    def def_levels_host(self) -> np.ndarray | None:
        """The def levels on the host (a flat leaf's from its validity, a nested leaf's
        read back)."""
        if self.host_def is None and self.def_ is not None:
            if self.validity is not None:
                self.host_def = (~_array.to_host(self.validity)).astype(np.uint16)
            else:
                self.host_def = _array.to_host(self.def_)
        return self.host_def

    @property
    def num_rows(self) -> int:
        return self.num_values if self.rows < 0 else self.rows

    @property
    def num_levels(self) -> int:
        return self.num_values if self.levels < 0 else self.levels


def _layers(kinds: tuple[int, ...]) -> list:
    """Layer kinds as the protobuf field takes them (its stubs name the enum type)."""
    return list(kinds)


def _encoder(name: str) -> Callable[..., Any]:
    """The device encoder of encoding ``name`` (registered in ``lance_gpu.file.encodings``)."""
    fn = ENCODERS[name].device
    assert fn is not None, name
    return fn


def _fallback(reason: str) -> EncodedPage | None:
    """Count why a page goes to the CPU encoder; None (no device page)."""
    host_fallbacks[reason] = host_fallbacks.get(reason, 0) + 1
    return None


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _fixed_kind(s: pa.DataType) -> bool:
    return (
        pa.types.is_integer(s) or pa.types.is_floating(s) or pa.types.is_boolean(s)
        or pa.types.is_date(s) or pa.types.is_time(s) or pa.types.is_timestamp(s) or pa.types.is_duration(s)
        or pa.types.is_decimal(s) or pa.types.is_fixed_size_binary(s)
    )


@dataclass(frozen=True, slots=True)
class _Steer:
    """What a leaf field's metadata asks of the encoder (``lance_gpu.file.writer.pages``' keys):
    ``compression`` (``none``: no constants, dictionaries, RLE, bitpacking or FSST;
    ``fsst``: FSST forced; a general scheme: long values zstd-compressed one by one),
    ``structural`` (``miniblock`` / ``fullzip`` forced) and the dictionary size ratio."""

    compression: str | None
    structural: str | None
    ratio: float


def _steer(leaf: DeviceLeaf) -> _Steer:
    ratio = pages.DICT_SIZE_RATIO
    raw = pages._meta(leaf, pages.DICT_SIZE_RATIO_KEY)  # type: ignore[arg-type]
    if raw is not None:
        try:
            ratio = float(raw)
        except ValueError:
            pass
    return _Steer(pages._meta(leaf, pages.COMPRESSION_KEY), pages._meta(leaf, pages.STRUCTURAL_KEY), ratio)  # type: ignore[arg-type]


def _wants_fsst(steer: _Steer, text: bool, max_len: int, nbytes: int) -> bool:
    """``pages._wants_fsst``: forced by ``compression=fsst``; else strings (not binaries)
    whose longest value has 5+ bytes, on a page of 32 KiB of them."""
    if steer.compression == "fsst":
        return True
    if steer.compression == "none" or not text:
        return False
    return max_len >= pages.FSST_MIN_MAX_LEN and nbytes >= pages.FSST_MIN_BYTES


def encode_device_column(col: DeviceColumn, field: LanceField, minor: int) -> EncodedPage | None:
    """The page of a top-level device column, or None where the CPU encoder must make it
    (the reason is counted in :data:`host_fallbacks`)."""
    s = _storage(col.type)
    if minor < 1:
        return _fallback("file version 2.0")
    if pa.types.is_dictionary(s):
        return _fallback("dictionary column")
    if field.logical_type == "json":
        # the device holds JSONB documents (the GPU reader's and upload_arrow's convention),
        # stored as large_binary values, as the CPU encoder stores the text it converts
        s = pa.large_binary()
    if col.children or pa.types.is_struct(s) or pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s):
        return _fallback("nested column")
    n = col.length
    if n == 0:
        return _fallback("empty page")
    nulls = col.null_count
    leaf = DeviceLeaf(field, None, (ALL_VALID_ITEM,), n)
    if nulls == n:
        layout = pages.pb.PageLayout(constant_layout=pages.pb.ConstantLayout(layers=_layers((NULLABLE_ITEM,))))
        return EncodedPage(layout, [], n)
    if nulls:
        from cuda_kernels.encode import def_levels_from_validity_gpu

        valid = col.validity.bytes()  # type: ignore[union-attr]
        leaf.def_ = def_levels_from_validity_gpu(valid)
        leaf.validity = valid
        leaf.layers = (NULLABLE_ITEM,)
    if pa.types.is_fixed_size_list(s):
        return _fsl_page(leaf, col, s, minor)
    if _fixed_kind(s):
        return _fixed_page(leaf, col, s, minor)
    if pa.types.is_string(s) or pa.types.is_binary(s) or pa.types.is_large_string(s) or pa.types.is_large_binary(s):
        return _variable_page(leaf, col, s, minor)
    return _fallback(f"type {s}")


# --------------------------------------------------------------------------------------------
# fixed width


def _fixed_page(leaf: DeviceLeaf, col: DeviceColumn, s: pa.DataType, minor: int) -> EncodedPage | None:
    """Fixed-width values by ``pages.encode_leaf``'s rule: an inline constant (2.2, no nulls
    or lists, at most 32 bytes), a page dictionary (128-bit, or 64-bit in 2.2), mini-block
    chunks for values under 256 bytes, else full-zip -- as the field's metadata allows."""
    from cuda_kernels.encode import rows_all_equal_gpu

    steer = _steer(leaf)
    n = col.length
    if pa.types.is_boolean(s):
        import cuda_kernels as ck

        data = _array.as_device(ck.validity_to_bitmap_gpu(col.data[:n].view(np.bool_)))
        bits = 1
    else:
        bits = s.bit_width
        data = col.data[: n * (bits // 8)]
    if minor >= 2 and leaf.def_ is None and leaf.rep is None and steer.compression != "none" and steer.structural is None:
        if bits == 1:
            if rows_all_equal_gpu(col.data[:n], 1):
                value = bytes([int(_array.to_host(col.data[:1])[0] != 0)])
                return _constant(leaf, value)
        elif bits // 8 <= pages.MAX_INLINE_CONSTANT and rows_all_equal_gpu(data, bits // 8):
            return _constant(leaf, _array.to_host(data[: bits // 8]).tobytes())
    wants_dictionary = steer.compression != "none" and steer.structural != "fullzip"
    if wants_dictionary and n >= pages.DICT_MIN_VALUES and (bits == 128 or (minor >= 2 and bits == 64)):
        got = _fixed_dictionary_page(leaf, data, n, bits, minor, steer.ratio)
        if isinstance(got, EncodedPage):
            return got
    narrow = bits // 8 < pages.MINIBLOCK_MAX_VALUE_BYTES
    if steer.structural == "miniblock" or (narrow and steer.structural != "fullzip"):
        chunks = _value_chunks(data, bits, n, steer.compression)
        return pages._miniblock(leaf, minor, chunks, backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]
    if bits % 8:
        raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: full-zip values of {bits} bits")
    return _fullzip(leaf, data, pages.pb.CompressiveEncoding(flat=pages.pb.Flat(bits_per_value=bits)), fixed_bytes=bits // 8)


def _value_chunks(data, bits: int, n: int, compression: str | None = None) -> MiniBlockChunks:
    """The CPU encoder's choice for fixed-width values (``pages._value_chunks``): RLE when
    there are fewer runs than half the values, else InlineBitpacking when its blocks are
    smaller than the values, else Flat (Flat alone with ``compression=none``) -- made on
    the device."""
    if bits in (8, 16, 32, 64) and compression != "none":
        from cuda_kernels.encode import run_count_gpu

        words = data.view(np.dtype(f"<u{bits // 8}"))
        if run_count_gpu(words) < pages.RLE_THRESHOLD * n:
            return _encoder("rle")(words)
        widths = bitpacking_device.block_bit_widths(words)
        if bitpacking_device.inline_size(widths, bits) < n * bits // 8:
            return _encoder("inline_bitpacking")(words, widths)
    return _encoder("flat")(data, bits, n)


def _fixed_dictionary_page(leaf: DeviceLeaf, data, n: int, bits: int, minor: int, ratio: float) -> EncodedPage | bool:
    """The page with a dictionary when the CPU encoder's rule wants one; False when it does
    not (the caller goes on).  The keys start from the CPU encoder's sample; values it
    missed are found on the device (see :mod:`lance_gpu.file.encodings.dictionary.device`)."""
    import cuda_kernels as ck

    width = bits // 8
    kw = width // 8
    words = data.view(np.uint64)
    max_items = min(pages.DICT_MAX_ITEMS, n // 2)

    def rejected(card: int) -> bool:
        return card > max_items or card * width + 4 * n >= ratio * n * width

    pick = _sample_positions(n)
    if pick is None:  # the CPU encoder counts all values of a small page
        sample = _array.to_host(words).reshape(n, kw)
    else:
        rows = data.reshape(n, width) if kw > 1 else words
        sample = np.ascontiguousarray(_array.to_host(ck.gather_fixed_gpu(rows, _array.upload(pick)))).view(np.uint64).reshape(-1, kw)
    keys = np.unique(sample, axis=0)
    if rejected(keys.shape[0]):
        return False
    got = _encoder("dictionary")(words, kw, keys, rejected)
    if got is None:
        return False
    items, indices = got
    card = items.shape[0]
    if rejected(card):
        return False
    item_values = pages._Values(False, items.view(np.uint8).reshape(-1), bits=bits, num_values=card)
    enc, buf = pages._dictionary_block(item_values, minor)
    chunks = _value_chunks(indices, 32, n)
    return pages._miniblock(leaf, minor, chunks, dictionary=(enc, card, buf), backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]


def _constant(leaf: DeviceLeaf, value: bytes) -> EncodedPage:
    cl = pages.pb.ConstantLayout(layers=_layers(leaf.layers), inline_value=value)
    return EncodedPage(pages.pb.PageLayout(constant_layout=cl), [], leaf.num_rows)


def _sample_positions(n: int) -> np.ndarray | None:
    """The values :func:`pages._sample_distinct` looks at, or None when it looks at all."""
    if n <= pages.DICT_SAMPLE:
        return None
    return np.linspace(0, n - 1, pages.DICT_SAMPLE).astype(np.int64)


def _fsl_page(leaf: DeviceLeaf, col: DeviceColumn, s: pa.DataType, minor: int, *, rows_valid: Any = None) -> EncodedPage | None:
    """Fixed-size lists (of fixed-size lists ...) of numeric or boolean items (booleans
    bit-packed on the device, LSB first, rows back to back), as the CPU encoder writes them.
    Item validity (one layer of lists: :attr:`DeviceColumn.item_validity`) counts only when
    an item is null in a valid row (one count read back), as
    :func:`lance_gpu.file.writer.shred.fsl_layers` decides.  Rows under 256 bytes whose items are
    not all null: mini-block chunks of whole rows, cut as the CPU encoder cuts them (rows
    per chunk a multiple of 8, so the layer's validity is packed once, on the device);
    otherwise a FullZipLayout whose values are the rows' bytes as they are (one
    ``FixedSizeList{dim, ...}`` per layer around ``Flat{item bits}``), each after its items'
    validity bits when they count (``has_validity``; values of all-null items are not
    stored: ``FixedSizeList{dim, Constant}``), with control words only when rows are null."""
    import cuda_kernels as ck
    from cuda_kernels.encode import items_null_in_valid_rows_gpu, zip_fsl_rows_gpu

    dims: list[int] = []
    item = s
    while pa.types.is_fixed_size_list(item):
        dims.append(item.list_size)
        item = item.value_type
    boolean = pa.types.is_boolean(item)
    if not (pa.types.is_integer(item) or pa.types.is_floating(item) or boolean):
        return _fallback("fixed-size list of non-numeric items")
    dim = int(np.prod(dims))
    n = col.length
    bits = item.bit_width * dim
    if boolean:
        data = _array.as_device(ck.validity_to_bitmap_gpu(col.data[: n * dim].view(np.bool_)))
    else:
        data = col.data[: n * bits // 8]
    items = col.item_validity.bytes()[: n * dim] if col.item_validity is not None and len(dims) == 1 else None
    if items is not None and not items_null_in_valid_rows_gpu(items, leaf.validity if rows_valid is None else rows_valid, dim):
        items = None
    all_null = items is not None and _array.count_false(items) == n * dim
    layers = (*((d, None) for d in dims[:-1]), (dims[-1], items))
    steer = _steer(leaf)
    narrow = bits // 8 < pages.MINIBLOCK_MAX_VALUE_BYTES and not all_null
    if steer.structural == "miniblock" or (narrow and steer.structural != "fullzip"):
        # narrow rows: mini-block chunks of whole rows, cut as the CPU encoder cuts them
        values = pages._Values(False, data, bits=bits, num_values=n, fsl=layers)

        def pack(valid):
            return _array.as_device(ck.validity_to_bitmap_gpu(valid))

        chunks = pages._fsl_chunks(values, pack=pack)
        return pages._miniblock(leaf, minor, chunks, backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]
    inner = pages.pb.CompressiveEncoding(flat=pages.pb.Flat(bits_per_value=item.bit_width))
    width = bits // 8
    if items is not None:
        if bits % 8:
            raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: full-zip fixed-size lists of booleans with null items")
        if all_null:
            inner = pages.pb.CompressiveEncoding(constant=pages.pb.Constant())
            width = 0
        data = zip_fsl_rows_gpu(items, data, n, dim, width)
        width += -(-dim // 8)
    elif bits % 8:
        raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: full-zip values of {bits} bits")
    enc = pages._fsl_encoding(layers, inner)
    if leaf.def_ is not None or leaf.rep is not None:
        return _fullzip(leaf, data, enc, fixed_bytes=width)
    fz = pages.pb.FullZipLayout(
        bits_rep=0, bits_def=0, num_items=n, num_visible_items=n, value_compression=enc,
        layers=_layers(leaf.layers), bits_per_value=8 * width,
    )
    return EncodedPage(pages.pb.PageLayout(full_zip_layout=fz), [to_pinned_host(data[: n * width])], n)


def _fullzip(
    leaf: DeviceLeaf,
    data,
    encoding,
    *,
    fixed_bytes: int = 0,
    offsets: np.ndarray | None = None,
    obits: int = 32,
) -> EncodedPage:
    """A FullZipLayout page, as ``pages._fullzip`` lays it out: per level its control word
    (rep and def bits, 0 / 1 / 2 / 4 bytes), then for a visible value its bytes (fixed
    width), or for a valid variable-width one its length word and bytes; the byte-packed
    start of every row follows (variable width or lists).  Sizes and positions are worked
    out on the host from the levels and offsets; the bytes are placed on the device (range
    copies of the control words, the length words and the values)."""
    from cuda_kernels.segments import copy_ranges_gpu

    nlev = leaf.num_levels
    rep = leaf.rep
    def_ = leaf.def_levels_host()
    bits_rep = int(bitpacking.bit_length(np.array([rep.max()]))[0]) if rep is not None and nlev else 0
    bits_def = int(bitpacking.bit_length(np.array([def_.max()]))[0]) if def_ is not None and nlev else 0
    ctrl = _ctrl_bytes(bits_rep + bits_def)
    vis = leaf.visible
    visible = np.ones(nlev, np.bool_) if vis is None else vis
    n = leaf.num_values
    variable = offsets is not None
    if variable:
        assert offsets is not None
        obytes = obits // 8
        lengths = np.diff(offsets)
        nulls = None if def_ is None else (def_ if vis is None else def_[visible]) != 0
        valid = np.ones(n, np.bool_) if nulls is None else ~nulls
        body = np.where(valid, obytes + lengths, 0)
    else:
        body = np.full(n, fixed_bytes, np.int64)
    item = np.full(nlev, ctrl, np.int64)
    item[visible] += body
    starts = np.zeros(nlev + 1, np.int64)
    np.cumsum(item, out=starts[1:])
    out = _array.zeros(int(starts[-1]), np.uint8)

    def place(src, src_starts, lengths, dst_starts) -> None:
        keep = lengths > 0
        if keep.any():
            copy_ranges_gpu(src, src_starts[keep], lengths[keep], out, dst_starts[keep])

    if ctrl:
        word = np.zeros(nlev, np.int64)
        if rep is not None:
            word |= rep.astype(np.int64) << bits_def
        if def_ is not None:
            word |= def_.astype(np.int64)
        words = _array.upload(np.ascontiguousarray(word.astype(f"<u{ctrl}")).view(np.uint8))
        place(words, np.arange(nlev, dtype=np.int64) * ctrl, np.full(nlev, ctrl, np.int64), starts[:-1])
    vstart = starts[:-1][visible] + ctrl
    if variable:
        assert offsets is not None
        lens = lengths[valid]
        vs = vstart[valid]
        lb = _array.upload(np.ascontiguousarray(lens.astype(f"<u{obytes}")).view(np.uint8))
        place(lb, np.arange(lens.size, dtype=np.int64) * obytes, np.full(lens.size, obytes, np.int64), vs)
        place(data, offsets[:-1][valid], lens.astype(np.int64), vs + obytes)
        details = {"bits_per_offset": obits}
    else:
        place(data, np.arange(n, dtype=np.int64) * fixed_bytes, np.full(n, fixed_bytes, np.int64), vstart)
        details = {"bits_per_value": 8 * fixed_bytes}
    buffers: list[Any] = [to_pinned_host(out)]
    if variable or rep is not None:
        row_start = np.ones(nlev, np.bool_) if rep is None else rep == leaf.max_rep
        buffers.append(pages._bytepack(np.concatenate([starts[:-1][row_start], starts[-1:]])))
    fz = pages.pb.FullZipLayout(
        bits_rep=bits_rep, bits_def=bits_def, num_items=nlev, num_visible_items=n,
        value_compression=encoding, layers=_layers(leaf.layers), **details,
    )
    return EncodedPage(pages.pb.PageLayout(full_zip_layout=fz), buffers, leaf.num_rows)


# --------------------------------------------------------------------------------------------
# lists


def _is_leaf_type(s: pa.DataType) -> bool:
    return _fixed_kind(s) or pa.types.is_string(s) or pa.types.is_binary(s) or pa.types.is_large_string(s) or pa.types.is_large_binary(s)


def _device_validity(col: DeviceColumn):
    """The column's device validity bytes, None when nothing is null (as the shredder's)."""
    if col.validity is None or not col.null_count:
        return None
    return col.validity.bytes()


def _or_of_levels(levels) -> int:
    """A number with the bit length of the largest device u16 level (the OR of the
    1024-level blocks' widths: what the level packing's width needs), without reading the
    levels back."""
    from cuda_kernels.encode import block_bit_widths_gpu

    widths = block_bit_widths_gpu(levels)
    return (1 << int(widths.max())) - 1 if widths.size else 0


def _nested_pages(col: DeviceColumn, field: LanceField, minor: int) -> list[tuple[int, EncodedPage, int]] | None:
    """Structs, lists, maps and their nestings: one page per leaf, as the CPU encoder makes
    them.  The walk is the shredder's (``lance_gpu.file.writer.shred``), over device buffers: a
    list layer reads back its first and last offsets (to cut its child's rows); the rep /
    def levels, layer kinds and value index are made on the device by
    :func:`cuda_kernels.levels.ravel_levels_gpu` (the steps of the CPU encoder's
    :func:`~cuda_kernels.levels.ravel_levels`); each leaf's visible values are gathered and
    encoded there, its def levels packed there.  What the page metadata is made from on the
    host comes back: the repetition levels (chunk boundaries, repetition index) and which
    levels hold a value; the def levels only for a full-zip page (its control words) or a
    page without values.  None where a leaf is of a kind left to the CPU encoder."""
    import cuda_kernels as ck
    from cuda_kernels.encode import mask_fsl_items_gpu, null_slots_to_gpu, zero_null_slots_gpu
    from cuda_kernels.levels import ravel_levels_gpu
    from cuda_kernels.segments import copy_ranges_gpu

    if minor < 1:
        return None
    num_rows = col.length
    pages_out: list[tuple[int, EncodedPage, int]] = []

    def leaf_page(leaf_col: DeviceColumn, f: LanceField, chain: list) -> EncodedPage | None:
        s = _storage(leaf_col.type)
        fsl = pa.types.is_fixed_size_list(s)
        if not (_is_leaf_type(s) or fsl) or f.logical_type == "json":
            return _fallback("nested column of another leaf kind")
        n = leaf_col.length
        rav = ravel_levels_gpu([*chain, (_device_validity(leaf_col), None, n)][::-1], num_rows)
        layers = tuple(int(k) for k in rav.layer_kinds)
        nvals = int(rav.value_index.shape[0])
        rep = None if rav.rep is None else _array.to_host(rav.rep)
        visible = None if rav.rep is None or rav.def_ is None else _array.to_host(rav.visible)
        if nvals == 0:  # every row a null or empty list: the raw levels, as the CPU encoder writes them
            def_host = None if rav.def_ is None else _array.to_host(rav.def_)
            return pages._complex_all_null(LeafColumn(f, pa.nulls(0), rep, def_host, layers, rav.num_levels, num_rows))
        # Where the values are gathered (an entry hidden under a null or empty list), a null
        # entry's slot holds zero bytes / an empty value, as pyarrow's take (the CPU
        # encoder's gather) writes it; where every entry is a value, the slots keep theirs.
        item_valid = None if fsl else _device_validity(leaf_col)
        rows_valid = _device_validity(leaf_col) if fsl else None
        if nvals == n:  # the value index is increasing: every entry, in order
            values = DeviceColumn(leaf_col.type, n, None, leaf_col.data, leaf_col.offsets, item_validity=leaf_col.item_validity)
        elif leaf_col.offsets is not None:
            index, offsets = rav.value_index, leaf_col.offsets[: n + 1]
            if item_valid is not None:  # null entries take the empty value appended at index n
                index = null_slots_to_gpu(index, item_valid, n)
                offsets = _array.empty(n + 2, np.int64)
                copy_ranges_gpu(leaf_col.offsets.view(np.uint8), [0], [8 * (n + 1)], offsets.view(np.uint8), [0])
                copy_ranges_gpu(leaf_col.offsets.view(np.uint8), [8 * n], [8], offsets.view(np.uint8), [8 * (n + 1)])
            off, data = ck.gather_binary_gpu(offsets, leaf_col.data, index)
            values = DeviceColumn(leaf_col.type, nvals, None, _array.as_device(data), _array.as_device(off))
        else:
            w = leaf_col.width
            if w in (1, 2, 4, 8):
                data = _array.as_device(ck.gather_fixed_gpu(leaf_col.data[: n * w].view(np.dtype(f"u{w}")), rav.value_index)).view(np.uint8)
            else:
                rows = leaf_col.data[: n * w].reshape(n, w)
                data = _array.as_device(ck.gather_fixed_gpu(rows, rav.value_index)).reshape(nvals * w)
            if item_valid is not None:
                zero_null_slots_gpu(data, rav.value_index, item_valid, w)
            values = DeviceColumn(leaf_col.type, nvals, None, data)
            if rows_valid is not None:
                rows_valid = _array.as_device(ck.gather_fixed_gpu(rows_valid, rav.value_index))
            if fsl and not pa.types.is_fixed_size_list(s.value_type) and (rows_valid is not None or leaf_col.item_validity is not None):
                # take makes a null row's items null (and every null item's bytes zero)
                dim = s.list_size
                if leaf_col.item_validity is not None:
                    items = _array.as_device(ck.gather_fixed_gpu(leaf_col.item_validity.bytes()[: n * dim].reshape(n, dim), rav.value_index)).reshape(nvals * dim)
                else:
                    items = _array.full(nvals * dim, np.bool_, True)
                mask_fsl_items_gpu(data, items, rows_valid, dim, w // dim)
                values.item_validity = Validity.of_bytes(items, nvals * dim)
        leaf = DeviceLeaf(
            f, rav.def_, layers, nvals, rep=rep, visible=visible, max_rep=sum(1 for k in layers if k in LIST_LAYERS),
            rows=num_rows, levels=rav.num_levels, max_level=_or_of_levels(rav.def_) if rav.def_ is not None else 0,
        )
        if fsl:
            return _fsl_page(leaf, values, s, minor, rows_valid=rows_valid)
        if _fixed_kind(s):
            return _fixed_page(leaf, values, s, minor)
        return _variable_page(leaf, values, s, minor)

    def walk(c: DeviceColumn, f: LanceField, chain: list) -> bool:
        s = _storage(c.type)
        if pa.types.is_struct(s):
            if len(c.children) != len(f.children) or not c.children:
                return False
            sub = [*chain, (_device_validity(c), None, c.length)]
            return all(walk(child, cf, sub) for child, cf in zip(c.children, f.children, strict=True))
        if pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s):
            if len(c.children) != 1 or not f.children:
                return False
            offsets = c.offsets[: c.length + 1]
            first, last = offset_ends(offsets, c.length)
            sub = [*chain, (_device_validity(c), offsets, c.length)]
            return walk(slice_column(c.children[0], first, last - first), f.children[0], sub)
        if c.children or not chain:
            return False
        page = leaf_page(c, f, chain)
        if page is None:
            return False
        pages_out.append((len(pages_out), page, 0))
        return True

    if num_rows == 0 or not walk(col, field, []):
        return None
    return pages_out


# --------------------------------------------------------------------------------------------
# variable width


def _variable_page(leaf: DeviceLeaf, col: DeviceColumn, s: pa.DataType, minor: int) -> EncodedPage | None:
    """Strings and binaries by ``pages.encode_leaf``'s rule: a page dictionary, mini-block
    chunks (FSST-compressed where it pays or is forced) when the longest value is under 256
    bytes, else full-zip -- as the field's metadata allows."""
    steer = _steer(leaf)
    n = col.length
    offsets = _array.to_host(col.offsets[: n + 1]).astype(np.int64)
    rel = offsets - offsets[0]
    nbytes = int(rel[-1])
    large = pa.types.is_large_string(s) or pa.types.is_large_binary(s)
    obits = 64 if large else 32
    text = pa.types.is_string(s) or pa.types.is_large_string(s)
    max_len = int(np.diff(rel).max()) if n else 0
    if steer.compression != "none" and steer.structural != "fullzip" and n >= pages.DICT_MIN_VALUES:
        got = _string_dictionary_page(leaf, col, nbytes, obits, minor, steer.ratio)
        if isinstance(got, EncodedPage):
            return got
    narrow = max_len < pages.MINIBLOCK_MAX_VALUE_BYTES
    if not (steer.structural == "miniblock" or (narrow and steer.structural != "fullzip")):
        return _variable_fullzip(leaf, col, offsets, rel, max_len, obits, text, steer)
    if pages.wants_general_chunks(steer.compression, nbytes):
        return _fallback("general-compressed mini-block chunks")
    if _wants_fsst(steer, text, max_len, nbytes):
        table, comp_off, d_comp_off, d_comp = _encoder("fsst")(offsets, col.offsets[: n + 1], col.data)
        if steer.compression == "fsst" or int(comp_off[-1]) + len(table) < nbytes:  # FSST pays (or is forced)
            chunks = _encoder("variable")(comp_off, d_comp_off, d_comp, obits)
            bounds = np.concatenate([[0], np.cumsum(chunks.counts)])
            if pages._decodable(np.diff(rel[bounds]), np.diff(comp_off[bounds])):
                chunks.encoding = pages._fsst_encoding(table, chunks.encoding)  # type: ignore[arg-type]
                return pages._miniblock(leaf, minor, chunks, backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]
    chunks = _encoder("variable")(rel, col.offsets[: n + 1], col.data, obits)
    return pages._miniblock(leaf, minor, chunks, backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]


def _variable_fullzip(
    leaf: DeviceLeaf, col: DeviceColumn, offsets: np.ndarray, rel: np.ndarray, max_len: int, obits: int, text: bool, steer: _Steer
) -> EncodedPage | None:
    """Long strings and binaries as full-zip values, FSST-compressed by the CPU encoder's rule
    (values compressed one by one with zstd -- over 32 KiB, or any where the metadata names
    a general scheme, on a page of 32 KiB of them -- are left to the CPU encoder)."""
    nbytes = int(rel[-1])
    requested = steer.compression is not None and steer.compression not in ("none", "fsst")
    if steer.compression != "none" and (requested or max_len > pages.PER_VALUE_MIN_MAX_LEN) and nbytes >= pages.PER_VALUE_MIN_BYTES:
        return _fallback("per-value zstd")
    encoding = pages.variable.variable_encoding(obits)
    n = col.length
    if _wants_fsst(steer, text, max_len, nbytes):
        table, comp_off, _d_off, d_comp = _encoder("fsst")(offsets, col.offsets[: n + 1], col.data)
        pays = steer.compression == "fsst" or int(comp_off[-1]) + len(table) < nbytes
        if pays and pages._decodable(rel[-1:], comp_off[-1:]):
            return _fullzip(leaf, d_comp, pages._fsst_encoding(table, encoding), offsets=comp_off, obits=obits)
    return _fullzip(leaf, col.data, encoding, offsets=offsets, obits=obits)


def _string_dictionary_page(leaf: DeviceLeaf, col: DeviceColumn, nbytes: int, obits: int, minor: int, ratio: float) -> EncodedPage | bool:
    """The CPU encoder's dictionary rule for strings and binaries, on the device: the page
    with its dictionary, or False (no dictionary)."""
    import cuda_kernels as ck

    n = col.length
    obytes = obits // 8
    max_items = min(pages.DICT_MAX_ITEMS, n // 2)
    raw = nbytes + n * obytes

    def rejected(card: int) -> bool:
        return card > max_items or card * (nbytes // n) + card * obytes + n * obytes >= ratio * raw

    pick = _sample_positions(n)
    if pick is None:
        pick = np.arange(n, dtype=np.int64)
    off, data = ck.gather_binary_gpu(col.offsets[: n + 1], col.data, _array.upload(pick))
    h_off = _array.to_host(off).astype(np.int64)
    h_data = _array.to_host(data).tobytes() if int(h_off[-1]) else b""
    keys = sorted({h_data[a:b] for a, b in zip(h_off[:-1].tolist(), h_off[1:].tolist(), strict=True)})
    if rejected(len(keys)):
        return False
    got = _encoder("dictionary_strings")(col.offsets[: n + 1], col.data, n, keys, rejected)
    if got is None:
        return False
    items, indices = got
    if rejected(len(items)):
        return False
    item_offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(x) for x in items], out=item_offsets[1:])
    item_bytes = np.frombuffer(b"".join(items), np.uint8)
    item_values = pages._Values(True, item_bytes, offsets=item_offsets, offset_bits=obits, num_values=len(items))
    enc, buf = pages._dictionary_block(item_values, minor)
    chunks = _value_chunks(indices, 32, n)
    return pages._miniblock(leaf, minor, chunks, dictionary=(enc, len(items), buf), backend=DeviceBackend(leaf.max_level))  # type: ignore[arg-type]


def encode_device_field(columns: list[DeviceColumn], field: LanceField, minor: int) -> list[tuple[int, EncodedPage, int]] | list[pa.Array]:
    """The pages of one top-level field's buffered device columns, as
    ``(column index within the field, page, row offset)`` -- or, where the CPU encoder must
    make them, the rows as host arrays for it."""
    col = concat_columns(columns)
    if col is None:
        _fallback("nested column")
        return [c.to_arrow() for c in columns]
    t = _storage(col.type)
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        out: list[tuple[int, EncodedPage, int]] = []

        def rows(c: DeviceColumn, first: int) -> bool:
            # the CPU writer's rule: rows whose levels overflow a chunk are split in halves
            try:
                got = _nested_pages(c, field, minor)
            except pages.LevelOverflow:
                if c.length < 2:
                    raise
                half = c.length // 2
                return rows(slice_column(c, 0, half), first) and rows(slice_column(c, half, c.length - half), first + half)
            if got is None:
                return False
            out.extend((k, page, first) for k, page, _first in got)
            return True

        if not rows(col, 0):
            _fallback("nested column")
            return [col.to_arrow()]
        return out
    page = encode_device_column(col, field, minor)
    if page is None:
        return [col.to_arrow()]
    return [(0, page, 0)]
