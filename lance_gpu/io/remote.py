# SPDX-License-Identifier: Apache-2.0
"""Object stores through obstore (the Rust ``object_store`` crate pylance itself uses), and
fsspec file systems.

:class:`ObstoreStore` keys are object keys inside the bucket / container the obstore store
was built for.  Ranged reads of one object are coalesced (gaps up to
:data:`REMOTE_COALESCE_GAP`) and sent as concurrent requests by
``obstore.get_ranges``; a tail read is one suffix-range GET that also reports the size.
``put_if_absent`` is ``put(mode="create")`` (S3 ``If-None-Match: *``, GCS
``ifGenerationMatch=0``, Azure ``If-None-Match``); stores that cannot do it answer
``supports_conditional_put = False`` and commits refuse them.
"""

from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from lance_gpu.errors import CorruptFileError
from lance_gpu.io._errors import translate
from lance_gpu.io.local import STAGING_PREFIX
from lance_gpu.io.store import (
    BufferedWriter,
    ObjectMeta,
    StoreFile,
    StoreStats,
    byte_view,
    check_ranges,
    coalesce,
    copy_into,
    split_groups,
)
from lance_gpu.io.uploads import Upload, abort_upload, list_uploads, make_client

__all__ = ["REMOTE_COALESCE_GAP", "FsspecStore", "ObstoreStore"]


#: Object stores read ranges closer than this with one request: a request costs about as
#: much as transferring a megabyte (S3's first-byte latency against its per-connection
#: bandwidth; also moto's per-request work on loopback), the coalescing gap object_store uses.
REMOTE_COALESCE_GAP = 1 << 20

#: Objects at least this large are uploaded in :data:`PART_SIZE` parts, concurrently.
MULTIPART_ABOVE = 12 << 20
PART_SIZE = 6 << 20


def _fsspec_mtime(info: dict[str, Any]) -> _dt.datetime | None:
    """The modification time in an fsspec ``info`` dict, as UTC (file systems name it
    differently: ``mtime`` local / memory, ``LastModified`` s3fs, ``updated`` gcsfs,
    ``last_modified`` adlfs); ``None`` when the file system reports none."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            return value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        if isinstance(value, int | float):
            return _dt.datetime.fromtimestamp(value, _dt.UTC)
        try:
            parsed = _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            continue
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.UTC)
    return None


def _array(buf: Any) -> np.ndarray:
    return np.frombuffer(memoryview(buf), dtype=np.uint8)


class ObstoreStore:
    """An obstore store (``S3Store``, ``GCSStore``, ``AzureStore``, ``MemoryStore``,
    ``HTTPStore``, ``LocalStore``...) as an :class:`~lance_gpu.io.store.ObjectStore`.

    Parameters
    ----------
    store : obstore store
        The obstore store; keys are relative to it.
    base_uri : str
        URI of the store's top (``s3://bucket``), used to name objects in errors.
    conditional_put : bool, default True
        Whether ``put(mode="create")`` is atomic on this store.
    writable : bool, default True
        False for read-only stores (HTTP).
    whole_object_below : int, default 4 MiB
        Data files up to this size are fetched whole on first read (one request for all
        their columns); larger ones by coalesced, concurrent range requests.
    coalesce_gap : int, default :data:`REMOTE_COALESCE_GAP`
        Ranges of one object at most this far apart are fetched with one request.
    """

    def __init__(
        self,
        store: Any,
        base_uri: str,
        *,
        conditional_put: bool = True,
        writable: bool = True,
        whole_object_below: int = 4 << 20,
        coalesce_gap: int = REMOTE_COALESCE_GAP,
    ) -> None:
        self.store = store
        self.coalesce_gap = coalesce_gap
        self.whole_object_below = whole_object_below
        self.base_uri = base_uri.rstrip("/")
        self.supports_conditional_put = conditional_put
        self.writable = writable
        self.stats = StoreStats()
        #: Whether suffix-range GETs work (Azure has none: read_tail then heads first).
        self._suffix_ranges = type(store).__name__ != "AzureStore"
        #: ``(bucket, obstore config)`` of an S3 store built from a URI: multipart uploads
        #: are listed and aborted with them (:mod:`lance_gpu.io.uploads`); None elsewhere.
        self.s3_bucket: tuple[str, dict[str, Any]] | None = None
        self._upload_client: Any = None

    def __repr__(self) -> str:
        return f"ObstoreStore({self.base_uri!r})"

    def __getstate__(self) -> dict:
        # obstore stores pickle themselves (config included); counters start afresh.
        return {k: v for k, v in self.__dict__.items() if k not in ("stats", "_upload_client")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.stats = StoreStats()
        self._upload_client = None

    def uri(self, path: str) -> str:
        return f"{self.base_uri}/{path.lstrip('/')}"

    def head(self, path: str) -> ObjectMeta:
        import obstore

        self.stats.add("heads")
        try:
            meta = obstore.head(self.store, path)
        except Exception as exc:
            raise translate(exc, self.uri(path), "head") from exc
        return ObjectMeta(path, int(meta["size"]), meta.get("last_modified"))

    def size(self, path: str) -> int:
        return self.head(path).size

    def exists(self, path: str) -> bool:
        try:
            self.head(path)
        except FileNotFoundError:
            return False
        return True

    def open(self, path: str) -> StoreFile:
        return StoreFile(self, path)

    def read_range(self, path: str, offset: int, length: int) -> np.ndarray:
        import obstore

        try:
            buf = obstore.get_range(self.store, path, start=offset, length=length)
        except Exception as exc:
            raise translate(exc, self.uri(path), "read") from exc
        self.stats.add_gets(1, length)
        out = _array(buf)
        if out.size != length:

            raise CorruptFileError(self.uri(path), f"short read: {out.size} of {length} bytes at offset {offset}")
        return out

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        import obstore

        if not ranges:
            return []
        groups = coalesce(ranges, self.coalesce_gap)
        starts = [s for s, _e, _ in groups]
        ends = [e for _s, e, _ in groups]
        try:
            # coalesce=0: we already merged; obstore then issues the groups concurrently.
            bufs = obstore.get_ranges(self.store, path, starts=starts, ends=ends, coalesce=0)
        except Exception as exc:
            raise translate(exc, self.uri(path), "read") from exc
        blocks = [_array(b) for b in bufs]
        self.stats.add_gets(len(groups), sum(b.size for b in blocks))
        for (s, e, _), b in zip(groups, blocks, strict=True):
            if b.size != e - s:

                raise CorruptFileError(self.uri(path), f"short read: {b.size} of {e - s} bytes at offset {s}")
        return split_groups(ranges, groups, blocks)

    def read_ranges_into(
        self, path: str, ranges: Sequence[tuple[int, int]], out: np.ndarray | memoryview, offsets: Sequence[int]
    ) -> None:
        """The ranges, coalesced and fetched concurrently as :meth:`read_ranges`, each copied
        from obstore's response buffer straight into ``out`` (no intermediate array)."""
        import obstore

        dst = byte_view(out)
        if len(ranges) != len(offsets):
            raise ValueError(f"{len(ranges)} ranges but {len(offsets)} output offsets")
        for (_off, n), at in zip(ranges, offsets, strict=True):
            if at < 0 or at + n > dst.size:
                raise ValueError(f"{n} bytes at {at} do not fit an output buffer of {dst.size} bytes")
        if not ranges:
            return
        groups = coalesce(ranges, self.coalesce_gap)
        try:
            bufs = obstore.get_ranges(
                self.store, path, starts=[s for s, _e, _ in groups], ends=[e for _s, e, _ in groups], coalesce=0
            )
        except Exception as exc:
            raise translate(exc, self.uri(path), "read") from exc
        got = 0
        for (start, end, idx), buf in zip(groups, bufs, strict=True):
            block = memoryview(buf)
            got += block.nbytes
            if block.nbytes != end - start:

                raise CorruptFileError(self.uri(path), f"short read: {block.nbytes} of {end - start} bytes at offset {start}")
            for i in idx:
                off, n = ranges[i]
                dst[offsets[i] : offsets[i] + n] = np.frombuffer(block, np.uint8, n, off - start)
        self.stats.add_gets(len(groups), got)

    def read_tail(self, path: str, length: int) -> tuple[np.ndarray, int]:
        """One suffix-range GET (it reports the size too); Azure Blob Storage has no suffix
        ranges, so there (and on any store that refuses one) a HEAD and a ranged GET."""
        import obstore
        from obstore.exceptions import NotSupportedError

        if self._suffix_ranges:
            try:
                res = obstore.get(self.store, path, options={"range": {"suffix": length}})
                data = _array(res.bytes())
                size = int(res.meta["size"])
            except NotSupportedError:
                self._suffix_ranges = False
            except Exception as exc:
                raise translate(exc, self.uri(path), "read") from exc
            else:
                self.stats.add_gets(1, data.size)
                return data, size
        size = self.size(path)
        n = min(size, length)
        return (self.read_range(path, size - n, n) if n else np.zeros(0, np.uint8)), size

    def get(self, path: str) -> bytes:
        import obstore

        try:
            data = bytes(obstore.get(self.store, path).bytes())
        except Exception as exc:
            raise translate(exc, self.uri(path), "read") from exc
        self.stats.add_gets(1, len(data))
        return data

    def put(self, path: str, data: bytes | memoryview) -> None:
        import obstore

        payload = bytes(data)
        try:
            if len(payload) >= MULTIPART_ABOVE:
                # large objects: parts uploaded concurrently (S3's minimum part is 5 MiB)
                obstore.put(self.store, path, payload, use_multipart=True, chunk_size=PART_SIZE, max_concurrency=8)
            else:
                obstore.put(self.store, path, payload)
        except Exception as exc:
            raise translate(exc, self.uri(path), "write") from exc
        self.stats.add("puts", 1, len(data))

    def put_if_absent(self, path: str, data: bytes | memoryview) -> None:
        import obstore

        try:
            obstore.put(self.store, path, bytes(data), mode="create")
        except Exception as exc:
            raise translate(exc, self.uri(path), "conditional put") from exc
        self.stats.add("puts", 1, len(data))

    def delete(self, path: str) -> None:
        import obstore

        self.stats.add("deletes")
        try:
            obstore.delete(self.store, path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise translate(exc, self.uri(path), "delete") from exc

    def has_objects(self, prefix: str) -> bool:
        """Whether any object lies beneath ``prefix``: one listing request of one key."""
        import obstore

        self.stats.add("lists")
        try:
            stream = obstore.list(self.store, prefix.rstrip("/") + "/" if prefix else None, chunk_size=1)
            return bool(next(iter(stream), None))
        except Exception as exc:
            raise translate(exc, self.uri(prefix), "list") from exc

    def list(self, prefix: str) -> list[ObjectMeta]:
        import obstore

        out: list[ObjectMeta] = []
        try:
            for chunk in obstore.list(self.store, prefix.rstrip("/") + "/" if prefix else None):
                self.stats.add("lists")
                for meta in chunk:
                    name = str(meta["path"]).rsplit("/", 1)[-1]
                    if not name.startswith(STAGING_PREFIX):
                        out.append(ObjectMeta(str(meta["path"]), int(meta["size"]), meta.get("last_modified")))
        except Exception as exc:
            raise translate(exc, self.uri(prefix), "list") from exc
        out.sort(key=lambda m: m.path)
        return out

    def list_uploads(self, prefix: str) -> builtins.list[Upload]:
        """Incomplete multipart uploads of keys beneath ``prefix`` (S3 stores built from a
        URI; none elsewhere): see :mod:`lance_gpu.io.uploads`."""
        if self.s3_bucket is None:
            return []
        self.stats.add("lists")
        return list_uploads(self._uploads_client(), self.s3_bucket[0], self.base_uri, prefix)

    def abort_upload(self, upload: Upload) -> None:
        """Abort one upload :meth:`list_uploads` found (its parts are deleted)."""
        client = self._uploads_client()
        if self.s3_bucket is None or client is None:
            return
        self.stats.add("deletes")
        abort_upload(client, self.s3_bucket[0], self.base_uri, upload)

    def _uploads_client(self) -> Any:
        if self._upload_client is None and self.s3_bucket is not None:
            self._upload_client = make_client(self.s3_bucket[1])
        return self._upload_client

    def sync(self, paths: Sequence[str]) -> None:
        """Uploaded objects are durable once visible: nothing to do."""

    def open_writer(self, path: str) -> StreamingWriter:
        return StreamingWriter(self, path)


class StreamingWriter:
    """A :class:`~lance_gpu.io.store.WriteHandle` that uploads while the caller writes: the
    first :data:`PART_SIZE` bytes are buffered; an object that stays below becomes one PUT
    on :meth:`close`, a larger one a multipart upload whose parts go out (up to 8 at once)
    as they fill, so a file's upload overlaps the encoding of its later pages.  The object
    appears only when :meth:`close` completes the upload; :meth:`abort` abandons it (parts
    already sent belong to an upload that is never completed, so nothing appears) and
    deletes the key in case it did."""

    def __init__(self, store: ObstoreStore, path: str) -> None:
        self.store = store
        self.path = path
        self._file: Any = None
        self._size = 0
        self._done = False

    def write(self, data: bytes | memoryview) -> int:
        import obstore

        n = memoryview(data).nbytes
        try:
            if self._file is None:
                self._file = obstore.open_writer(self.store.store, self.path, buffer_size=PART_SIZE, max_concurrency=8)
            self._file.write(data)
        except Exception as exc:
            raise translate(exc, self.store.uri(self.path), "write") from exc
        self._size += n
        return n

    def tell(self) -> int:
        return self._size

    def close(self, sync: bool = True) -> None:
        if self._done:
            return
        self._done = True
        if self._file is None:  # nothing written: an empty object
            self.store.put(self.path, b"")
            return
        try:
            self._file.close()
        except Exception as exc:
            raise translate(exc, self.store.uri(self.path), "write") from exc
        finally:
            self._file = None
        # requests: one PUT, or create + parts + complete
        parts = -(-self._size // PART_SIZE)
        self.store.stats.add("puts", 1 if parts <= 1 else parts + 2, self._size)

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._file = None
        self.store.delete(self.path)


class FsspecStore:
    """An fsspec file system as an :class:`~lance_gpu.io.store.ObjectStore` (keys are the
    file system's paths).  ``put_if_absent`` uses ``open(mode="xb")``, which is atomic only
    where the file system says so: pass ``conditional_put=True`` only for those."""

    def __init__(self, fs: Any, *, conditional_put: bool = False) -> None:
        self.fs = fs
        self.supports_conditional_put = conditional_put
        self.writable = True
        self.stats = StoreStats()
        self.coalesce_gap = REMOTE_COALESCE_GAP
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self._scheme = protocol
        #: The local file system's keys are absolute paths.
        self.absolute_keys = protocol in ("file", "local")

    def uri(self, path: str) -> str:
        return f"{self._scheme}://{path.lstrip('/')}" if self._scheme not in ("file", "local") else path

    def _call(self, action: str, path: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise translate(exc, self.uri(path), action) from exc

    def head(self, path: str) -> ObjectMeta:
        self.stats.add("heads")
        info = self._call("head", path, self.fs.info, path)
        if info.get("type") == "directory":
            raise translate(FileNotFoundError(path), self.uri(path), "head")
        return ObjectMeta(path, int(info["size"]), _fsspec_mtime(info))

    def size(self, path: str) -> int:
        return self.head(path).size

    def exists(self, path: str) -> bool:
        self.stats.add("heads")
        return bool(self._call("head", path, self.fs.isfile, path))

    def open(self, path: str) -> StoreFile:
        return StoreFile(self, path)

    def read_range(self, path: str, offset: int, length: int) -> np.ndarray:
        data = self._call("read", path, self.fs.cat_file, path, start=offset, end=offset + length)
        self.stats.add_gets(1, len(data))
        return np.frombuffer(data, np.uint8)

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray]:
        if not ranges:
            return []
        size = self.size(path)
        check_ranges(self.uri(path), size, ranges)
        groups = coalesce(ranges, self.coalesce_gap)
        blocks = [self.read_range(path, s, e - s) for s, e, _ in groups]
        return split_groups(ranges, groups, blocks)

    def read_ranges_into(
        self, path: str, ranges: Sequence[tuple[int, int]], out: np.ndarray | memoryview, offsets: Sequence[int]
    ) -> None:
        copy_into(self.read_ranges(path, ranges), out, offsets)

    def read_tail(self, path: str, length: int) -> tuple[np.ndarray, int]:
        size = self.size(path)
        n = min(size, length)
        return self.read_range(path, size - n, n), size

    def get(self, path: str) -> bytes:
        data = self._call("read", path, self.fs.cat_file, path)
        self.stats.add_gets(1, len(data))
        return bytes(data)

    def put(self, path: str, data: bytes | memoryview) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent:
            self._call("write", path, self.fs.makedirs, parent, exist_ok=True)
        self._call("write", path, self.fs.pipe_file, path, bytes(data))
        self.stats.add("puts", 1, len(data))

    def put_if_absent(self, path: str, data: bytes | memoryview) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent:
            self._call("write", path, self.fs.makedirs, parent, exist_ok=True)

        def create() -> None:
            with self.fs.open(path, "xb") as fh:
                fh.write(bytes(data))

        self._call("conditional put", path, create)
        self.stats.add("puts", 1, len(data))

    def delete(self, path: str) -> None:
        self.stats.add("deletes")
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise translate(exc, self.uri(path), "delete") from exc

    def has_objects(self, prefix: str) -> bool:
        """Whether ``prefix`` exists on the file system (a directory or objects beneath it)."""
        self.stats.add("heads")
        return bool(self._call("head", prefix, self.fs.exists, prefix))

    def list(self, prefix: str) -> list[ObjectMeta]:
        self.stats.add("lists")
        try:
            found = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise translate(exc, self.uri(prefix), "list") from exc
        out = [
            ObjectMeta(str(p), int(info.get("size", 0)), _fsspec_mtime(info))
            for p, info in found.items()
            if not str(p).rsplit("/", 1)[-1].startswith(STAGING_PREFIX)
        ]
        out.sort(key=lambda m: m.path)
        return out

    def sync(self, paths: Sequence[str]) -> None:
        """Uploaded objects are durable once visible: nothing to do."""

    def open_writer(self, path: str) -> BufferedWriter:
        return BufferedWriter(self, path)
