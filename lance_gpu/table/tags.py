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
hold letters, digits, ``.``, ``-`` and ``_`` only. Files are created with put-if-absent, so
two concurrent ``create`` calls of one name cannot both succeed.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
import os
import re
from pathlib import Path

from lance_gpu.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    InvalidTagNameError,
    TagExistsError,
    TagNotFoundError,
    VersionNotFoundError,
)
from lance_gpu.table.manifest import dataset_path, resolve_manifest

_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _tags_dir(uri: str | os.PathLike[str]) -> Path:
    return dataset_path(uri) / "_refs" / "tags"


def _tag_path(uri: str | os.PathLike[str], tag: str) -> Path:
    if not isinstance(tag, str):
        raise TypeError(f"a tag name must be a string, got {type(tag).__name__}")
    if not _NAME.fullmatch(tag) or tag in (".", ".."):
        raise InvalidTagNameError(
            f"invalid tag name {tag!r}: tag characters must be either alphanumeric, '.', '-' or '_'"
        )
    return _tags_dir(uri) / f"{tag}.json"


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


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"tag file is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), int):
        raise CorruptFileError(path, "tag file has no integer 'version'")
    return doc


def list_tags(uri: str | os.PathLike[str]) -> dict[str, dict]:
    """Every tag, by name: ``{"branch", "version", "created_at", "updated_at",
    "manifest_size", "metadata"}`` as pylance's ``ds.tags.list()``."""
    out: dict[str, dict] = {}
    tdir = _tags_dir(uri)
    if not tdir.is_dir():
        return out
    for path in sorted(tdir.glob("*.json")):
        doc = _read(path)
        out[path.name[: -len(".json")]] = {
            "branch": doc.get("branch"),
            "version": doc["version"],
            "created_at": _parse_time(doc.get("createdAt")),
            "updated_at": _parse_time(doc.get("updatedAt")),
            "manifest_size": doc.get("manifestSize"),
            "metadata": doc.get("metadata") or {},
        }
    return out


def _target(uri: str | os.PathLike[str], reference: int | str | tuple | None, current: int) -> tuple[int, int]:
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
        path = _tag_path(uri, reference)
        if not path.is_file():
            raise TagNotFoundError(f"tag {reference} does not exist")
        reference = _read(path)["version"]
    try:
        info = resolve_manifest(uri, int(reference))  # type: ignore[arg-type]  # a tuple was unpacked above
    except DatasetNotFoundError:
        raise VersionNotFoundError(f"version main:{reference} does not exist") from None
    return info.version, os.path.getsize(info.path)


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


def create_tag(uri: str | os.PathLike[str], tag: str, reference: int | str | tuple | None, current: int) -> None:
    """Create ``tag`` pointing at ``reference`` (a version, a tag name, ``(branch, version)``;
    None: ``current``). :class:`TagExistsError` if it exists."""
    from lance_gpu.write.commit import _write_new

    path = _tag_path(uri, tag)
    version, size = _target(uri, reference, current)
    if path.exists():
        raise TagExistsError(f"tag {tag} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    now = _now()
    try:
        _write_new(path, _document(version, size, now, now, {}))
    except FileExistsError:
        raise TagExistsError(f"tag {tag} already exists") from None


def update_tag(uri: str | os.PathLike[str], tag: str, reference: int | str | tuple | None, current: int) -> None:
    """Point the existing ``tag`` at ``reference``; :class:`TagNotFoundError` if it does not exist."""
    path = _tag_path(uri, tag)
    if not path.is_file():
        raise TagNotFoundError(f"tag {tag} does not exist")
    version, size = _target(uri, reference, current)
    old = _read(path)
    data = _document(version, size, old.get("createdAt") or _now(), _now(), old.get("metadata") or {})
    staging = path.with_name(f".tmp_{path.name}_{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)


def replace_tag_metadata(uri: str | os.PathLike[str], tag: str, metadata: dict[str, str]) -> None:
    """Replace the whole ``metadata`` map of ``tag``; its reference and times are kept."""
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError("tag metadata must be a dict of strings to strings")
    path = _tag_path(uri, tag)
    if not path.is_file():
        raise TagNotFoundError(f"tag {tag} does not exist")
    old = _read(path)
    now = _now()
    data = _document(
        old["version"], old.get("manifestSize") or 0, old.get("createdAt") or now, old.get("updatedAt") or now, metadata
    )
    staging = path.with_name(f".tmp_{path.name}_{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)


def delete_tag(uri: str | os.PathLike[str], tag: str) -> None:
    """Remove ``tag``; :class:`TagNotFoundError` if it does not exist."""
    path = _tag_path(uri, tag)
    try:
        path.unlink()
    except FileNotFoundError:
        raise TagNotFoundError(f"tag {tag} does not exist") from None


def tagged_versions(uri: str | os.PathLike[str]) -> dict[int, list[str]]:
    """Version → the names of the tags pointing at it."""
    out: dict[int, list[str]] = {}
    for name, tag in list_tags(uri).items():
        out.setdefault(int(tag["version"]), []).append(name)
    return out


class Tags:
    """``ds.tags``: pylance's tag API over one dataset."""

    def __init__(self, uri: str, current_version: int) -> None:
        self._uri = uri
        self._current = current_version

    def list(self) -> dict[str, dict]:
        """Every tag: ``{name: {"branch", "version", "created_at", "updated_at",
        "manifest_size", "metadata"}}``."""
        return list_tags(self._uri)

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
        tags = list_tags(self._uri)
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
        replace_tag_metadata(self._uri, tag, metadata)

    def get_version(self, tag: str) -> int:
        """The version ``tag`` points at; :class:`TagNotFoundError` if there is no such tag."""
        path = _tag_path(self._uri, tag)
        if not path.is_file():
            raise TagNotFoundError(f"tag {tag} does not exist")
        return int(_read(path)["version"])

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
        create_tag(self._uri, tag, reference, self._current)

    def update(self, tag: str, reference: int | str | tuple | None = None) -> None:
        """Point the existing ``tag`` at ``reference`` (as in :meth:`create`)."""
        update_tag(self._uri, tag, reference, self._current)

    def delete(self, tag: str) -> None:
        """Remove ``tag``."""
        delete_tag(self._uri, tag)
