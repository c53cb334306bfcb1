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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

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
