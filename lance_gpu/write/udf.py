# SPDX-License-Identifier: Apache-2.0
"""``batch_udf``: pylance's user-defined column function for ``add_columns``, with
checkpointing.

A :class:`BatchUDF` wraps ``func(batch) -> RecordBatch | Table | DataFrame`` with an optional
``output_schema`` (the results are cast to it) and ``checkpoint_file``: a SQLite database
holding each computed batch as Arrow IPC bytes, keyed by (fragment id, first live row of
the batch).  When ``add_columns`` fails part way and is called again with the same file, the
stored batches are reused instead of calling ``func`` again; the file is removed once the
new columns are committed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["BatchUDF", "BatchUDFCheckpoint", "batch_udf"]


class BatchUDFCheckpoint:
    """Computed batches of a UDF, by (fragment id, first row): table
    ``batches(fragment_id INTEGER, batch_start INTEGER, result BLOB)``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS batches (fragment_id INTEGER, batch_start INTEGER, result BLOB, "
            "PRIMARY KEY (fragment_id, batch_start))"
        )
        self._db.commit()

    def get(self, fragment_id: int, batch_start: int) -> pa.Table | None:
        row = self._db.execute(
            "SELECT result FROM batches WHERE fragment_id = ? AND batch_start = ?", (fragment_id, batch_start)
        ).fetchone()
        if row is None:
            return None
        return pa.ipc.open_stream(pa.py_buffer(row[0])).read_all()

    def put(self, fragment_id: int, batch_start: int, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        self._db.execute(
            "INSERT OR REPLACE INTO batches VALUES (?, ?, ?)", (fragment_id, batch_start, sink.getvalue().to_pybytes())
        )
        self._db.commit()

    def close(self, remove: bool = False) -> None:
        self._db.close()
        if remove:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class BatchUDF:
    """A column function for ``add_columns`` (pylance's ``lance.udf.BatchUDF``)."""

    def __init__(
        self,
        func: Callable[[pa.RecordBatch], Any],
        output_schema: pa.Schema | None = None,
        checkpoint_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.func = func
        self.output_schema = output_schema
        self.checkpoint_file = checkpoint_file

    def __call__(self, batch: pa.RecordBatch) -> Any:
        return self.func(batch)


def batch_udf(
    output_schema: pa.Schema | None = None, checkpoint_file: str | os.PathLike[str] | None = None
) -> Callable[[Callable[[pa.RecordBatch], Any]], BatchUDF]:
    """Decorator making a :class:`BatchUDF` (pylance's ``lance.batch_udf``).

    Parameters
    ----------
    output_schema : pyarrow.Schema, optional
        The schema of the function's results (they are cast to it).
    checkpoint_file : str or Path, optional
        A SQLite file caching computed batches, so a failed ``add_columns`` resumes.
    """

    def wrap(func: Callable[[pa.RecordBatch], Any]) -> BatchUDF:
        return BatchUDF(func, output_schema, checkpoint_file)

    return wrap
