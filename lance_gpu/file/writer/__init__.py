# SPDX-License-Identifier: Apache-2.0
"""Writing Lance v2 files from Arrow arrays on the CPU.

* :mod:`~lance_gpu.file.writer.container` -- :class:`HostFileWriter`, one v2 data file
  (page buffers, column metadata, global buffers, footer).
* :mod:`~lance_gpu.file.writer.shred` -- Arrow arrays to leaf columns with rep/def levels.
* :mod:`~lance_gpu.file.writer.pages` -- encoding one leaf page (2.1 / 2.2), choosing
  encodings like pylance; :mod:`~lance_gpu.file.writer.pages_v2_0` the 2.0 pages.
* :mod:`~lance_gpu.file.writer.blobs` -- blob fields' pages and descriptors.

Device columns (GPU encoders) are added above, in :mod:`lance_gpu.write`.
"""
