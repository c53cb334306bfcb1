# SPDX-License-Identifier: Apache-2.0
"""Check that one version of a dataset reads back whole.

:func:`verify` opens the manifest, then for every fragment: decodes every column of every
data file in full (every page of the version), reads the deletion file (sorted, unique
offsets below ``physical_rows``) and the row ids (one per physical row, unique across the
version).  Each failure becomes a :class:`VerifyProblem` naming the file; verification goes
on to the next fragment, so one run lists every corrupt or missing file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from lance_gpu.errors import CorruptFileError, DatasetNotFoundError, StorageError
from lance_gpu.io import join
from lance_gpu.progress import ProgressHook
from lance_gpu.tools._open import StorageOptions, open_dataset


@dataclass(frozen=True, slots=True)
class VerifyProblem:
    """One corrupt or missing file: its ``path`` and what is wrong with it."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(slots=True)
class VerifyReport:
    """The outcome of :func:`verify`: what was checked, and every problem found."""

    uri: str
    version: int | None
    fragments: int = 0
    data_files: int = 0
    deletion_files: int = 0
    rows: int = 0
    problems: list[VerifyProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _named_path(exc: BaseException, fallback: str) -> str:
    """The file an error is about: ``CorruptFileError.path``, ``StorageError.uri``,
    ``OSError.filename``, or ``fallback``."""
    if isinstance(exc, CorruptFileError):
        return exc.path
    if isinstance(exc, StorageError):
        return exc.uri
    if isinstance(exc, OSError) and exc.filename:
        return os.fspath(exc.filename)
    return fallback


def _reason(exc: BaseException) -> str:
    if isinstance(exc, CorruptFileError):
        return exc.reason
    if isinstance(exc, FileNotFoundError):
        return "file is missing"
    return f"{type(exc).__name__}: {exc}"


def verify(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    *,
    progress: ProgressHook | None = None,
    storage_options: StorageOptions | None = None,
) -> VerifyReport:
    """Decode every page of one version of a dataset and check its deletion files and row ids.

    Parameters
    ----------
    uri : str or path
        The dataset.
    version : int or str, optional
        Version number or tag; default the latest.
    progress : ProgressHook, optional
        Told ``("fragments verified", done, total)``.
    storage_options : dict, optional
        Passed to :func:`lance_gpu.dataset`.

    Returns
    -------
    VerifyReport
        ``report.ok`` is True when nothing is wrong; ``report.problems`` names each bad file.
        A dataset or version that does not exist raises :class:`DatasetNotFoundError`; a
        manifest that cannot be read is reported as the one problem.
    """
    report = VerifyReport(os.fspath(uri), None if version is None else version if isinstance(version, int) else None)
    try:
        ds = open_dataset(uri, version, storage_options, device="cpu")
    except DatasetNotFoundError:
        raise
    except Exception as exc:  # a manifest that does not parse is what we report
        report.problems.append(VerifyProblem(_named_path(exc, os.fspath(uri)), _reason(exc)))
        return report
    report.uri, report.version = ds.uri, ds.version
    fragments = ds.get_fragments()
    report.fragments = len(fragments)
    arrow_fields = list(zip(ds.snapshot.lance_schema.fields, ds.schema, strict=True))
    seen_ids: list[np.ndarray] = []
    stable = False
    if progress is not None:
        progress("fragments verified", 0, len(fragments))
    for done, frag in enumerate(fragments, 1):
        pb = frag.pb
        data_files = [join(ds.uri, "data", df.path) for df in frag.data_files()]
        report.data_files += len(data_files)
        problems: dict[str, str] = {}

        deletion = frag.deletion_file()
        if deletion is not None:
            report.deletion_files += 1
            dpath = join(ds.uri, deletion.path(frag.fragment_id))
            try:
                deleted = np.asarray(frag.snapshot.deleted_rows, dtype=np.int64)
                if deleted.size and (np.any(np.diff(deleted) <= 0) or deleted[0] < 0 or deleted[-1] >= frag.physical_rows):
                    raise CorruptFileError(dpath, f"deleted offsets are not sorted, unique and below {frag.physical_rows}")
                if deletion.num_deleted_rows and deleted.size != deletion.num_deleted_rows:
                    raise CorruptFileError(dpath, f"holds {deleted.size} offsets, the manifest says {deletion.num_deleted_rows}")
            except Exception as exc:  # any decode failure is damage to report
                problems.setdefault(_named_path(exc, dpath), _reason(exc))

        if pb.WhichOneof("row_id_sequence") is not None:
            stable = True
            where = (join(ds.uri, pb.external_row_ids.path) if pb.HasField("external_row_ids")
                     else f"{ds.uri} (manifest: inline row ids of fragment {frag.fragment_id})")
            try:
                ids = np.asarray(frag.snapshot.row_ids)
                if ids.size != frag.physical_rows:
                    raise CorruptFileError(where, f"{ids.size} row ids for {frag.physical_rows} rows")
                live = frag.snapshot.live_rows
                seen_ids.append(ids if live is None else ids[live])
            except Exception as exc:  # any decode failure is damage to report
                problems.setdefault(_named_path(exc, where), _reason(exc))

        fallback = ", ".join(data_files) or f"fragment {frag.fragment_id}"
        for lance_field, arrow_field in arrow_fields:
            try:
                column = frag.snapshot.read_field(lance_field, arrow_field, None)
                if len(column) != frag.physical_rows:
                    raise CorruptFileError(fallback, f"field {lance_field.name!r} decodes to {len(column)} rows, not {frag.physical_rows}")
                column.validate(full=True)
            except Exception as exc:  # any decode failure is damage to report
                path = _named_path(exc, fallback)
                problems.setdefault(path, _reason(exc))
        report.problems.extend(VerifyProblem(p, r) for p, r in problems.items())
        if not problems:
            report.rows += frag.count_rows()
        if progress is not None:
            progress("fragments verified", done, len(fragments))

    if stable and seen_ids:
        ids = np.concatenate(seen_ids)
        uniq, counts = np.unique(ids, return_counts=True)
        if uniq.size != ids.size:
            dup = int(uniq[counts > 1][0])
            report.problems.append(VerifyProblem(f"{ds.uri} (row ids of version {ds.version})", f"row id {dup} is held by {int(counts[counts > 1][0])} live rows"))
    return report
