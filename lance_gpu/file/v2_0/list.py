# SPDX-License-Identifier: Apache-2.0
"""List: ``offsets``, ``null_offset_adjustment``, ``num_items``.

The top encoding of a list field's **offsets column**; the items are the next column(s)
(the item field's own subtree).  Each offsets page stores one unsigned **end** offset per
list (no leading 0), relative to the first item that page refers to; a null list stores
``end + null_offset_adjustment`` (the writer uses ``num_items + 1``).  ``num_items`` is the
number of items the page refers to, so the page's items start at the sum of ``num_items``
over the previous pages.  Empty offsets pages are skipped, as pylance does.

:func:`read_offsets` turns the lists ``[start, stop)`` into Arrow-style offsets (from 0),
the list validity and the item ranges to read from the items column.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.binary import normalize_ends
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    raise src.ctx.corrupt("a List encoding can only be the top of a list offsets column")


def read_offsets(file, column, start: int, stop: int, ctx: DecodeContext, page_encoding, guard):
    """``(offsets int64[n + 1], validity bool[n], item ranges [(s, e), ...])`` of lists ``[start, stop)``."""
    parts = [np.zeros(1, np.int64)]
    valid_parts = []
    ranges: list[tuple[int, int]] = []
    pos = 0
    item_base = 0
    total = 0
    for page in column.pages:
        if pos >= stop:
            break
        rows = int(page.num_rows)
        if rows <= 0:
            continue
        enc = page_encoding(page, ctx)
        if registry.variant(enc) != "list":
            raise ctx.corrupt(f"list offsets column has a '{registry.variant(enc)}' page")
        msg = enc.list
        end = pos + rows
        if end > start:
            a = max(start, pos) - pos
            b = min(stop, end) - pos
            src = PageSource(file, column, page, ctx)

            def _one(msg=msg, src=src, a=a, b=b):
                lo = a - 1 if a > 0 else 0
                raw = registry.decode_uint(msg.offsets, src, lo, b, "List offsets")
                ends, valid = normalize_ends(raw, int(msg.null_offset_adjustment), src, "List offsets")
                if a > 0:
                    base = int(ends[0])
                    ends, valid = ends[1:], valid[1:]
                else:
                    base = 0
                if ends.size and (int(ends[0]) < base or (ends.size > 1 and int(np.diff(ends).min()) < 0)):
                    raise ctx.corrupt("list end offsets run backwards")
                last = int(ends[-1]) if ends.size else base
                if msg.num_items and last > int(msg.num_items):
                    raise ctx.corrupt(f"list offset {last} beyond the page's {int(msg.num_items)} items")
                return ends, valid, base, last

            ends, valid, base, last = guard(ctx, _one)
            parts.append(ends - base + total)
            valid_parts.append(valid)
            total += last - base
            if last > base:
                s, e = item_base + base, item_base + last
                if ranges and ranges[-1][1] == s:
                    ranges[-1] = (ranges[-1][0], e)
                else:
                    ranges.append((s, e))
        pos = end
        item_base += int(msg.num_items)
    if pos < stop:
        raise ctx.corrupt(f"list offsets column holds {pos} rows, {stop} wanted")
    offsets = np.concatenate(parts)
    validity = np.concatenate(valid_parts) if valid_parts else np.zeros(0, bool)
    return offsets, validity, ranges
