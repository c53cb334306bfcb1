# SPDX-License-Identifier: Apache-2.0
"""Device traffic of gathered ``to_cudf`` reads, counted under the CUDA simulator (issue 25
item 3; figures: ``benchmarks/results/gpu_gatherfinal_s41.md``).

Run from a source tree's root (the tree measured)::

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 benchmarks/sim_gather_traffic.py

One line per (budget table, fragments, selection: a filter, a take of a quarter of the rows,
deleted rows -- runs of at most 4 rows and 40 rows, or 1 in 97): the whole read's launches,
blocking copies back, bytes allocated on the device, and the bytes written by gathers (gather
kernels called by ``gpu/columns.py`` / ``gpu/validity.py``'s takes, before the gatherfinal
branch) plus combining's copies, row gathers, offsets and masks; and the descriptors
(segments) of combining's launches that write offsets and string bytes (range copies, offsets
rebases, string gathers by position: ``offset_byte_segments`` of ``tests/gpu/traffic.py``).
"""

import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path[:0] = ["tests/gpu", "tests"]
import gpu_datasets as gd  # noqa: E402
import lance  # noqa: E402
import numpy as np  # noqa: E402
from traffic import count_device_traffic  # noqa: E402

import lance_gpu  # noqa: E402
import lance_gpu._device as dm  # noqa: E402
from lance_gpu.scan.scanner import scanner_for  # noqa: E402

dm.gpu_unusable_reason = lambda: None
BUDGET_COLUMNS = ["id", "i32n", "f64", "b", "s", "emb", "li", "long"]
root = Path(tempfile.mkdtemp())
tables = {
    "mixed": (gd.rich_table(640, seed=3).select(BUDGET_COLUMNS), "id"),
    "flat": (gd.flat_nullable_table(320, seed=3), "bp"),
    "list": (gd.list_table(640, seed=3, depth=2), "i"),
}


def written(where: Counter) -> int:
    """Bytes written by the takes' gathers and by combining (see the module docstring)."""
    n = 0
    for (key, caller), v in where.items():
        if key == "gather_bytes" and ("gpu/columns.py:take" in caller or "gpu/validity.py:take" in caller):
            n += v
        elif key in ("copy_bytes", "offsets_bytes", "mask_bytes") and caller.startswith("gpu/combine.py"):
            n += v
    return n


def count(what: str, read) -> None:
    read()  # warm
    where: Counter = Counter()
    with count_device_traffic(where) as c:
        _cols, rows = read()
    segs = sum(v for (key, caller), v in where.items() if key == "offset_byte_segments" and caller.startswith("gpu/combine.py"))
    print(f"{what:32s} rows {rows:4d}  launches {c['launches']:3d}  d2h {c['d2h_blocking']:2d}  "
          f"alloc {c['alloc_bytes']:7d}  written {written(where):7d}  offsets/bytes descriptors {segs:5d}", flush=True)


for name, (table, key) in tables.items():
    for nfrag in (2, 16):
        uri = str(root / f"{name}_{nfrag}")
        lance.write_dataset(table, uri, max_rows_per_file=table.num_rows // nfrag)
        ds = lance_gpu.dataset(uri)
        flt = f"{key} % 3 = 1"
        count(f"{name} {nfrag} filter", lambda ds=ds, flt=flt: ds.scanner(filter=flt, on_cpu_fallback="raise").to_cudf_columns())
        rng = np.random.default_rng(5)
        frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
        per = table.num_rows // nfrag
        sel = {fid: np.sort(rng.choice(per, size=per // 4, replace=False)).astype(np.int64) for fid in frags}
        snap = ds._snapshot
        count(f"{name} {nfrag} take", lambda snap=snap, sel=sel: scanner_for(snap, device="gpu", on_cpu_fallback="raise", selections=sel).to_cudf_columns())
        dele = str(root / f"{name}_{nfrag}_del")
        shutil.copytree(uri, dele)
        lance.dataset(dele).delete(f"{key} % 5 = 1 OR ({key} >= 100 AND {key} < 140)")
        dd = lance_gpu.dataset(dele)
        count(f"{name} {nfrag} deletions", lambda dd=dd: dd.scanner(on_cpu_fallback="raise").to_cudf_columns())
        sparse = str(root / f"{name}_{nfrag}_sparse")
        shutil.copytree(uri, sparse)
        lance.dataset(sparse).delete(f"{key} % 97 = 5")
        sd = lance_gpu.dataset(sparse)
        count(f"{name} {nfrag} sparse deletions", lambda sd=sd: sd.scanner(on_cpu_fallback="raise").to_cudf_columns())
