# SPDX-License-Identifier: Apache-2.0
"""The Lance v2 data-file container (file versions 2.0 to 2.3).

File order::

    data buffers (pages, column buffers; each 64-byte aligned by pylance)
    global buffers (buffer 0 = lance.file.FileDescriptor)
    column metadata (one lance.file.v2.ColumnMetadata per column, back to back)   <- A
    column-metadata offset table: per column  u64 position, u64 size            <- B
    global-buffer offset table:   per buffer  u64 position, u64 size            <- C
    footer, 40 bytes LE: u64 A | u64 B | u64 C | u32 num_global_buffers |
                         u32 num_columns | u16 major | u16 minor | "LANC"

Footer versions: (0, 3) and (2, 0) are file version 2.0; (2, 1), (2, 2), (2, 3) as named;
(0, <=2) is the legacy v1 layout, whose footer is only 16 bytes (read by
:mod:`lance_gpu.file.legacy`).
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast, overload

import numpy as np
from google.protobuf.any_pb2 import Any
from google.protobuf.message import DecodeError

from lance_gpu._proto import file2_pb2, file_pb2
from lance_gpu.cpu import native
from lance_gpu.errors import (
    CorruptFileError,
    LegacyFormatError,
    MissingFileError,
    ObjectNotFoundError,
    UnsupportedEncodingError,
)
from lance_gpu.io.resolve import resolve
from lance_gpu.io.store import COALESCE_GAP, ObjectStore, ReadHandle, open_with_tail
from lance_gpu.protobuf import check_strict

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")

MAGIC = b"LANC"
FOOTER_SIZE = 40
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
# How much of the file's tail to read at once: usually footer, tables and metadata.
TAIL_READ = 256 * 1024


@dataclass(frozen=True, slots=True)
class FileVersion:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


_VERSIONS = (FileVersion(2, 0), FileVersion(2, 1), FileVersion(2, 2))


def file_version_from_footer(major: int, minor: int, path: object) -> FileVersion:
    if major == 0 and minor <= 2:
        msg = (
            f"{path}: legacy Lance file format (footer version {major}.{minor}, "
            "written as data_storage_version='legacy' / 0.1): single legacy files are not opened by this reader "
            "(legacy datasets are read through their manifests, lance_gpu.file.legacy)"
        )
        raise LegacyFormatError(msg)  # an OSError, as pylance's reader raises
    if (major, minor) in ((0, 3), (2, 0)):
        return _VERSIONS[0]
    if major == 2 and minor in (1, 2):
        return _VERSIONS[minor]
    if major == 2 and minor == 3:
        msg = f"{path}: Lance file version 2.3 (unstable, PlanarLayout pages) is not supported"
        raise UnsupportedEncodingError(msg)
    raise CorruptFileError(path, f"unknown file version {major}.{minor} in the footer")


@dataclass(slots=True)
class PageInfo:
    """One page of one column: where its buffers are and how it is encoded."""

    buffer_offsets: tuple[int, ...]
    buffer_sizes: tuple[int, ...]
    num_rows: int
    first_row: int  # the page's ``priority``: index of its first top-level row in the file
    encoding: Any  # google.protobuf.Any (type_url dispatches the decoder)


@dataclass(slots=True)
class ColumnInfo:
    index: int
    pages: list[PageInfo]
    buffer_offsets: tuple[int, ...]
    buffer_sizes: tuple[int, ...]
    encoding: Any | None
    #: Rows of all its pages together (the file's rows, in a sound file).
    num_rows: int = 0


def unpack_encoding(enc: file2_pb2.Encoding, path: object, what: str) -> Any | None:
    """Return the ``google.protobuf.Any`` an ``Encoding`` carries directly."""
    kind = enc.WhichOneof("location")
    if kind is None or kind == "none":
        return None
    if kind == "indirect":
        msg = f"{path}: {what} uses a deferred (indirect) encoding, which is not supported"
        raise UnsupportedEncodingError(msg)
    anymsg = Any()
    try:
        anymsg.ParseFromString(enc.direct.encoding)
    except DecodeError as exc:
        raise CorruptFileError(path, f"{what}: bad encoding protobuf ({exc})") from exc
    check_strict(anymsg, path, what)
    return anymsg


class SharedParses(Generic[K, V]):
    """Parsed metadata shared by the bytes it was parsed from: every value is a function of
    its key alone (bytes, plus whatever the vetting depended on) and is never modified, so
    the many small files of a history of appends, written alike, parse and vet each distinct
    message once.  At most ``limit`` entries; cleared when full (the distinct ones are few).
    Racing threads may parse the same key twice: either result is kept."""

    __slots__ = ("_entries", "limit")

    def __init__(self, limit: int = 4096) -> None:
        self._entries: dict[K, V] = {}
        self.limit = limit

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        return self._entries.get(key, default)

    def put(self, key: K, value: V) -> V:
        entries = self._entries
        if len(entries) >= self.limit:
            entries.clear()
        entries[key] = value
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _offset_pairs(raw: bytes, count: int) -> tuple[tuple[int, int], ...]:
    """An offset table (``count`` little-endian ``(position u64, size u64)`` pairs) as ints."""
    flat = struct.unpack(f"<{2 * count}Q", raw)
    return tuple(zip(flat[0::2], flat[1::2], strict=True))


class MappedHandle(Protocol):
    """A :class:`~lance_gpu.io.store.ReadHandle` of a memory-mapped local file
    (:mod:`lance_gpu.io.local`): ``mapped`` is the whole file as a read-only ``uint8`` view
    (None when not mapped), and reads served from it are recorded in the store's counters
    with ``count_reads``.  Other stores' handles have neither: callers test
    ``getattr(io, "mapped", None)`` first, then use the handle as one of these."""

    @property
    def mapped(self) -> np.ndarray | None: ...

    def count_reads(self, requests: int, nbytes: int) -> None: ...


class ScatterHandle(Protocol):
    """A :class:`~lance_gpu.io.store.ReadHandle` that reads a run of the file's bytes
    straight into scattered memory ranges (a local file: ``preadv``; see
    :meth:`lance_gpu.io.local.LocalFile.read_scattered`), returning False where it
    cannot.  Other stores' handles lack it: callers test
    ``getattr(io, "read_scattered", None)`` first."""

    def read_scattered(self, offset: int, targets: np.ndarray) -> bool: ...


class FileMetadata:
    """What a data file's tail says -- footer, offset tables, column metadata, the
    ``FileDescriptor`` -- parsed once, plus what decoders derive from the pages
    (:attr:`page_meta`).  Independent of any open handle: it holds copies of the metadata
    bytes, never a view of a mapped file, so it outlives the reader that parsed it.

    Invariant: everything here is a function of the file's bytes; a :class:`LanceFileReader`
    adopts a cached instance only for a handle whose :attr:`~lance_gpu.io.ReadHandle.identity`
    (the file's exact state) matches the one it was parsed from (:func:`file_metadata`).
    Lazily parsed parts (columns, the descriptor, ``page_meta`` entries) may be computed
    twice by racing threads; both results are equal, either is kept.
    """

    __slots__ = ("_cmo", "_columns", "_descriptor", "_descriptor_bytes", "_gbo", "_meta", "_meta_start", "_page_meta", "file_size", "num_columns", "num_global_buffers", "path", "version")

    #: the descriptor's bytes, when the tail holds them (else read through a handle)
    _descriptor_bytes: bytes | None
    #: Parsed columns by index; shared by the files written alike (a function of the
    #: bytes of the shared key and the file size alone).
    _columns: dict[int, ColumnInfo]

    def __init__(self, path: str, size: int, tail_arr: np.ndarray, read: Callable[[int, int], np.ndarray]) -> None:
        """Parse the file's tail (``tail_arr``: its last bytes; ``read(offset, size)``
        fetches anything before them); raises :class:`CorruptFileError` naming ``path``."""
        self.path = path
        self.file_size = size
        if size < FOOTER_SIZE:
            # A legacy file may still be this small; check its 16-byte footer's version first.
            if size >= 16:
                tail16 = tail_arr[-16:].tobytes()
                if tail16[-4:] == MAGIC:
                    major, minor = struct.unpack_from("<HH", tail16, 8)
                    file_version_from_footer(major, minor, path)
            raise CorruptFileError(path, f"file of {size} bytes is too small for a Lance footer")
        tail_start = size - tail_arr.size
        tail = tail_arr.data  # memoryview(tail_arr): no copy yet: only the metadata section is kept (copied)
        if tail[-4:] != MAGIC:
            raise CorruptFileError(path, "missing LANC magic at the end of the file")
        major, minor = struct.unpack_from("<HH", tail, len(tail) - 8)
        self.version = file_version_from_footer(major, minor, path)
        a, b, c, ngb, ncols = struct.unpack_from("<QQQII", tail, len(tail) - FOOTER_SIZE)
        footer_start = size - FOOTER_SIZE
        if not (a <= b <= c <= footer_start) or c + 16 * ngb > footer_start or b + 16 * ncols > c:
            raise CorruptFileError(path, "footer offsets are inconsistent with the file size")
        self.num_columns = ncols
        self.num_global_buffers = ngb
        self._page_meta: dict[tuple[int, int, str], object] | None = None
        self._descriptor: file_pb2.FileDescriptor | None = None
        # Files written alike (same size; same bytes from the descriptor or the metadata
        # section, whichever comes first, to the end) share everything parsed below.
        shared_key = None
        start = a
        if ngb and c >= tail_start:
            start = min(a, struct.unpack_from("<Q", tail, c - tail_start)[0])
        if tail_start <= start and size - start <= SHARED_FOOTER_BYTES:
            shared_key = (size, start, bytes(tail[start - tail_start :]))
            shared = _SHARED_FOOTERS.get(shared_key)
            if shared is not None:
                self._cmo, self._gbo, self._meta, self._meta_start, self._descriptor_bytes, self._columns = shared
                return

        def grab(off: int, n: int) -> bytes:
            if off >= tail_start:
                return bytes(tail[off - tail_start : off - tail_start + n])
            return read(off, n).tobytes()

        cmo = _offset_pairs(grab(b, 16 * ncols), ncols)
        gbo = _offset_pairs(grab(c, 16 * ngb), ngb)
        if ncols and (max(pos + n for pos, n in cmo) > b or min(pos for pos, _ in cmo) < a):
            raise CorruptFileError(path, "column metadata offsets point outside the metadata section")
        if ngb and max(pos + n for pos, n in gbo) > size:
            raise CorruptFileError(path, "global buffer offsets point outside the file")
        self._cmo = cmo
        self._gbo = gbo
        self._meta = grab(a, b - a)
        self._meta_start = a
        self._descriptor_bytes = None
        if ngb and gbo[0][0] >= tail_start:
            self._descriptor_bytes = grab(*gbo[0])
        global footer_parses
        footer_parses += 1
        self._columns = {}
        if shared_key is not None:
            _SHARED_FOOTERS.put(shared_key, (cmo, gbo, self._meta, a, self._descriptor_bytes, self._columns))

    @property
    def page_meta(self) -> dict[tuple[int, int, str], object]:
        """Per-page metadata derived by decoders, kept for repeated reads: (column, page,
        kind) -> value (parsed layouts, mini-block chunk tables; no page bytes); made on
        first use."""
        meta = self._page_meta
        if meta is None:
            meta = self._page_meta = {}
        return meta

    @property
    def known_rows(self) -> int | None:
        """The file's row count when its descriptor was parsed already, else None."""
        fd = self._descriptor
        return None if fd is None else int(fd.length)

    def descriptor(self, read: Callable[[int, int], np.ndarray]) -> file_pb2.FileDescriptor:
        """Global buffer 0: the file's schema and row count (``read`` fetches its bytes
        when the tail did not hold them)."""
        fd = self._descriptor
        if fd is not None:
            return fd
        if self.num_global_buffers == 0:
            raise CorruptFileError(self.path, "no global buffers (missing FileDescriptor)")
        pos, size = self._gbo[0]
        raw = self._descriptor_bytes if self._descriptor_bytes is not None else read(pos, size).tobytes()
        shared = _SHARED_DESCRIPTORS.get(raw) if size <= SHARED_METADATA_BYTES else None
        if shared is None:
            fd = file_pb2.FileDescriptor()
            try:
                fd.ParseFromString(raw)
            except DecodeError as exc:
                raise CorruptFileError(self.path, f"bad FileDescriptor protobuf ({exc})") from exc
            check_strict(fd, self.path, "FileDescriptor")
            if size <= SHARED_METADATA_BYTES:
                _SHARED_DESCRIPTORS.put(raw, fd)
            shared = fd
        self._descriptor = shared
        return shared

    def column(self, index: int) -> ColumnInfo:
        col = self._columns.get(index)
        if col is not None:
            return col
        if not 0 <= index < self.num_columns:
            raise CorruptFileError(self.path, f"column index {index} out of range ({self.num_columns} columns)")
        pos, size = self._cmo[index]
        start = pos - self._meta_start
        raw = self._meta[start : start + size]
        shared_key = (index, self.file_size, raw) if size <= SHARED_METADATA_BYTES else None
        if shared_key is not None:
            col = _SHARED_COLUMNS.get(shared_key)
            if col is not None:
                self._columns[index] = col
                return col
        col = self._parse_column(index, raw)
        if shared_key is not None:
            _SHARED_COLUMNS.put(shared_key, col)
        self._columns[index] = col
        return col

    def _parse_column(self, index: int, raw: bytes) -> ColumnInfo:
        """Column ``index`` from its ``ColumnMetadata`` bytes ``raw``, vetted against the
        file's size (a function of ``index``, ``raw`` and the size alone)."""
        global column_parses
        column_parses += 1
        cm = file2_pb2.ColumnMetadata()
        try:
            cm.ParseFromString(raw)
        except DecodeError as exc:
            raise CorruptFileError(self.path, f"bad ColumnMetadata protobuf for column {index} ({exc})") from exc
        check_strict(cm, self.path, f"ColumnMetadata of column {index}")
        pages = []
        file_size = self.file_size
        for p in cm.pages:
            offs = tuple(int(x) for x in p.buffer_offsets)
            sizes = tuple(int(x) for x in p.buffer_sizes)
            if len(offs) != len(sizes) or any(o + s > file_size for o, s in zip(offs, sizes)):
                raise CorruptFileError(self.path, f"page buffers of column {index} lie outside the file")
            enc = unpack_encoding(p.encoding, self.path, f"page of column {index}")
            if enc is None:
                raise CorruptFileError(self.path, f"page of column {index} has no encoding")
            pages.append(PageInfo(offs, sizes, int(p.length), int(p.priority), enc))
        column_encoding = unpack_encoding(cm.encoding, self.path, f"column {index}")
        if column_encoding is not None and column_encoding.type_url != COLUMN_ENCODING_URL:
            # pylance refuses any other message here ("unexpected type URL")
            raise CorruptFileError(self.path, f"column {index}: column encoding of unexpected type {column_encoding.type_url!r}")
        buffer_offsets = tuple(int(x) for x in cm.buffer_offsets)
        buffer_sizes = tuple(int(x) for x in cm.buffer_sizes)
        if len(buffer_offsets) != len(buffer_sizes) or any(o + s > file_size for o, s in zip(buffer_offsets, buffer_sizes)):
            raise CorruptFileError(self.path, f"column buffers of column {index} lie outside the file")
        return ColumnInfo(index, pages, buffer_offsets, buffer_sizes, column_encoding, sum(p.num_rows for p in pages))


#: Parsed columns shared by every file whose column of that index has the same
#: ``ColumnMetadata`` bytes and whose size is the same (so the same vetting holds): files
#: written alike -- the many small files of a history of appends -- carry a handful of
#: distinct ones (8 of 4,000 on 1,000 appends of 16 rows), parsed and checked once.  A
#: :class:`ColumnInfo` and its pages are never modified after parsing.
_SHARED_COLUMNS: SharedParses[tuple[int, int, bytes], ColumnInfo] = SharedParses()
#: Parsed (and vetted) ``FileDescriptor`` messages by their bytes: files of one schema and
#: row count carry the same.
_SHARED_DESCRIPTORS: SharedParses[bytes, file_pb2.FileDescriptor] = SharedParses()
#: The largest metadata message shared, in bytes.
SHARED_METADATA_BYTES = 4096
#: Parsed file tails (offset tables, metadata section, descriptor bytes, the parsed-columns
#: dict) by (file size, where the shared bytes start, those bytes to the end of the file).
_SHARED_FOOTERS: SharedParses[tuple[int, int, bytes], tuple] = SharedParses()
#: The longest tail shared, in bytes.
SHARED_FOOTER_BYTES = 16 * 1024
#: File tails parsed in this process (not found shared; tests pin the sharing).
footer_parses = 0
#: ``ColumnMetadata`` messages parsed in this process (tests pin the sharing).
column_parses = 0

#: Files whose :class:`FileMetadata` is kept for the process (least recently opened first
#: out); entries are small (the metadata section, parsed columns and page layouts, chunk
#: tables of pages read by takes).
METADATA_CACHE_FILES = 1024
_metadata_cache: OrderedDict[Hashable, FileMetadata] = OrderedDict()
_metadata_lock = threading.Lock()
#: How many entries of the cache each file path has (any state): a path absent here was
#: never parsed, and :func:`cached_metadata` knows so without a ``stat``.
_cached_paths: dict[str, int] = {}
#: Footers parsed (cache misses) in this process: tests pin that re-opening a file parses nothing.
metadata_parses = 0


def file_metadata(io: ReadHandle, tail_arr: np.ndarray) -> FileMetadata:
    """The parsed metadata of the file open as ``io`` (its last bytes ``tail_arr``): from
    the process-wide cache when the handle names its exact state (``io.identity``, e.g.
    device, inode, size and change times of a local file), else parsed (and cached under
    that identity).  Handles without an identity (object stores) always parse."""
    global metadata_parses
    identity = getattr(io, "identity", None)
    if identity is not None:
        with _metadata_lock:
            meta = _metadata_cache.get(identity)
            if meta is not None:
                _metadata_cache.move_to_end(identity)
                return meta
    meta = FileMetadata(io.path, io.size, tail_arr, io.read)
    metadata_parses += 1
    if identity is not None:
        with _metadata_lock:
            if identity not in _metadata_cache:
                _cached_paths[meta.path] = _cached_paths.get(meta.path, 0) + 1
            _metadata_cache[identity] = meta
            while len(_metadata_cache) > METADATA_CACHE_FILES:
                _, gone = _metadata_cache.popitem(last=False)
                left = _cached_paths.pop(gone.path) - 1
                if left:
                    _cached_paths[gone.path] = left
    return meta


def cached_metadata(store: ObjectStore, path: str) -> FileMetadata | None:
    """The cached :class:`FileMetadata` of the file at ``path`` when this process parsed its
    current state before, found without opening it (stores that tell a file's identity
    from a ``stat``: local files); else None."""
    if path not in _cached_paths:
        return None  # no state of this file was parsed: no stat needed to tell
    identity_of = getattr(store, "identity", None)
    identity = identity_of(path) if identity_of is not None else None
    if identity is None:
        return None
    with _metadata_lock:
        return _metadata_cache.get(identity)


def clear_metadata_cache() -> None:
    """Forget every cached :class:`FileMetadata` (tests; memory)."""
    with _metadata_lock:
        _metadata_cache.clear()
        _cached_paths.clear()
        _SHARED_COLUMNS.clear()
        _SHARED_DESCRIPTORS.clear()
        _SHARED_FOOTERS.clear()


class LanceFileReader:
    """Reads the structure of one v2 data file and byte ranges out of it: an open handle
    (:attr:`io`) and the file's :class:`FileMetadata` (shared by every reader of the same
    file state in the process)."""

    __slots__ = ("_page_cache", "io", "key", "meta", "num_columns", "num_global_buffers", "path", "store", "version")

    def __init__(self, path: str | os.PathLike[str], store: ObjectStore | None = None) -> None:
        """Open the data file at key ``path`` of ``store`` (None: the local file system,
        ``path`` a file path).  The file's tail -- footer, offset tables and usually all
        column metadata -- is fetched with the size in one request, and parsed unless this
        process parsed the same file (same identity) before."""
        if store is None:

            store, path = resolve(path)
        self.store = store
        self.key = os.fspath(path)
        self.io: ReadHandle
        try:
            self.io, tail_arr = open_with_tail(store, self.key, TAIL_READ)
        except ObjectNotFoundError as exc:
            # a FileNotFoundError that is also a CorruptFileError (ValueError), as a missing
            # deletion file: pylance raises OSError or ValueError here depending on the call
            raise MissingFileError(exc.uri, "data file does not exist") from exc
        self.path = self.io.path
        self.meta = file_metadata(self.io, tail_arr)
        self.version = self.meta.version
        self.num_columns = self.meta.num_columns
        self.num_global_buffers = self.meta.num_global_buffers
        #: The last page read per column (:meth:`page_buffers`), made on first use.
        self._page_cache: dict[int, tuple[tuple[int, int], list[np.ndarray]]] | None = None

    def close(self) -> None:
        self.io.close()

    @property
    def page_meta(self) -> dict[tuple[int, int, str], object]:
        """Per-page metadata derived by decoders (the file's, shared): see :class:`FileMetadata`."""
        return self.meta.page_meta

    @property
    def descriptor(self) -> file_pb2.FileDescriptor:
        """Global buffer 0: the file's schema and row count."""
        return self.meta.descriptor(self.io.read)

    @property
    def num_rows(self) -> int:
        return int(self.descriptor.length)

    def column(self, index: int) -> ColumnInfo:
        return self.meta.column(index)

    def global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0 is the ``FileDescriptor``; index files
        keep protobufs and tensors in the others, named by their schema metadata)."""
        if not 0 <= index < self.num_global_buffers:
            raise CorruptFileError(self.path, f"global buffer {index} out of range ({self.num_global_buffers} buffers)")
        pos, size = self.meta._gbo[index]
        return self.io.read(pos, size).tobytes()

    def prefetch(self, columns: list[int]) -> None:
        """Fetch every buffer of ``columns`` (pages and column buffers) ahead of decoding,
        coalesced and concurrently, where the store's handle supports it (object stores;
        local memory maps need nothing)."""
        fetch = getattr(self.io, "prefetch", None)
        if fetch is None:
            return
        ranges: list[tuple[int, int]] = []
        for index in columns:
            col = self.column(index)
            ranges.extend(zip(col.buffer_offsets, col.buffer_sizes))
            for page in col.pages:
                ranges.extend(zip(page.buffer_offsets, page.buffer_sizes))
        fetch(ranges)

    @property
    def mapped(self) -> np.ndarray | None:
        """The whole file as a read-only ``uint8`` view of its memory map (None when the
        file is not mapped); :meth:`read_buffers` of a mapped file returns views of it."""
        return getattr(self.io, "mapped", None)

    def needs_request(self, offset: int, size: int) -> bool:
        """Whether reading ``[offset, offset + size)`` would be a request to an object store
        (False for memory-mapped local files and for bytes already fetched)."""
        check = getattr(self.io, "needs_request", None)
        return bool(check(offset, size)) if check is not None else False

    def read_buffers(self, ranges: list[tuple[int, int]]) -> list[np.ndarray]:
        return self.io.read_ranges(ranges)

    def read_gather(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The byte ranges ``[starts[i], starts[i] + lengths[i])`` (int64, ``starts``
        ascending) of the file, back to back in one array.

        Ranges closer than the store's coalescing gap (``coalesce_gap`` of the handle) are
        fetched as one request; the
        grouping is computed vectorised, so thousands of small ranges (a take's rows of a
        full-zip page) cost a few requests' worth of Python work.
        """
        if starts.size == 0:
            return np.zeros(0, np.uint8)
        if starts.size > 1 and bool(np.any(np.diff(starts) < 0)):
            raise ValueError("read_gather needs ascending range starts")
        if starts.size > 1:
            # Ranges that abut (consecutive rows of a page) are one range: one copy instead
            # of one per row, and a contiguous row run of a mapped file is a view of it.
            ends = starts + lengths
            joins = starts[1:] == ends[:-1]
            if bool(joins.any()):
                first = np.flatnonzero(np.concatenate(([True], ~joins)))
                group_end = np.append(ends[first[1:] - 1], ends[-1])
                starts, lengths = starts[first], group_end - starts[first]
        whole = getattr(self.io, "mapped", None)
        if whole is not None:
            # A memory-mapped local file: gather straight out of the map.
            if int(starts[0]) < 0 or int(lengths.min()) < 0 or int((starts + lengths).max()) > whole.size:
                raise CorruptFileError(self.path, "byte ranges lie outside the file")
            cast(MappedHandle, self.io).count_reads(int(starts.size), int(lengths.sum()))  # it has a map
            if starts.size == 1:
                return whole[int(starts[0]) : int(starts[0] + lengths[0])]
            return native.gather_ranges(whole, starts, lengths)
        ends = starts + lengths
        reach = np.maximum.accumulate(ends)
        new_group = np.empty(starts.size, bool)
        new_group[0] = True
        new_group[1:] = starts[1:] - reach[:-1] > getattr(self.io, "coalesce_gap", COALESCE_GAP)
        first = np.flatnonzero(new_group)
        last = np.append(first[1:], starts.size) - 1
        g_start = starts[first]
        g_end = reach[last]
        blocks = self.io.read_ranges(list(zip(g_start.tolist(), (g_end - g_start).tolist(), strict=True)))
        joined = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        # Where each group begins in ``joined``; each range is read relative to its group.
        g_pos = np.zeros(first.size, np.int64)
        np.cumsum((g_end - g_start)[:-1], out=g_pos[1:])
        group_of = np.cumsum(new_group) - 1
        pos = g_pos[group_of] + (starts - g_start[group_of])
        if first.size == starts.size and np.array_equal(lengths, g_end - g_start):
            return joined
        return native.gather_ranges(joined, pos, lengths)

    def page_buffers(self, column: int, page_index: int) -> list[np.ndarray]:
        """The buffers of one page, keeping the last page read per column.

        Streaming and take read neighbouring rows of a page many times; the cache holds at
        most one (encoded) page per column.
        """
        key = (column, page_index)
        cache = self._page_cache
        if cache is None:
            cache = self._page_cache = {}
        hit = cache.get(column)
        if hit is not None and hit[0] == key:
            return hit[1]
        page = self.column(column).pages[page_index]
        bufs = self.io.read_ranges(list(zip(page.buffer_offsets, page.buffer_sizes)))
        cache[column] = (key, bufs)
        return bufs
