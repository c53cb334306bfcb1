# SPDX-License-Identifier: Apache-2.0
"""What every compressive decoder is handed.

Decoders come in the shapes Lance uses them in:

* **mini-block**: the values of all chunks of a page, batched.  A :class:`ChunkBuffers`
  names one per-chunk buffer in every chunk (start and size in the page's chunk data, and
  the chunk's value count).  An encoding that uses several per-chunk buffers (RLE: values
  and run lengths) receives them in order.
* **block**: one buffer holding a whole array (dictionary items, levels).
* **per value** (full-zip): handled by the full-zip layout with help from the encodings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lance_gpu.errors import CorruptFileError, UnsupportedEncodingError

if TYPE_CHECKING:
    from lance_gpu._proto.encodings_v2_1_pb2 import CompressiveEncoding


@dataclass(slots=True)
class ChunkBuffers:
    data: np.ndarray  # uint8, the page's chunk data (or a decompressed copy)
    starts: np.ndarray  # int64 per chunk: where this buffer starts in ``data``
    sizes: np.ndarray  # int64 per chunk: its size in bytes
    counts: np.ndarray  # int64 per chunk: number of values it encodes

    @property
    def num_values(self) -> int:
        return int(self.counts.sum())

    def with_counts(self, counts: np.ndarray) -> ChunkBuffers:
        return ChunkBuffers(self.data, self.starts, self.sizes, counts)


@dataclass(slots=True)
class DecodeContext:
    """Where we are, for error messages."""

    path: str
    column: int = -1
    page: int = -1

    def at_page(self, page: int) -> DecodeContext:
        """The same context, naming page ``page`` of the column."""
        return DecodeContext(self.path, self.column, page)

    def where(self, reason: str) -> str:
        """``reason`` prefixed with the column and page it concerns."""
        where = f"column {self.column}: " if self.column >= 0 else ""
        if self.page >= 0:
            where = f"column {self.column} page {self.page}: " if self.column >= 0 else f"page {self.page}: "
        return where + reason

    def corrupt(self, reason: str) -> CorruptFileError:
        return CorruptFileError(self.path, self.where(reason))

    def unsupported(self, what: str) -> UnsupportedEncodingError:
        where = f" (column {self.column})" if self.column >= 0 else ""
        return UnsupportedEncodingError(f"{self.path}{where}: unsupported encoding: {what}")


def which(enc: object, ctx: DecodeContext) -> str:
    kind = enc.WhichOneof("compression")  # type: ignore[attr-defined]
    if kind is None:
        raise ctx.corrupt("empty CompressiveEncoding")
    return kind


# --------------------------------------------------------------------------------------------
# Device planning (the encodings' ``gpu_plan`` modules)


class DeviceUnsupported(Exception):  # noqa: N818 (the planner's name for it is ``Unsupported``)
    """A page (or type) the GPU decoder has no kernel for; the field is read on the CPU.

    Raised by the encodings' device planning (``<name>.gpu_plan``) with the reason, and by
    :mod:`lance_gpu.gpu.plan` (which knows it as ``Unsupported``): never an error of the
    file, which the CPU reader then decodes or refuses."""


class DeviceLeaf(Protocol):
    """What the device planning of an encoding reads of the leaf a page decodes into:
    ``kind`` ``"fixed"`` | ``"bool"`` | ``"var"`` and ``width`` (bytes per value; one per
    item for booleans; 0 for variable width) as ``lance_gpu.gpu.plan.leaf_kind`` gives
    them, and its ``arrow_type`` (messages)."""

    @property
    def kind(self) -> str: ...
    @property
    def width(self) -> int: ...
    @property
    def arrow_type(self) -> Any: ...


class WorkList(Protocol):
    """One kernel family's work list in a read unit: append-only int64 columns, each
    :meth:`add` appending rows (every column an array of ``n`` values or one value for all)."""

    def add(self, **cols: Any) -> None: ...


class DeviceStage(Protocol):
    """A unit's staging area: :meth:`add_bytes` stages host bytes and returns their arena byte."""

    def add_bytes(self, data: np.ndarray) -> int: ...


class DeviceUnit(Protocol):
    """What an encoding's page-kind emission (its ``gpu_plan``'s ``emit_*`` / ``stage_*``)
    writes into a read unit (``lance_gpu.gpu.plan.UnitPlan``): the work lists of the kernel
    families, by destination (``"fixed"``: the fixed-width arena; ``"level"``: the u16 level
    arena; ``"index<bits>"``: dictionary index scratch) and word bits where a family is split
    so; positions are arena bytes (sources) and destination bytes / items / slots as each
    list's docstring in ``UnitPlan`` says."""

    @property
    def stage(self) -> DeviceStage: ...
    @property
    def copy_fixed(self) -> WorkList: ...
    @property
    def copy_level(self) -> WorkList: ...
    @property
    def copy_index(self) -> Mapping[int, WorkList]: ...
    @property
    def bits(self) -> WorkList: ...
    @property
    def var_chunks(self) -> WorkList: ...
    @property
    def fsst(self) -> list[tuple[int, int, int, int]]: ...
    @property
    def fsst_tables(self) -> dict[object, tuple[int, int]]: ...
    @property
    def fsst_rows(self) -> dict[int, np.ndarray]: ...

    def unpack_list(self, dest: str, bits: int) -> WorkList: ...
    def add_rle(self, bits: int, dest: str, **cols: Any) -> None: ...


def refuse_values(name: str, leaf: DeviceLeaf) -> DeviceUnsupported:
    """Why the device does not decode a mini-block page's values encoded ``name`` (a
    ``CompressiveEncoding`` field) for ``leaf``: no string kernel (variable-width leaves) or
    no value kernel for it."""
    return DeviceUnsupported(f"{name} strings" if leaf.kind == "var" else f"{name} values in mini-block pages")


def one_chunk_buffer(nbuf: int) -> None:
    """Raise :class:`DeviceUnsupported` unless a mini-block page's values take one chunk
    buffer (every encoding the device decodes but RLE's two and item-validity fixed-size lists' two)."""
    if nbuf != 1:
        raise DeviceUnsupported(f"mini-block page with {nbuf} buffers")


# --------------------------------------------------------------------------------------------
# Encoder side (writers)


@dataclass(slots=True)
class MiniBlockChunks:
    """What a mini-block compressor produces: the values of a page cut into chunks.

    ``counts[i]`` values sit in chunk i (a power of two, except in the last chunk).
    ``buffers`` holds one ``(data, sizes)`` pair per per-chunk buffer (RLE would use two):
    ``data`` is the concatenation of that buffer over all chunks and ``sizes[i]`` the size
    of chunk i's part, as recorded in its chunk header.  ``encoding`` is the
    ``CompressiveEncoding`` that describes the values.
    """

    counts: np.ndarray
    buffers: list[tuple[np.ndarray, np.ndarray]]
    encoding: CompressiveEncoding

    @property
    def log2_counts(self) -> np.ndarray:
        """log2 of each chunk's value count, 0 for the last chunk (the chunk-metadata rule)."""
        out = np.zeros(self.counts.size, np.int64)
        if self.counts.size > 1:
            out[:-1] = np.log2(self.counts[:-1]).astype(np.int64)
        return out
