# SPDX-License-Identifier: Apache-2.0
"""The storage layer: the only code that touches dataset bytes.

- :mod:`lance_gpu.io.store`: the :class:`ObjectStore` protocol, read/write handles, counters.
- :mod:`lance_gpu.io.local`: :class:`LocalStore` (memory-mapped reads, staged atomic writes).
- :mod:`lance_gpu.io.remote`: :class:`ObstoreStore` (S3, GCS, Azure, memory, HTTP) and
  :class:`FsspecStore`.
- :mod:`lance_gpu.io.resolve`: URI + ``storage_options`` -> ``(store, root)``.
- :mod:`lance_gpu.io.faults`: :class:`FaultInjectingStore` for failure tests.
"""

from lance_gpu.io.faults import FaultInjectingStore
from lance_gpu.io.local import LOCAL, LocalStore
from lance_gpu.io.remote import FsspecStore, ObstoreStore
from lance_gpu.io.resolve import resolve
from lance_gpu.io.store import (
    ObjectMeta,
    ObjectStore,
    ReadHandle,
    StoreStats,
    WriteHandle,
    join,
    open_with_tail,
)

__all__ = [
    "LOCAL",
    "FaultInjectingStore",
    "FsspecStore",
    "LocalStore",
    "ObjectMeta",
    "ObjectStore",
    "ObstoreStore",
    "ReadHandle",
    "StoreStats",
    "WriteHandle",
    "join",
    "open_with_tail",
    "resolve",
]
