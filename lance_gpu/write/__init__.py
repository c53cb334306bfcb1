# SPDX-License-Identifier: Apache-2.0
"""The write side: Arrow data to Lance data files (2.1 / 2.2) and committed versions.

* :mod:`~lance_gpu.write.dataset_writer` -- :func:`write_version` (create / append /
  overwrite, streaming, file splitting; ``lance_gpu.write_dataset`` wraps it).
  Nothing in this package imports :mod:`lance_gpu.dataset`.
* :mod:`~lance_gpu.write.file_writer` -- :class:`LanceFileWriter`, one v2 data file from
  Arrow or device columns (the container and CPU page encoders are
  :mod:`lance_gpu.file.writer`'s; device pages :mod:`~lance_gpu.write.device_pages`).
* :mod:`~lance_gpu.write.inputs` -- every input kind pylance takes, cast to the schema.
* :mod:`~lance_gpu.write.fragments` -- :func:`write_fragments` / :func:`create_fragment`:
  distributed writes (tasks write fragments, one ``LanceDataset.commit`` publishes them).
* :mod:`~lance_gpu.write.operations` -- delete, restore, drop / alter / add columns (the
  ``LanceDataset`` methods), each one transaction of :mod:`lance_gpu.txn`, planned on a
  :class:`~lance_gpu.table.snapshot.TableSnapshot` and returning the committed one.
* :mod:`~lance_gpu.write.compaction` -- ``ds.optimize.compact_files``.
* :mod:`~lance_gpu.write.index_remap` -- indices across a compaction (BTree remapping).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_dir, lazy_names

if TYPE_CHECKING:
    from lance_gpu.write.dataset_writer import DatasetExistsError, write_version
    from lance_gpu.write.file_writer import LanceFileWriter
    from lance_gpu.write.fragments import create_fragment, discard_fragments, write_fragments

__all__ = [
    "DatasetExistsError",
    "LanceFileWriter",
    "create_fragment",
    "discard_fragments",
    "write_version",
    "write_fragments",
]

# Every name, and every submodule (``write.operations``...), loads on first use: a process that
# only reads never imports the writers, their encoders or the numba kernels behind them.
_LAZY = {
    "DatasetExistsError": ".dataset_writer", "write_version": ".dataset_writer", "LanceFileWriter": ".file_writer",
    "create_fragment": ".fragments", "discard_fragments": ".fragments", "write_fragments": ".fragments",
}
__getattr__ = lazy_names(__name__, _LAZY)
__dir__ = lazy_dir(__name__, _LAZY)
