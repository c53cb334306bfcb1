# SPDX-License-Identifier: Apache-2.0
"""Walking a ``pylibcudf.Column`` beside the :class:`lance_gpu.gpu.combine.CudfColumn` it was
made from, to show that ``to_cudf`` hands cuDF the read's own buffers (same pointers, down
to every child, offsets and mask) rather than copies.

pylibcudf's layout, as :func:`lance_gpu.gpu._cudf.combined_to_plc` builds it: fixed width --
``data()`` the values; STRING -- ``data()`` the chars, ``children()[0]`` the offsets; LIST --
``children()`` = [offsets, items]; STRUCT -- ``children()`` the fields; ``null_mask()`` the
bitmask words where the column has nulls.  Used on a GPU with cuDF (``tests/test_gpu_cudf.py``)
and under the CUDA simulator with a recording stand-in for pylibcudf
(``tests/test_cudf_wrap_simulated.py``)."""

from __future__ import annotations

import pyarrow as pa


def plc_column(series):
    """The ``pylibcudf.Column`` a cuDF series holds, its buffers unwrapped (no copy)."""
    col = series._column
    try:
        return col.to_pylibcudf()
    except TypeError:  # cuDF before 26 asks for an access mode
        return col.to_pylibcudf(mode="read")


def buffer_ptr(buf) -> int:
    """The address of a buffer: a pylibcudf span's ``ptr``, a device array's
    ``__cuda_array_interface__``, or (a simulator array) the host array it wraps."""
    ptr = getattr(buf, "ptr", None)
    if ptr is not None:
        return int(ptr)
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return int(getattr(buf, "_ary", buf).__array_interface__["data"][0])


def assert_same_buffers(plc_col, col, where: str) -> int:
    """Assert that ``plc_col`` points at ``col``'s buffers, recursively, with ``col``'s length
    and null count; returns how many buffers were compared."""
    assert col.host is None, f"{where}: a host copy"
    assert plc_col.size() == col.length, f"{where}: {plc_col.size()} rows, expected {col.length}"
    seen = 0
    t = col.type.storage_type if isinstance(col.type, pa.BaseExtensionType) else col.type
    nested = pa.types.is_struct(t) or bool(col.children)  # no data buffer of its own in cuDF (a fixed-size
    # list's ``data`` is its items' bytes, which its child views)
    if col.data is not None and col.data.size and not nested:
        assert plc_col.data() is not None and buffer_ptr(plc_col.data()) == buffer_ptr(col.data), f"{where}: data copied"
        seen += 1
    if col.mask is not None and col.null_count:
        assert plc_col.null_mask() is not None and buffer_ptr(plc_col.null_mask()) == buffer_ptr(col.mask), f"{where}: mask copied"
        assert plc_col.null_count() == col.null_count, f"{where}: null count"
        seen += 1
    else:
        assert plc_col.null_count() == 0, f"{where}: nulls where the read has none"
    kids = plc_col.children()
    if nested:
        assert plc_col.data() is None, f"{where}: a nested column with a data buffer"
    if pa.types.is_struct(t):
        assert len(kids) == len(col.children) == t.num_fields, where
        seen += sum(assert_same_buffers(k, c, f"{where}.{f.name}") for k, c, f in zip(kids, col.children, t, strict=True))
    elif col.offsets is not None:
        assert kids[0].size() == col.length + 1, f"{where}: offsets length"
        if col.offsets.size:
            assert buffer_ptr(kids[0].data()) == buffer_ptr(col.offsets), f"{where}: offsets copied"
            seen += 1
        if col.children:  # lists, maps, fixed-size lists: [offsets, items]
            assert len(kids) == 2, where
            seen += assert_same_buffers(kids[1], col.children[0], f"{where}[]")
        else:
            assert len(kids) == 1, where
    else:
        assert not kids, where
    return seen


def frame_bytes(frame) -> int:
    """Bytes of every buffer of a ``cudf.DataFrame``'s columns (children included)."""

    def walk(c) -> int:
        own = sum(int(b.size) for b in (c.data(), c.null_mask()) if b is not None)
        return own + sum(walk(k) for k in c.children())

    return sum(walk(plc_column(frame[name])) for name in frame.columns)
