# SPDX-License-Identifier: Apache-2.0
"""IVF vector indices across a compaction (see :mod:`lance_gpu.write.index_remap`).

The index's storage rows (``auxiliary.idx``, layout in :mod:`lance_gpu.scan.vector_index`)
carry row addresses; a compaction moves rows to new fragments and drops deleted ones.  The
remapped copy in ``_indices/<new uuid>/`` keeps every partition's rows in their order with their
new addresses, deleted rows left out: the ``IVF`` protobuf gets the new partition lengths and
offsets, PQ codes are transposed again per partition, the codebook and the other schema
metadata are copied, and ``index.idx`` (the centroids) is copied byte for byte.  HNSW indices
(whose graphs number the rows) are refused before anything is written.  With stable row ids
the stored ids stay valid and compaction only moves the fragment bitmap.
"""

from __future__ import annotations

import json
import uuid as _uuid

import numpy as np
import pyarrow as pa

from lance_gpu._proto import index_vector_pb2, table_pb2
from lance_gpu.errors import CorruptFileError, UnsupportedFeatureError
from lance_gpu.file.container import LanceFileReader
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.scan.vector_index import AUX_FILE, INDEX_FILE, ROW_ID, read_lance_file
from lance_gpu.table.schema import LanceSchema
from lance_gpu.write.file_writer import LanceFileWriter
from lance_gpu.write.row_address_map import RowAddressMap

__all__ = ["check_vector_remappable", "remap_ivf"]


def check_vector_remappable(index: table_pb2.IndexMetadata, what: str) -> None:
    """Raise :class:`UnsupportedFeatureError` for an index :func:`remap_ivf` cannot remap."""
    details = index_vector_pb2.VectorIndexDetails()
    try:
        details.ParseFromString(bytes(index.index_details.value))
    except Exception:  # protobuf DecodeError: an older message of other fields
        raise UnsupportedFeatureError(f"{what} (vector index details of an unknown form)") from None
    if details.HasField("hnsw"):
        raise UnsupportedFeatureError(f"{what} (an HNSW vector index: its graphs are not remapped)")
    if {f.path for f in index.files} - {AUX_FILE, INDEX_FILE}:
        raise UnsupportedFeatureError(f"{what} (a vector index of files {sorted(f.path for f in index.files)})")


def remap_ivf(
    store: ObjectStore, root: str, index: table_pb2.IndexMetadata, mapping: RowAddressMap, written: list[str]
) -> tuple[bytes, list[table_pb2.IndexFile]]:
    """Write the remapped copy of IVF index ``index`` (see the module docstring); returns the
    new uuid's 16 bytes and its files.  Every key is appended to ``written`` before it is written."""

    src = join(root, "_indices", str(_uuid.UUID(bytes=bytes(index.uuid.uuid))))
    reader = LanceFileReader(join(src, AUX_FILE), store)
    try:
        table, meta = read_lance_file(reader)
        fd = reader.descriptor
        schema = LanceSchema.from_protos(fd.schema.fields, dict(fd.schema.metadata), reader.path)
        minor = reader.version.minor
        ivf_at = int(meta["lance:ivf"])
        buffers = [reader.global_buffer(i) for i in range(1, reader.num_global_buffers)]
        storage = json.loads(json.loads(meta["storage_metadata"])[0])
    except (KeyError, ValueError, IndexError) as exc:
        raise CorruptFileError(reader.path, f"not an IVF storage file ({exc})") from None
    finally:
        reader.close()
    ivf = index_vector_pb2.IVF()
    ivf.ParseFromString(buffers[ivf_at - 1])
    offsets = np.asarray(ivf.offsets, np.int64)
    lengths = np.asarray(ivf.lengths, np.int64)
    ids = table.column(ROW_ID).to_numpy().astype(np.uint64)
    new_ids, keep = mapping.apply(ids)
    code_name = table.schema.names[1]
    codes = table.column(code_name).combine_chunks()
    width = codes.type.list_size
    values = codes.values.slice(codes.offset * width, len(codes) * width).to_numpy(zero_copy_only=False)
    values = values.reshape(len(codes), width)
    transposed = code_name == "__pq_code" and bool(storage.get("transposed", False))
    if transposed:  # (m, n) per partition -> (n, m)
        flat = values.reshape(-1)
        rows = np.empty_like(values)
        for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
            rows[off:off + n] = flat[off * width:(off + n) * width].reshape(width, n).T
        values = rows
    part = np.repeat(np.arange(lengths.size), lengths)[keep]
    values, new_ids = values[keep], new_ids[keep]
    new_lengths = np.bincount(part, minlength=lengths.size).astype(np.int64)
    new_offsets = np.concatenate([[0], np.cumsum(new_lengths)[:-1]]).astype(np.int64)
    if transposed:
        out = np.empty(values.size, values.dtype)
        for off, n in zip(new_offsets.tolist(), new_lengths.tolist(), strict=True):
            out[off * width:(off + n) * width] = values[off:off + n].T.ravel()
        flat_values = out
    else:
        flat_values = values.reshape(-1)
    new_table = pa.Table.from_arrays(
        [pa.array(new_ids, pa.uint64()),
         pa.FixedSizeListArray.from_arrays(pa.array(flat_values, codes.type.value_type), width)],
        schema=table.schema)
    ivf.ClearField("offsets")
    ivf.ClearField("lengths")
    ivf.offsets.extend(int(o) for o in new_offsets)
    ivf.lengths.extend(int(n) for n in new_lengths)
    buffers[ivf_at - 1] = ivf.SerializeToString()

    new_uuid = _uuid.uuid4()
    dest = join(root, "_indices", str(new_uuid))
    files = []
    key = join(dest, AUX_FILE)
    written.append(key)
    writer = LanceFileWriter(key, schema, minor if minor in (0, 1, 2) else 2, store=store)
    try:
        for buf in buffers:
            writer.add_global_buffer(buf)
        if new_table.num_rows:
            writer.write(new_table)
        files.append(table_pb2.IndexFile(path=AUX_FILE, size_bytes=writer.finish()))
    except BaseException:
        writer.abort()
        raise
    data = store.get(join(src, INDEX_FILE))
    key = join(dest, INDEX_FILE)
    written.append(key)
    store.put(key, bytes(data))
    files.append(table_pb2.IndexFile(path=INDEX_FILE, size_bytes=len(data)))
    return new_uuid.bytes, files
