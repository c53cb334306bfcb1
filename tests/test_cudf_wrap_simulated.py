# SPDX-License-Identifier: Apache-2.0
"""[CUDA simulator] :func:`lance_gpu.gpu._cudf.combined_to_plc` hands pylibcudf the read's own
buffers in pylibcudf's layout, for every column kind of the rich and the nested (lists and
structs, nulls at every level) test datasets.

cuDF needs a GPU, so here pylibcudf's ``Column`` / ``gpumemoryview`` are a recording
stand-in (a column keeps what it was built with) and the simulator's arrays stand in for
CuPy's; ``tests/gpu/cudf_buffers.assert_same_buffers`` then walks the result beside the read's
``CudfColumn``s: the same type ids, lengths, null counts and buffer addresses (no copy).  The
same walk runs against the real cuDF on a GPU (``tests/test_gpu_cudf.py``).  A subprocess: the
simulator must be on before ``numba.cuda`` loads."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import sys, tempfile, types
from pathlib import Path
sys.path.insert(0, "tests/gpu")
import numpy as np, pyarrow as pa, lance
from numba import cuda
import gpu_datasets as gd
from cudf_buffers import assert_same_buffers
import lance_gpu
import lance_gpu._device as device_mod
from lance_gpu.gpu import _array, _cudf

device_mod.gpu_unusable_reason = lambda: None  # the simulator stands in for the device


class Column:  # pylibcudf.Column as combined_to_plc calls it: (type, size, data, mask, nulls, offset, children)
    def __init__(self, dtype, size, data, mask, null_count, offset, children):
        assert offset == 0 and size >= 0 and (mask is None) == (null_count == 0), (dtype, size, null_count)
        self.dtype, self._size, self._data, self._mask, self._nulls, self._children = dtype, size, data, mask, null_count, list(children)

    def size(self): return self._size
    def data(self): return self._data
    def null_mask(self): return self._mask
    def null_count(self): return self._nulls
    def children(self): return self._children


class View:  # gpumemoryview: the address and size of what it views
    def __init__(self, arr):
        self.arr = arr
        self.ptr = arr._ary.__array_interface__["data"][0]
        self.size = arr.size * arr.dtype.itemsize


plc = types.SimpleNamespace(Column=Column, gpumemoryview=View, DataType=lambda tid, scale=0: (tid, scale),
                            TypeId=types.SimpleNamespace(**{k: k for k in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
                                                                            "FLOAT32", "FLOAT64", "BOOL8", "STRUCT", "LIST", "STRING", "DECIMAL128",
                                                                            "TIMESTAMP_MICROSECONDS", "TIMESTAMP_DAYS")}))
_cudf._plc = lambda: plc
real_cupy, fake_cupy = _array.cupy, types.SimpleNamespace(asarray=lambda a: a, zeros=lambda n, dtype: cuda.device_array(n, dtype))

KINDS = {"LIST": (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list), "STRUCT": (pa.types.is_struct,),
         "STRING": (pa.types.is_string, pa.types.is_large_string)}

def check_types(c, col, where):
    t = col.type
    for tid, tests in KINDS.items():
        if any(test(t) for test in tests):
            assert c.dtype[0] == tid, (where, c.dtype, t)
            break
    else:
        assert c.dtype[0] not in KINDS, (where, c.dtype, t)
    if pa.types.is_decimal(t):
        assert c.dtype == ("DECIMAL128", -t.scale), (where, c.dtype)
    kids = c.children()
    if pa.types.is_struct(t):
        for k, child, f in zip(kids, col.children, t):
            check_types(k, child, f"{where}.{f.name}")
    elif col.children:
        assert kids[0].dtype[0] == ("INT64" if np.dtype(col.offsets.dtype) == np.int64 else "INT32"), where
        check_types(kids[1], col.children[0], where + "[]")

root = Path(tempfile.mkdtemp())
cases = {"rich": (gd.write_rich(lance, root, "2.2"), ["id", "i32n", "f64", "b", "s", "cat", "runs", "ts", "dec", "emb", "embn", "long",
                                                      "li", "llong", "st", "const", "null_s"]),
         "nested": (gd.write_nested(lance, root), ["id", "li", "ls", "st", "lli"])}
for which, (uri, columns) in cases.items():
    cols, rows = lance_gpu.dataset(uri).scanner(columns=columns, on_cpu_fallback="raise").to_cudf_columns()
    ref = lance.dataset(uri).to_table(columns=columns)
    assert rows == ref.num_rows
    for name, col in zip(columns, cols, strict=True):
        assert col.to_arrow().equals(ref.column(name).combine_chunks()), (which, name)
        _array.cupy = lambda: fake_cupy  # only while wrapping: the read itself runs without CuPy
        try:
            c = _cudf.combined_to_plc(col)
        finally:
            _array.cupy = real_cupy
        seen = assert_same_buffers(c, col, f"{which}.{name}")
        assert seen > 0 or name == "null_s", (which, name)
        check_types(c, col, f"{which}.{name}")
    print(which, "ok", rows, "rows")
print("wrap ok")
"""


def _command() -> Command | None:
    if importlib.util.find_spec("lance") is None:
        return None
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, "-c", _SCRIPT], env, str(ROOT)


@runs_in_background(_command)
def test_combined_to_plc_wraps_the_reads_buffers_under_simulator(request: pytest.FixtureRequest) -> None:
    """(Started when collection ends, beside the rest of the suite: tests/background_runs.py.)"""
    pytest.importorskip("lance")
    proc = finished(request.node.nodeid, request.function)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "wrap ok" in proc.stdout
