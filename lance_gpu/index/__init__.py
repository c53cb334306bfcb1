# SPDX-License-Identifier: Apache-2.0
"""Indices of a dataset version: their metadata and the scalar index lookups a scan uses.

* :mod:`~lance_gpu.index.metadata` -- the manifest's index section: type names, uuids,
  fragment bitmaps, pylance's ``list_indices`` / ``describe_indices``.
* :mod:`~lance_gpu.index.rowset` -- row-address sets and their serialized form.
* :mod:`~lance_gpu.index.files` -- reading index files (standalone Lance files).
* :mod:`~lance_gpu.index.scalar` -- BTree, Bitmap and LabelList readers (their file layouts).
* :mod:`~lance_gpu.index.query` -- the rows a filter's indexed terms select.

This package sits above the table and file layers and below ``scan``; building indices
and committing them is :mod:`lance_gpu.write.indices`.
"""

from __future__ import annotations
