# SPDX-License-Identifier: Apache-2.0
"""The GPU read path: Lance pages decoded by CUDA kernels into device columns, handed out as
``cudf.DataFrame`` (zero copy), Arrow (a host copy), CuPy arrays or DLPack.

Importing this package loads no CUDA library (CuPy, cuDF, ``numba.cuda`` are imported on
first use), so ``lance_gpu._device.gpu_unusable_reason`` can import it to learn that the
decoder exists.  Modules:

* :mod:`.plan` -- decode plans (a table of each leaf's pages) from the file layer's parsed layouts, grouped by
  kernel family; which encodings decode on the GPU, and why others do not, their device planning says
  (``lance_gpu.file.encodings.<name>.gpu_plan``, registered in ``lance_gpu.file.encodings.ENCODINGS``);
* :mod:`.staging` -- the requested byte ranges gathered into pinned host memory and sent to
  the device in large, double-buffered transfers;
* :mod:`.worktable` -- every page work item of a read unit as one struct-of-arrays table,
  uploaded in one copy, which the launches index;
* :mod:`.decode` -- one launch per kernel family over every page of a read unit;
* :mod:`.assemble` -- levels to validity and offsets, fields to device column trees;
* :mod:`.columns` -- device columns: slice, Arrow, CuPy / DLPack; :mod:`.gathered` -- a
  selection of a column's rows (deletions, takes, filters) kept on the host until combined;
* :mod:`.combine` -- a read's pieces into one set of buffers allocated once (cuDF's layout
  for ``to_cudf``: int32 offsets, bitmask words, null counts; or device batches of a
  requested size across fragments); :mod:`._cudf` wraps them without a copy;
  :mod:`.readback` copies such a read back to the host in one copy per allocation
  (``to_table(device="gpu")``, :func:`.device_table.read_to_arrow`);
* :mod:`.memory` -- the device memory budget and the RMM allocator;
* :mod:`.read` -- the end-to-end scan used by ``LanceDataset.to_cudf`` / ``to_table(device="gpu")``.

Usage::

    import lance_gpu
    df = lance_gpu.dataset("/data/events.lance").to_cudf(columns=["id", "text"], filter="id > 10")
    tbl = lance_gpu.dataset("/data/events.lance").to_table(device="gpu")      # Arrow on the host
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_names
from lance_gpu.errors import CpuDecodeWarning
from lance_gpu.gpu.memory import memory_budget, memory_limit, set_memory_limit

if TYPE_CHECKING:
    from lance_gpu.gpu import columns as columns
    from lance_gpu.gpu import device_table as device_table
    from lance_gpu.gpu import gathered as gathered

# The submodules load on first use (``gpu.columns``...; :mod:`lance_gpu._lazy`): the scan
# layer refers to them through this package, so a CPU read loads none of them.
__getattr__ = lazy_names(__name__, {})


def scan_device(ds, fields, **kwargs):
    """See :func:`lance_gpu.gpu.read.scan_device`."""
    from lance_gpu.gpu.read import scan_device as _scan

    return _scan(ds, fields, **kwargs)


__all__ = ["CpuDecodeWarning", "memory_budget", "memory_limit", "scan_device", "set_memory_limit"]
