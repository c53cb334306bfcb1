# SPDX-License-Identifier: Apache-2.0
"""Reading manifests, listing versions and reading transaction files.

A manifest file (``_versions/*.manifest``) is a sequence of sections, each a u32 LE length
followed by that many protobuf bytes, and a 16-byte footer::

    [u32 len | lance.table.IndexSection]   optional; Manifest.index_section = its offset
    [u32 len | lance.table.Transaction]    optional; Manifest field 23 (else 21) = its offset
    [u32 len | lance.table.Manifest]
    u64 LE manifest_position | u16 LE major (0) | u16 LE minor (2) | b"LANC"

``manifest_position`` is the offset of the Manifest's u32 length prefix. Offsets are absolute.

Every function takes the dataset's ``(store, root)`` (:mod:`lance_gpu.io`) or a
``(store, key)`` of one file; nothing here touches the file system itself.

Version file names: V1 ``{version}.manifest``; V2 ``{u64::MAX - version:020}.manifest``
(20 digits, so the newest version sorts first); ``d{version}.manifest`` is a detached version
and staging files (``.tmp*``, ``name-uuid``) do not parse; both are ignored.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from google.protobuf.message import DecodeError

from lance_gpu._proto import table_pb2, transaction_pb2
from lance_gpu.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    NotADatasetError,
    UnsupportedFeatureError,
    VersionMissingError,
)
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.protobuf import check_strict
from lance_gpu.table.consistency import check_manifest
from lance_gpu.table.features import check_reader_flags
from lance_gpu.table.manifest_bytes import FragmentLayout

__all__ = [
    "DETACHED_VERSION_MASK",
    "MAGIC",
    "MANIFEST_FOOTER_SIZE",
    "U64_MAX",
    "VERSION_HINT",
    "ManifestFile",
    "NamingScheme",
    "VersionInfo",
    "detached_manifest_name",
    "latest_version",
    "list_versions",
    "load_manifest",
    "manifest_file_name",
    "manifest_message_bytes",
    "parse_manifest_bytes",
    "parse_manifest_message",
    "parse_version_file_name",
    "read_manifest",
    "read_manifest_file",
    "read_transaction_file",
    "read_version_hint",
    "remember_manifest",
    "resolve_manifest",
    "transaction_section_offset",
]

MAGIC = b"LANC"
MANIFEST_FOOTER_SIZE = 16
U64_MAX = (1 << 64) - 1
#: A detached version (``LanceDataset.commit(..., detached=True)``) has this bit set; its
#: manifest is ``_versions/d{version}.manifest`` and no listing ever returns it.
DETACHED_VERSION_MASK = 1 << 63
_FOOTER = struct.Struct("<QHH4s")
_LEN = struct.Struct("<I")
_V2_NAME_DIGITS = 20
#: ``_versions/`` entry where writers (pylance's and ours) record the latest version they
#: committed: ``{"version": N}``.  Only a hint: :func:`latest_version` checks it.
VERSION_HINT = "latest_version_hint.json"
#: Versions past a stale hint :func:`latest_version` checks one by one before it lists ``_versions/``.
_HINT_PROBES = 8

NamingScheme = Literal["V1", "V2"]


#: Serialises the first parse of a commit's manifest (:attr:`ManifestFile.manifest`).
_LAZY_PARSE_LOCK = threading.Lock()


class ManifestFile:
    """A parsed manifest file: the Manifest plus its optional inline sections.

    Built from a file read (``manifest`` parsed; its bytes kept as ``raw``, the Manifest
    message's bytes), or by a commit from what it wrote: ``layout``
    (:class:`~lance_gpu.table.manifest_bytes.FragmentLayout` of the Manifest message) and
    ``head`` (the Manifest without its fragments), the full ``manifest`` then parsed from
    the layout's bytes on first access only.  Immutable once built: every view is of the
    same bytes.
    """

    __slots__ = ("_head", "_layout", "_manifest", "_raw", "file_kinds", "fragment_id_bound",
                 "index_section", "path", "transaction")

    def __init__(
        self,
        path: str,
        manifest: table_pb2.Manifest | None = None,
        transaction: transaction_pb2.Transaction | None = None,
        index_section: table_pb2.IndexSection | None = None,
        fragment_id_bound: int | None = None,
        file_kinds: int | None = None,
        *,
        raw: bytes | memoryview | None = None,
        layout: FragmentLayout | None = None,
        head: table_pb2.Manifest | None = None,
    ) -> None:
        if manifest is None and (layout is None or head is None):
            raise ValueError("a ManifestFile needs its manifest, or its layout and head")
        self.path = path
        self._manifest = manifest
        self.transaction = transaction
        self.index_section = index_section
        #: The largest fragment id the manifest names, its ``max_fragment_id`` included (-1:
        #: none), where known (found when the manifest was vetted, or by the commit that wrote
        #: it): new fragments take ids above it without a loop over every fragment.
        self.fragment_id_bound = fragment_id_bound
        #: The kinds of data files it names (:func:`~lance_gpu.table.consistency.file_kinds`
        #: bits; a superset where set by a commit), where known: a commit checks that a new
        #: version does not mix legacy and V2 files from its base's kinds and the fragments it
        #: touched, without a loop over every fragment.
        self.file_kinds = file_kinds
        self._raw = raw
        self._layout = layout
        self._head = head

    def __repr__(self) -> str:
        return f"ManifestFile(path={self.path!r}, version={int(self.head.version)})"

    def _key(self) -> tuple[Any, ...]:
        return (self.path, self.manifest, self.transaction, self.index_section, self.fragment_id_bound, self.file_kinds)

    def __eq__(self, other: object) -> bool:
        """Equal: the same path, sections and facts (a file read equals the commit's own)."""
        if not isinstance(other, ManifestFile):
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The whole ``lance.table.Manifest`` (read-only: shared)."""
        m = self._manifest
        if m is None:
            with _LAZY_PARSE_LOCK:  # one parse: threads sharing the version share its messages
                m = self._manifest
                if m is None:
                    assert self._layout is not None
                    m = table_pb2.Manifest.FromString(self._layout.raw)  # bytes this process wrote
                    self._manifest = m
        return m

    @property
    def head(self) -> table_pb2.Manifest:
        """A Manifest with every field of this one but its fragments, which it may or may
        not hold (read-only: shared): what reading the version, the schema or the flags
        needs, without parsing the fragments of a manifest a commit wrote."""
        if self._head is not None:
            return self._head
        return self.manifest

    @property
    def fragment_count(self) -> int:
        """How many fragments the manifest names."""
        if self._manifest is None and self._layout is not None:
            return len(self._layout)
        return len(self.manifest.fragments)

    def fragment_layout(self) -> FragmentLayout:
        """Where the fragments are in the Manifest message's bytes (found once: a walk of the
        bytes read, or the commit's own), for a commit that keeps most of them as bytes."""
        layout = self._layout
        if layout is None:
            m = self.manifest
            layout = FragmentLayout.of(self._raw if self._raw is not None else m.SerializeToString(), m)
            self._layout = layout
            self._raw = None  # the layout holds them
        return layout


@dataclass
class VersionInfo:
    """One committed version found in ``_versions/``.

    ``timestamp`` (UTC, from the manifest's ``timestamp`` field) is read lazily, on first access.
    """

    version: int
    path: str  # the manifest's key in ``store``
    naming: NamingScheme
    store: ObjectStore

    @cached_property
    def timestamp(self) -> _dt.datetime:
        """Commit time of this version (timezone-aware, UTC)."""
        ts = read_manifest(self.store, self.path).timestamp
        return _dt.datetime.fromtimestamp(ts.seconds, _dt.UTC) + _dt.timedelta(
            microseconds=ts.nanos // 1000
        )


def _read_section(
    data: bytes, offset: int, limit: int, cls: type, what: str, path: str
) -> object:
    """Parse the ``u32 len | protobuf`` section at ``offset``; it must end by ``limit``."""
    if offset < 0 or offset + _LEN.size > limit:
        raise CorruptFileError(path, f"{what} offset {offset} is outside the file (limit {limit})")
    (length,) = _LEN.unpack_from(data, offset)
    end = offset + _LEN.size + length
    if end > limit:
        raise CorruptFileError(
            path, f"{what} at offset {offset} has length {length}, running past byte {limit}"
        )
    msg = cls()
    try:
        msg.ParseFromString(data[offset + _LEN.size : end])
    except DecodeError as exc:
        raise CorruptFileError(path, f"{what} at offset {offset} is not valid protobuf: {exc}") from exc
    check_strict(msg, path, what)
    return msg


def transaction_section_offset(manifest: table_pb2.Manifest) -> int | None:
    """File offset of the inline Transaction: field 23 if present, else the older field 21."""
    if manifest.HasField("transaction_section"):
        return manifest.transaction_section
    if manifest.HasField("transaction_section_deprecated"):
        return manifest.transaction_section_deprecated
    return None


def parse_manifest_message(data: bytes, path: str | os.PathLike[str] = "<memory>", cls: type = table_pb2.Manifest) -> Any:
    """The ``Manifest`` message of a manifest file held in memory, parsed strictly as ``cls``
    (``table_pb2.Manifest``, or a message of the same fields declared otherwise), without the
    inline sections and without :func:`~lance_gpu.table.consistency.check_manifest`.

    Raises :class:`CorruptFileError` (naming ``path``) on a bad footer, an out-of-range
    offset or length, or undecodable protobuf.
    """
    path = os.fspath(path)
    size = len(data)
    if size < MANIFEST_FOOTER_SIZE:
        raise CorruptFileError(path, f"file has {size} bytes, less than the 16-byte footer")
    pos, _major, _minor, magic = _FOOTER.unpack_from(data, size - MANIFEST_FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(path, f"bad footer magic {magic!r} (expected {MAGIC!r})")
    return _read_section(data, pos, size - MANIFEST_FOOTER_SIZE, cls, "manifest", path)


def parse_manifest_bytes(
    data: bytes, path: str | os.PathLike[str] = "<memory>", *, sections: bool = True
) -> ManifestFile:
    """Parse a whole manifest file held in memory (layout in the module docstring).

    With ``sections=False`` the inline transaction and index section are not parsed.
    Raises :class:`CorruptFileError` (naming ``path``) on a bad footer, out-of-range
    offsets or lengths, or undecodable protobuf.
    """
    path = os.fspath(path)
    limit = len(data) - MANIFEST_FOOTER_SIZE
    manifest = parse_manifest_message(data, path)
    assert isinstance(manifest, table_pb2.Manifest)
    bound, kinds = check_manifest(manifest, path)
    transaction = index_section = None
    if sections:
        txn_off = transaction_section_offset(manifest)
        if txn_off is not None:
            transaction = _read_section(
                data, txn_off, limit, transaction_pb2.Transaction, "transaction section", path
            )
        if manifest.HasField("index_section"):
            index_section = _read_section(
                data, manifest.index_section, limit, table_pb2.IndexSection, "index section", path
            )
    raw = manifest_message_bytes(data)  # (its bounds were checked above)
    return ManifestFile(path, manifest, transaction, index_section, bound, kinds, raw=raw)  # type: ignore[arg-type]


def manifest_message_bytes(data: bytes) -> memoryview:
    """The bytes of the Manifest message of a manifest file held in memory (whose footer
    and bounds are valid: a file parsed, or one just serialized), as a view of ``data``."""
    pos = _FOOTER.unpack_from(data, len(data) - MANIFEST_FOOTER_SIZE)[0]
    (length,) = _LEN.unpack_from(data, pos)
    return memoryview(data)[pos + _LEN.size : pos + _LEN.size + length]


def _read_bytes(store: ObjectStore, path: str) -> bytes:
    try:
        return store.get(path)
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"manifest {store.uri(path)} does not exist") from exc


#: Manifest files parsed and vetted lately (or committed by this process), by URI, with
#: their bytes.  A committed manifest never changes, but a URI can hold other bytes later (a
#: dataset dropped and written again), so only the very same bytes reuse an entry: the
#: :class:`ManifestFile` is a function of the bytes and the URI alone.  Saves a read of a
#: version this process just committed or read (the next append's base, the dataset a write
#: returns) its parse and :func:`~lance_gpu.table.consistency.check_manifest`: O(fragments)
#: Python, 30 ms at 10,000 fragments.  Entries are shared read-only (snapshots never
#: modify their manifest; operations copy it).
_PARSED: OrderedDict[str, tuple[bytes, ManifestFile]] = OrderedDict()
_PARSED_MAX = 8
_PARSED_LOCK = threading.Lock()


def _parsed(uri: str, data: bytes) -> ManifestFile | None:
    with _PARSED_LOCK:
        hit = _PARSED.get(uri)
        if hit is None or hit[0] != data:
            return None
        _PARSED.move_to_end(uri)
        return hit[1]


def remember_manifest(uri: str, data: bytes, mf: ManifestFile) -> None:
    """Record that the manifest file at ``uri`` holding ``data`` parses to ``mf`` (which
    must be exactly what :func:`parse_manifest_bytes` gives for ``data``; the commit records
    the manifest it wrote), so the next read of those bytes skips parsing and vetting."""
    with _PARSED_LOCK:
        _PARSED[uri] = (data, mf)
        _PARSED.move_to_end(uri)
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)


def read_manifest_file(store: ObjectStore, path: str) -> ManifestFile:
    """Read and parse one ``.manifest`` object (one request), inline transaction and
    index section included.  The same bytes at the same URI read lately are not parsed
    again (:func:`remember_manifest`)."""
    data = _read_bytes(store, path)
    uri = store.uri(path)
    mf = _parsed(uri, data)
    if mf is None:
        mf = parse_manifest_bytes(data, uri)
        remember_manifest(uri, data, mf)
    return mf


def read_manifest(store: ObjectStore, path: str) -> table_pb2.Manifest:
    """Read one ``.manifest`` object and return only its ``lance.table.Manifest``."""
    return parse_manifest_bytes(_read_bytes(store, path), store.uri(path), sections=False).manifest


def read_transaction_file(store: ObjectStore, path: str) -> transaction_pb2.Transaction:
    """Read ``_transactions/{read_version}-{uuid}.txn``: one raw Transaction, no prefix or footer.

    A missing or undecodable file raises :class:`CorruptFileError`.
    """
    uri = store.uri(path)
    try:
        data = store.get(path)
    except FileNotFoundError as exc:
        raise CorruptFileError(uri, "transaction file does not exist") from exc
    txn = transaction_pb2.Transaction()
    try:
        txn.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(uri, f"not a valid Transaction protobuf: {exc}") from exc
    check_strict(txn, uri, "transaction file")
    return txn


def parse_version_file_name(name: str) -> tuple[int, NamingScheme] | None:
    """``(version, scheme)`` of a ``_versions/`` entry, or None if it is not a version file.

    Detached (``d{v}.manifest``) and staging names return None.
    """
    if not name.endswith(".manifest"):
        return None
    stem = name[: -len(".manifest")]
    if not stem.isascii() or not stem.isdigit():
        return None
    if len(stem) == _V2_NAME_DIGITS:
        value = int(stem)
        if value > U64_MAX:
            return None
        return U64_MAX - value, "V2"
    return int(stem), "V1"


def detached_manifest_name(version: int) -> str:
    """File name of the detached ``version`` under ``_versions/``."""
    return f"d{version}.manifest"


def manifest_file_name(version: int, naming: NamingScheme = "V2") -> str:
    """File name of ``version`` under ``_versions/`` in the given naming scheme."""
    if naming == "V2":
        return f"{U64_MAX - version:020d}.manifest"
    return f"{version}.manifest"


def _scan(store: ObjectStore, root: str) -> list[VersionInfo]:
    """The version files of ``root``: one listing request of ``_versions/``."""
    vdir = join(root, "_versions")
    found: list[VersionInfo] = []
    schemes: set[str] = set()
    for meta in store.list(vdir):
        rel = meta.path[len(vdir) :].lstrip("/")
        if "/" in rel:
            continue
        parsed = parse_version_file_name(rel)
        if parsed is None:
            continue
        version, naming = parsed
        schemes.add(naming)
        found.append(VersionInfo(version, meta.path, naming, store))
    if len(schemes) > 1:
        raise CorruptFileError(
            store.uri(vdir), "directory mixes V1 ({v}.manifest) and V2 (20-digit) manifest names"
        )
    found.sort(key=lambda v: v.version)
    return found


def list_versions(store: ObjectStore, root: str) -> list[VersionInfo]:
    """All committed versions of the dataset at ``root``, oldest first.

    Raises :class:`DatasetNotFoundError` if the dataset (or any version) is missing and
    :class:`CorruptFileError` if ``_versions/`` mixes the V1 and V2 naming schemes.
    """
    versions = _scan(store, root)
    if not versions:
        raise not_a_dataset(store, root)
    return versions


def read_version_hint(store: ObjectStore, root: str) -> int | None:
    """The version ``_versions/latest_version_hint.json`` names, or None where it is
    missing, unreadable or not ``{"version": N}`` with N a positive attached version."""
    try:
        doc = json.loads(store.get(join(root, "_versions", VERSION_HINT)))
    except (OSError, ValueError):
        return None
    version = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < DETACHED_VERSION_MASK:
        return None
    return version


def _probe(store: ObjectStore, root: str, version: int) -> VersionInfo | None:
    """The manifest of ``version`` if it exists under either naming (V2 checked first)."""
    namings: tuple[NamingScheme, ...] = ("V2", "V1")
    for naming in namings:
        key = join(root, "_versions", manifest_file_name(version, naming))
        if store.exists(key):
            return VersionInfo(version, key, naming, store)
    return None


def latest_version(store: ObjectStore, root: str) -> VersionInfo:
    """The latest committed version of the dataset at ``root``, found in a fixed number of
    requests however long its history is.

    The version hint names a version N; it is taken when N's manifest exists and N + 1's
    does not (versions are committed one after the other, each only once: N + 1 absent
    means nothing newer was committed when it was checked).  A hint that lags is followed
    forward a few versions; one that is missing, unreadable or wrong (its version absent),
    or that lags further, falls back to listing ``_versions/`` (:func:`list_versions`).
    Requests on the fast path: one read of the hint and two existence checks (four on a
    dataset of V1 manifest names).
    """
    hinted = read_version_hint(store, root)
    info = _probe(store, root, hinted) if hinted is not None else None
    if info is not None:
        for _ in range(_HINT_PROBES):
            key = join(root, "_versions", manifest_file_name(info.version + 1, info.naming))
            if not store.exists(key):
                return info
            info = VersionInfo(info.version + 1, key, info.naming, store)
    return list_versions(store, root)[-1]


def not_a_dataset(store: ObjectStore, root: str) -> NotADatasetError:
    """The error for a ``root`` without committed versions: nothing there ("does not exist"),
    or something that is not a Lance dataset ("is not a Lance dataset: no _versions/")."""
    uri = store.uri(root)
    probe = getattr(store, "has_objects", None)
    present: bool | None = None
    has_vdir: bool | None = None
    if probe is not None:
        try:
            present = bool(probe(root))
            has_vdir = present and bool(probe(join(root, "_versions")))
        except OSError:
            present = has_vdir = None
    if present is None:
        return NotADatasetError(f"dataset {uri} does not exist or is not a Lance dataset (no committed version in _versions/)")
    if not present:
        return NotADatasetError(f"dataset {uri} does not exist")
    if has_vdir:
        return NotADatasetError(f"{uri} is not a Lance dataset: no committed version in _versions/")
    return NotADatasetError(f"{uri} is not a Lance dataset: no _versions/")


def _tag_version(store: ObjectStore, root: str, tag: str) -> int:
    """Version a tag points at: ``_refs/tags/{tag}.json`` holds ``{"version": N, ...}``."""
    key = join(root, "_refs", "tags", f"{tag}.json")
    path = store.uri(key)
    try:
        doc = json.loads(store.get(key).decode("utf-8"))
    except FileNotFoundError as exc:
        raise VersionMissingError(f"dataset {store.uri(root)} has no version or tag {tag!r}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"tag file is not valid JSON: {exc}") from exc
    version = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptFileError(path, "tag file has no integer 'version'")
    if doc.get("branch"):
        raise UnsupportedFeatureError(f"{path}: tags on branches are not supported")
    return version


def resolve_manifest(
    store: ObjectStore, root: str, version: int | str | None = None
) -> VersionInfo:
    """The manifest to open: the latest version (:func:`latest_version`), or the one asked for.

    ``version`` may be a version number (a detached one too) or a tag name
    (``_refs/tags/{tag}.json``).  A version asked for is found by checking its manifest's
    name (V2, then V1), without listing ``_versions/``; only a version that is not there
    lists it, to say which versions are.
    Raises :class:`DatasetNotFoundError` if the dataset or the version does not exist.
    """
    if version is None:
        return latest_version(store, root)
    if isinstance(version, str):
        version = int(version) if version.isdigit() else _tag_version(store, root, version)
    if version & DETACHED_VERSION_MASK and version <= U64_MAX:
        path = join(root, "_versions", detached_manifest_name(version))
        if store.exists(path):
            return VersionInfo(version, path, latest_version(store, root).naming, store)
    elif 0 < version <= U64_MAX:
        info = _probe(store, root, version)
        if info is not None:
            return info
    versions = list_versions(store, root)
    for info in versions:
        if info.version == version:
            return info
    raise VersionMissingError(
        f"dataset {store.uri(root)} has no version {version} "
        f"(versions {versions[0].version}..{versions[-1].version})"
    )


def load_manifest(
    store: ObjectStore, root: str, version: int | str | None = None, *, check_flags: bool = True
) -> ManifestFile:
    """Resolve, read and (by default) vet the manifest of ``version`` (latest if None).

    With ``check_flags`` the reader feature flags are checked
    (:func:`lance_gpu.table.features.check_reader_flags`).
    """

    info = resolve_manifest(store, root, version)
    mf = read_manifest_file(store, info.path)
    if check_flags:
        check_reader_flags(mf.manifest.reader_feature_flags, mf.path)
    return mf
