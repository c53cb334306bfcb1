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

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_names

if TYPE_CHECKING:
    from lance_gpu.index import files as files
    from lance_gpu.index import metadata as metadata
    from lance_gpu.index import query as query
    from lance_gpu.index import rowset as rowset
    from lance_gpu.index import scalar as scalar

# The submodules load on first use (``index.metadata``...; :mod:`lance_gpu._lazy`): a scan
# of a dataset without indices loads none of them.
__getattr__ = lazy_names(__name__, {})
