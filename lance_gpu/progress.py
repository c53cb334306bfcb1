# SPDX-License-Identifier: Apache-2.0
"""The ``progress=`` hook of long operations (write, compaction, convert, verify).

A hook is any callable ``progress(task, done, total)``:

* ``task`` -- what is counted, a short phrase that is also the unit: ``"rows written"``,
  ``"fragments compacted"``, ``"rows converted"``, ``"fragments verified"``;
* ``done`` -- how many so far (cumulative, non-decreasing for one task);
* ``total`` -- how many there will be, or None when the operation cannot know (a stream).

It is called from the thread that runs the operation, after each unit of work, and once
with ``done == 0`` before the first.  An exception it raises aborts the operation as any
other error would (a write then leaves no partial version).  The command line draws one
progress bar per task from it (``lance_gpu.cli``).

Writes also take pylance's per-fragment trackers (:class:`FragmentWriteProgress`,
:class:`FileSystemFragmentWriteProgress`), told when each fragment's file begins and ends.
"""

from __future__ import annotations

import json
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

ProgressHook = Callable[[str, int, int | None], None]


def count_rows(
    batches: Iterable[pa.RecordBatch], progress: ProgressHook | None, task: str, total: int | None
) -> Iterator[pa.RecordBatch]:
    """``batches`` unchanged, reporting the rows handed out so far to ``progress``."""
    if progress is None:
        yield from batches
        return
    done = 0
    progress(task, done, total)
    for batch in batches:
        yield batch
        done += batch.num_rows
        progress(task, done, total)


# --------------------------------------------------------------------------------------------
# pylance's per-fragment trackers (``lance.progress``)


class FragmentWriteProgress(ABC):
    """pylance's per-fragment write tracker: ``begin(fragment)`` before a data file of a new
    fragment is opened (a :class:`~lance_gpu.txn.fragment.FragmentMetadata` with no files,
    ``physical_rows`` None and id 0, or the id given to ``LanceFragment.create``), and
    ``complete(fragment)`` once its file is finished (its ``files`` and ``physical_rows``
    set; the id is assigned at commit).

    Unlike pylance 14.0.2, whose writer never reports the last fragment complete, every
    begun fragment is reported complete once written; a write that fails reports nothing
    more.  While a tracker is attached, files are finished one after the other (no overlap
    of one file's closing with the next one's encoding), so the calls alternate.
    """

    @abstractmethod
    def begin(self, fragment: Any, **kwargs: Any) -> None:
        """Called when a new fragment is about to be written.

        Parameters
        ----------
        fragment : FragmentMetadata
            The fragment that is open to write to (no id assigned yet).
        **kwargs
            Extra arguments (none are passed by lance-gpu).
        """

    @abstractmethod
    def complete(self, fragment: Any, **kwargs: Any) -> None:
        """Called when a fragment's data file is written.

        Parameters
        ----------
        fragment : FragmentMetadata
            The written fragment.
        **kwargs
            Extra arguments (none are passed by lance-gpu).
        """


class NoopFragmentWriteProgress(FragmentWriteProgress):
    """A tracker that does nothing (pylance's default)."""

    def begin(self, fragment: Any, **kwargs: Any) -> None:
        """Nothing."""

    def complete(self, fragment: Any, **kwargs: Any) -> None:
        """Nothing."""


class FileSystemFragmentWriteProgress(FragmentWriteProgress):
    """Track fragment writes in files under ``base_uri`` (pylance's layout, so tools that
    watch pylance's progress files read ours): at ``begin``,
    ``fragment_{id}.in_progress`` (JSON ``{"fragment_id": id, "metadata": metadata}``) and
    ``fragment_{id}.json`` (the fragment's ``to_json()``); at ``complete`` the
    ``.in_progress`` file is deleted.

    Parameters
    ----------
    base_uri : str
        A directory URI ``pyarrow.fs.FileSystem.from_uri`` takes (an absolute path or a
        ``scheme://`` URI); created when the first fragment begins.
    metadata : dict, optional
        Extra metadata written into each ``.in_progress`` file (e.g. which worker writes).
    """

    PROGRESS_EXT: str = ".in_progress"

    def __init__(self, base_uri: str, metadata: dict[str, str] | None = None) -> None:
        from pyarrow.fs import FileSystem

        self._fs, self._base_path = FileSystem.from_uri(base_uri)
        self._metadata = dict(metadata) if metadata else {}

    def _in_progress_path(self, fragment: Any) -> str:
        return posixpath.join(self._base_path, f"fragment_{fragment.id}{self.PROGRESS_EXT}")

    def _fragment_file(self, fragment: Any) -> str:
        return posixpath.join(self._base_path, f"fragment_{fragment.id}.json")

    def begin(self, fragment: Any, **kwargs: Any) -> None:
        """Write the fragment's ``.in_progress`` and ``.json`` files.

        Parameters
        ----------
        fragment : FragmentMetadata
            The fragment about to be written.
        **kwargs
            Ignored.
        """
        self._fs.create_dir(self._base_path, recursive=True)
        with self._fs.open_output_stream(self._in_progress_path(fragment)) as out:
            out.write(json.dumps({"fragment_id": fragment.id, "metadata": self._metadata}).encode())
        with self._fs.open_output_stream(self._fragment_file(fragment)) as out:
            out.write(json.dumps(fragment.to_json()).encode())

    def complete(self, fragment: Any, **kwargs: Any) -> None:
        """Delete the fragment's ``.in_progress`` file.

        Parameters
        ----------
        fragment : FragmentMetadata
            The written fragment.
        **kwargs
            Ignored.
        """
        self._fs.delete_file(self._in_progress_path(fragment))
