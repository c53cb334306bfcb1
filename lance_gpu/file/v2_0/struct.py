# SPDX-License-Identifier: Apache-2.0
"""SimpleStruct (``struct {}``): the header column of a struct field.

In 2.0 a (non-packed) struct field has a header column whose pages have no buffers, only a
row count, and every child field has its own column(s) after it.  2.0 cannot store struct
validity (pylance refuses to write a null struct), so the struct is assembled from its
children with no nulls of its own.  A struct whose header page is ``packed_struct`` is
instead a single column decoded by :mod:`lance_gpu.file.v2_0.packed_struct`.
"""

from __future__ import annotations

from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.v2_0 import registry


def decode(msg, src, start: int, stop: int, arrow_type):
    raise src.ctx.corrupt("a struct header encoding cannot hold values")


def header_rows(column, ctx: DecodeContext, page_encoding) -> int:
    """Check the header column's pages and return its row count."""
    total = 0
    for page in column.pages:
        kind = registry.variant(page_encoding(page, ctx))
        if kind != "struct":
            raise ctx.corrupt(f"struct header column has a '{kind}' page")
        total += int(page.num_rows)
    return total


def is_packed(column, ctx: DecodeContext, page_encoding) -> bool:
    """Whether a struct field's (first) column is a packed struct."""
    for page in column.pages:
        return registry.variant(page_encoding(page, ctx)) == "packed_struct"
    return False
