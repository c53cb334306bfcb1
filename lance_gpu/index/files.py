# SPDX-License-Identifier: Apache-2.0
"""Index files: standalone Lance files (2.x) of top-level leaf columns, whose schema
metadata carries the index's parameters (``batch_size``, ``lance:index_stats`` ...).

:class:`IndexFile` opens one and reads whole columns, row ranges or chosen rows of a column;
:func:`read_index_table` reads a whole file as one Arrow table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.errors import CorruptFileError
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.file.reader import read_field, take_field
from lance_gpu.io.store import ObjectStore
from lance_gpu.table.schema import LanceSchema

__all__ = ["IndexFile", "read_index_table"]


class IndexFile:
    """One open index file: its Arrow schema (with metadata), row count and readers."""

    def __init__(self, store: ObjectStore, key: str) -> None:
        self.reader = LanceFileReader(key, store)
        self.path = self.reader.path
        fd = self.reader.descriptor
        self.lance_schema = LanceSchema.from_protos(fd.schema.fields, dict(fd.schema.metadata), self.path)
        self.schema = self.lance_schema.to_arrow()
        if any(not f.is_leaf for f in self.lance_schema.fields):
            raise CorruptFileError(self.path, "index file with nested columns")
        self.num_rows = int(self.reader.num_rows)
        self.minor = self.reader.version.minor
        meta = self.lance_schema.metadata
        self.metadata = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in meta.items()}

    def close(self) -> None:
        self.reader.close()

    def _column(self, name: str) -> tuple[pa.Field, int]:
        try:
            i = self.schema.names.index(name)
        except ValueError:
            raise CorruptFileError(self.path, f"index file without a column {name!r}") from None
        return self.schema.field(i), i

    def read(self, name: str, row_range: tuple[int, int] | None = None) -> pa.Array:
        """Column ``name``, whole or rows ``[start, stop)``."""
        f, i = self._column(name)
        if self.reader.version == FileVersion(2, 0):
            from lance_gpu.file.v2_0 import read_field as read_v20

            col = read_v20(self.reader, f, [i], None)
            if row_range is not None:
                col = col.slice(row_range[0], row_range[1] - row_range[0])
        else:

            col = read_field(self.reader, f, [i], row_range)
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col

    def global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (index files keep side data in buffers 1..)."""
        return self.reader.global_buffer(index)

    def take(self, name: str, rows: np.ndarray) -> pa.Array:
        """Rows ``rows`` (sorted, unique) of column ``name``."""
        rows = np.asarray(rows, np.int64)
        if self.reader.version == FileVersion(2, 0):
            return self.read(name).take(pa.array(rows))

        f, i = self._column(name)
        col = take_field(self.reader, f, [i], rows)
        return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def read_index_table(store: ObjectStore, key: str) -> tuple[pa.Table, LanceSchema, int]:
    """A whole index file: (table, its Lance schema, file minor version)."""
    file = IndexFile(store, key)
    try:
        cols = [file.read(name) for name in file.schema.names]
        return pa.Table.from_arrays(cols, schema=file.schema), file.lance_schema, file.minor
    finally:
        file.close()
