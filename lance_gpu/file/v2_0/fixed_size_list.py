# SPDX-License-Identifier: Apache-2.0
"""FixedSizeList: ``dimension``, ``items``, ``has_validity``.

The items are ``dimension`` values per row, encoded as one array of ``rows * dimension``
values.  FSL validity, when there is any, comes from a Nullable around this node;
``has_validity`` is informational (pylance's 2.0 reader ignores it too).
"""

from __future__ import annotations

import pyarrow as pa

from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import FSL
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    dim = int(msg.dimension)
    if dim <= 0:
        raise src.ctx.corrupt(f"FixedSizeList dimension {dim}")
    item_type = arrow_type.value_type if arrow_type is not None and pa.types.is_fixed_size_list(arrow_type) else None
    child = registry.decode(msg.items, src, start * dim, stop * dim, item_type)
    if child.n != (stop - start) * dim:
        raise src.ctx.corrupt(f"FixedSizeList items: decoded {child.n}, expected {(stop - start) * dim}")
    return FSL(child, dim, stop - start)
