# SPDX-License-Identifier: Apache-2.0
"""Writing one Lance v2 data file from host or device columns.

:class:`LanceFileWriter` is the file layer's :class:`~lance_gpu.file.writer.container.HostFileWriter`
(the container: pages, column metadata, footer; Arrow arrays encoded on the CPU) that also
takes :class:`~lance_gpu.write.device_input.DeviceBatch` columns: their pages are encoded
by kernels on the device (:mod:`lance_gpu.write.device_pages`), in order, in the writing
thread, and their buffers are copied to the host while later pages encode
(:class:`~lance_gpu.write.device_pages.StagedBuffer`, a
:class:`~lance_gpu.file.writer.container.PendingBuffer`).  A field whose buffered pieces mix
device and host columns (a stream mixing them) is encoded from the host.
"""

from __future__ import annotations

import pyarrow as pa

from lance_gpu.file.writer.container import HostFileWriter, encode_field_rows
from lance_gpu.file.writer.pages import EncodedPage
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.table.schema import LanceField
from lance_gpu.write.device_input import DeviceBatch, column_nbytes, slice_column
from lance_gpu.write.device_pages import encode_device_field

__all__ = ["LanceFileWriter"]


class LanceFileWriter(HostFileWriter):
    """Streams record batches of ``schema``, Arrow or device, into one data file at ``path``
    (see :class:`~lance_gpu.file.writer.container.HostFileWriter`)."""

    def write(self, batch: pa.RecordBatch | pa.Table | DeviceBatch) -> None:  # type: ignore[override]
        """Append the rows of ``batch`` (whose columns are the schema's top-level fields;
        a :class:`~lance_gpu.write.device_input.DeviceBatch` is encoded on the GPU)."""
        super().write(batch)  # type: ignore[arg-type]

    def _host_column(self, col):
        return col.to_arrow() if isinstance(col, DeviceColumn) else col

    def _nbytes(self, piece) -> int:
        return column_nbytes(piece) if isinstance(piece, DeviceColumn) else int(piece.nbytes)

    def _slice(self, chunk, offset: int, length: int):
        if isinstance(chunk, DeviceColumn):
            return slice_column(chunk, offset, length)
        return chunk.slice(offset, length)

    def _encode_now(self, arrays: list, nbytes: int) -> bool:
        # device pages are encoded here, in order, by kernels on the device (not by the CPU
        # pool's threads)
        return isinstance(arrays[0], DeviceColumn) or super()._encode_now(arrays, nbytes)

    def _encode(self, arrays: list, field: LanceField, minor: int) -> list[tuple[int, EncodedPage, int]]:
        if isinstance(arrays[0], DeviceColumn) or (len(arrays) > 1 and any(isinstance(a, DeviceColumn) for a in arrays)):
            if not all(isinstance(a, DeviceColumn) for a in arrays):
                arrays = [a.to_arrow() if isinstance(a, DeviceColumn) else a for a in arrays]
            else:
                got = encode_device_field(arrays, field, minor)
                if not isinstance(got[0], pa.Array):
                    return got  # type: ignore[return-value]
                arrays = got  # the device encoder handed the field back as Arrow arrays
        return encode_field_rows(arrays, field, minor)
