# SPDX-License-Identifier: Apache-2.0
"""Tags: named versions, kept in ``{dataset}/_refs/tags/{name}.json`` as pylance keeps them.

A tag file is UTF-8 JSON, pretty-printed with two-space indentation, written by pylance as::

    {
      "branch": null,
      "version": 3,
      "createdAt": "2026-11-24T05:07:52.003288180Z",
      "updatedAt": "2026-11-24T05:07:52.003288180Z",
      "manifestSize": 779,
      "metadata": {}
    }

``version`` is the tagged version, ``manifestSize`` the byte size of that version's manifest
file, the times are UTC RFC 3339 with nanoseconds. Older pylance versions wrote only
``version`` and ``manifestSize``; missing keys read as None / ``{}``. Tags on branches
(``branch`` set) are refused by the readers (:mod:`lance_gpu.table.manifest`). A name may
hold letters, digits, ``.``, ``-`` and ``_`` only. Every byte goes through the dataset's
store (:mod:`lance_gpu.io`); files are created with put-if-absent, so two concurrent
``create`` calls of one name cannot both succeed.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
import re

from lance_gpu.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    InvalidTagNameError,
    ObjectExistsError,
    TagExistsError,
    TagNotFoundError,
    VersionNotFoundError,
)
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.manifest import resolve_manifest

_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _tags_dir(root: str) -> str:
    return join(root, "_refs", "tags")


def _tag_key(root: str, tag: str) -> str:
    if not isinstance(tag, str):
        raise TypeError(f"a tag name must be a string, got {type(tag).__name__}")
    if not _NAME.fullmatch(tag) or tag in (".", ".."):
        raise InvalidTagNameError(
            f"invalid tag name {tag!r}: tag characters must be either alphanumeric, '.', '-' or '_'"
        )
    return join(_tags_dir(root), f"{tag}.json")


def _parse_time(text: object) -> _dt.datetime | None:
    """RFC 3339 (nanoseconds allowed) to an aware UTC datetime (microseconds)."""
    if not isinstance(text, str):
        return None
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})", text)
    if m is None:
        return None
    base = _dt.datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3]))
    micros = int((m[2] or "0")[:6].ljust(6, "0"))
    return base.replace(microsecond=micros).astimezone(_dt.UTC)


def _format_time(when: _dt.datetime, nanos: int) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def _read(store: ObjectStore, key: str) -> dict:
    raw = store.get(key)  # FileNotFoundError (ObjectNotFoundError) when absent
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(store.uri(key), f"tag file is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), int):
        raise CorruptFileError(store.uri(key), "tag file has no integer 'version'")
    return doc


def _read_existing(store: ObjectStore, root: str, tag: str) -> tuple[str, dict]:
    key = _tag_key(root, tag)
    try:
        return key, _read(store, key)
    except FileNotFoundError:
        raise TagNotFoundError(f"tag {tag} does not exist") from None


def list_tags(store: ObjectStore, root: str) -> dict[str, dict]:
    """Every tag, by name: ``{"branch", "version", "created_at", "updated_at",
    "manifest_size", "metadata"}`` as pylance's ``ds.tags.list()``."""
    out: dict[str, dict] = {}
    prefix = _tags_dir(root)
    for meta in sorted(store.list(prefix), key=lambda m: m.path):
        name = meta.path.rsplit("/", 1)[-1]
        if not name.endswith(".json"):
            continue
        doc = _read(store, meta.path)
        out[name[: -len(".json")]] = {
            "branch": doc.get("branch"),
            "version": doc["version"],
            "created_at": _parse_time(doc.get("createdAt")),
            "updated_at": _parse_time(doc.get("updatedAt")),
            "manifest_size": doc.get("manifestSize"),
            "metadata": doc.get("metadata") or {},
        }
    return out


def _target(store: ObjectStore, root: str, reference: int | str | tuple | None, current: int) -> tuple[int, int]:
    """``(version, manifest size)`` a tag should point at."""
    if isinstance(reference, tuple):
        if len(reference) != 2:
            raise TypeError("a tag reference tuple is (branch, version)")
        branch, reference = reference
        if branch not in (None, "main"):
            raise VersionNotFoundError(f"branch {branch!r} does not exist (branches are not supported)")
        if reference is None:
            reference = current
    if reference is None:
        reference = current
    if isinstance(reference, bool) or not isinstance(reference, (int, str)):
        raise TypeError(f"a tag reference must be a version number or a tag name, got {type(reference).__name__}")
    if isinstance(reference, str):
        reference = _read_existing(store, root, reference)[1]["version"]
    try:
        info = resolve_manifest(store, root, int(reference))  # type: ignore[arg-type]  # a tuple was unpacked above
    except DatasetNotFoundError:
        raise VersionNotFoundError(f"version main:{reference} does not exist") from None
    return info.version, store.size(info.path)


def _document(version: int, manifest_size: int, created: str, updated: str, metadata: dict) -> bytes:
    doc = {
        "branch": None,
        "version": version,
        "createdAt": created,
        "updatedAt": updated,
        "manifestSize": manifest_size,
        "metadata": metadata,
    }
    return json.dumps(doc, indent=2).encode("utf-8")


def _now() -> str:
    ns = _dt.datetime.now(_dt.UTC)
    return _format_time(ns, ns.microsecond * 1000)


def create_tag(store: ObjectStore, root: str, tag: str, reference: int | str | tuple | None, current: int) -> None:
    """Create ``tag`` pointing at ``reference`` (a version, a tag name, ``(branch, version)``;
    None: ``current``). :class:`TagExistsError` if it exists."""
    key = _tag_key(root, tag)
    version, size = _target(store, root, reference, current)
    if store.exists(key):
        raise TagExistsError(f"tag {tag} already exists")
    now = _now()
    try:
        store.put_if_absent(key, _document(version, size, now, now, {}))
    except (ObjectExistsError, FileExistsError):
        raise TagExistsError(f"tag {tag} already exists") from None


def update_tag(store: ObjectStore, root: str, tag: str, reference: int | str | tuple | None, current: int) -> None:
    """Point the existing ``tag`` at ``reference``; :class:`TagNotFoundError` if it does not exist."""
    key, old = _read_existing(store, root, tag)
    version, size = _target(store, root, reference, current)
    store.put(key, _document(version, size, old.get("createdAt") or _now(), _now(), old.get("metadata") or {}))


def replace_tag_metadata(store: ObjectStore, root: str, tag: str, metadata: dict[str, str]) -> None:
    """Replace the whole ``metadata`` map of ``tag``; its reference and times are kept."""
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("tag metadata must be a dict of strings to strings")
    key, old = _read_existing(store, root, tag)
    now = _now()
    data = _document(
        old["version"], old.get("manifestSize") or 0, old.get("createdAt") or now, old.get("updatedAt") or now, metadata
    )
    store.put(key, data)


def delete_tag(store: ObjectStore, root: str, tag: str) -> None:
    """Remove ``tag``; :class:`TagNotFoundError` if it does not exist."""
    key = _tag_key(root, tag)
    if not store.exists(key):
        raise TagNotFoundError(f"tag {tag} does not exist")
    store.delete(key)


def tagged_versions(store: ObjectStore, root: str) -> dict[int, builtins.list[str]]:
    """Version → the names of the tags pointing at it."""
    out: dict[int, list[str]] = {}
    for name, tag in list_tags(store, root).items():
        out.setdefault(int(tag["version"]), []).append(name)
    return out


class Tags:
    """``ds.tags``: pylance's tag API over one dataset."""

    def __init__(self, store: ObjectStore, root: str, current_version: int) -> None:
        self._store = store
        self._root = root
        self._current = current_version

    def list(self) -> dict[str, dict]:
        """Every tag: ``{name: {"branch", "version", "created_at", "updated_at",
        "manifest_size", "metadata"}}``."""
        return list_tags(self._store, self._root)

    def list_ordered(self, order: str | None = None) -> builtins.list[tuple[str, dict]]:
        """Every tag as ``(name, tag)``, by version (``"desc"``, the default, or ``"asc"``),
        then by name.

        Parameters
        ----------
        order : str, optional
            ``"asc"`` or ``"desc"`` (default).
        """
        if order is None:
            order = "desc"
        if order not in ("asc", "desc"):
            raise ValueError(f"Invalid sort order {order!r}. Valid values are: asc, desc")
        tags = list_tags(self._store, self._root)
        sign = -1 if order == "desc" else 1
        return sorted(tags.items(), key=lambda kv: (sign * int(kv[1]["version"]), kv[0]))

    def replace_metadata(self, tag: str, metadata: dict[str, str]) -> None:
        """Replace the metadata map of ``tag`` (reference and ``updated_at`` unchanged).

        Parameters
        ----------
        tag : str
            An existing tag.
        metadata : dict of str to str
            The new metadata, replacing the old entirely.
        """
        replace_tag_metadata(self._store, self._root, tag, metadata)

    def get_version(self, tag: str) -> int:
        """The version ``tag`` points at; :class:`TagNotFoundError` if there is no such tag."""
        return int(_read_existing(self._store, self._root, tag)[1]["version"])

    def create(self, tag: str, reference: int | str | tuple | None = None) -> None:
        """Create ``tag`` pointing at ``reference``.

        Parameters
        ----------
        tag : str
            The name: letters, digits, ``.``, ``-``, ``_``.
        reference : int, str or (branch, version), optional
            A version number, another tag's name, or ``(None, version)``; default: the
            version this dataset object is at.
        """
        create_tag(self._store, self._root, tag, reference, self._current)

    def update(self, tag: str, reference: int | str | tuple | None = None) -> None:
        """Point the existing ``tag`` at ``reference`` (as in :meth:`create`)."""
        update_tag(self._store, self._root, tag, reference, self._current)

    def delete(self, tag: str) -> None:
        """Remove ``tag``."""
        delete_tag(self._store, self._root, tag)
