# SPDX-License-Identifier: Apache-2.0
"""Host planning time of the GPU read path, per page (issue 25 item 1).

The GPU read turns every page of every requested column into device work on the host: the
page layouts (protobuf), mini-block chunk tables and headers, and the work items of every
kernel family (:mod:`lance_gpu.gpu.plan`).  This script times that host work alone --
``plan_field_leaves`` for every (fragment, field) as ``scan_device`` plans them, then
the placement of every leaf into one unit (``passplan.place_unit`` where the checkout has
it: the same column of many fragments as one table; else ``place_leaf`` per leaf) -- without staging, uploading or decoding (under the
CUDA simulator those would time the simulator, not a GPU).  Datasets (written by pylance):

``pages1000``
    one fragment, 8 columns (int64, nullable int32, float64, nullable bool, nullable
    strings, 16-d float32 embeddings, nullable int32 lists, dictionary strings) written with
    a small ``max_page_bytes`` so that the read covers about 1,000 pages;
``frags16``
    ``tests/gpu/gpu_datasets.rich_table`` (8 columns: ``id, i32n, f64, b, s, emb, li, long``)
    of 20,000 rows as 16 fragments;
``frags256``
    the same 8 columns, 20,480 rows as 256 fragments of 80 rows (many small fragments:
    per-leaf and per-file costs, one page per leaf);
``lists``
    ``tests/gpu/gpu_datasets.list_table`` (lists of ints, strings, booleans nested two deep,
    null and empty lists, null items) of 60,000 rows, small pages;
``dicts64``
    columns of page dictionaries and constant pages (low-cardinality strings, nullable ones
    and int64, all-null int32 and strings, a constant int64 and string; 2.2) of 64,000 rows
    as 64 fragments of a few pages per leaf;
``mixedlists``, ``mixedflat``
    leaves whose pages are of several kinds (``tests/gpu/gpu_datasets.mixed_list_pages_table``:
    lists beside full-zip and constant pages, 2.2; ``mixed_flat_pages_table``: strings
    whose long runs go full-zip, integers with all-null pages, 2.1), 40,000 rows in runs
    of 500 (one page per column each, 8 KiB pages);
``take2000``
    a take of 2,000 random rows of ``pages1000`` (``gpu.rows.plan_field_rows``: the pages,
    chunks and full-zip rows holding them; pylance: ``take``);
``takefz``
    a take of 2,000 random rows of ``tests/gpu/gpu_datasets.write_full_zip_pages`` (40,000
    rows, 2.2: FSST long strings, nullable and plain embeddings, long strings with all-null
    runs; a full-zip page per 250 rows): full-zip pages cut to row runs;
``takemixed``
    a take of 2,000 random rows of ``mixedflat`` (mini-block and full-zip pages of one
    leaf cut together);
``dictplain``
    ``tests/gpu/gpu_datasets.write_dictionary_beside_plain_pages`` (40,000 rows in runs of
    500, 2.2): leaves whose mini-block pages are partly dictionary pages, beside plain,
    all-null and full-zip pages.

Reported: pages and mini-block chunks planned, median wall seconds of ``--repeat`` plans
(after a warm-up: numba compilation excluded), the least CPU time of the planning thread
(``time.thread_time``: steadier than wall time on a loaded machine) and it per page and per
chunk, split into parsing (``plan_field_leaves``: protobufs, chunk tables) and placing
(``place_unit`` / ``place_leaf``: work items; and, where chunk headers are parsed on the device
(``lance_gpu.gpu.headers``), the chunk table staged for the pre-pass and the work emitted
after its readback) per page (least of each); the pre-pass itself is device work, run here
by its CPU form and left out of the times, and, for scale, pylance's ``to_table`` of the same columns in the same process
(ratio planner / pylance read, wall).  ``gather us/page``: the host side of staging, the
unit's staged items copied into host memory as the slab fill copies them (one copy per
item: :meth:`Stager.host_bytes`), also left out of the plan times.
The load average is recorded with the figures.  Output: stdout, and with ``--out FILE`` a
markdown table.

    NUMBA_ENABLE_CUDASIM=1 python3 benchmarks/bench_gpu_plan.py [--repeat 5] [--out FILE] [--cold]

``--cold`` forgets the planner's per-process page layouts and column page arrays
(:mod:`lance_gpu.gpu.pagetable`) before every plan: the cost of a first read of the files
(the parsed file metadata stays shared, as on every checkout).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gpu")]
if "--code" in sys.argv[1:-1]:  # time another checkout's planner in the same run
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))

COLUMNS = ["id", "i32n", "f64", "b", "s", "emb", "li", "long"]


def _pages_table(n: int) -> pa.Table:
    rng = np.random.default_rng(11)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i32n": pa.array(rng.integers(0, 1 << 20, n).astype(np.int32), mask=rng.random(n) < 0.2),
        "f64": pa.array(rng.standard_normal(n)),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "s": pa.array([f"{words[i % 6]}-{int(x)}" for i, x in enumerate(rng.integers(0, 10**6, n))], mask=rng.random(n) < 0.1),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(16 * n).astype(np.float32)), 16),
        "li": pa.array([None if i % 7 == 0 else [int(v) for v in rng.integers(0, 1000, i % 4)] for i in range(n)], pa.list_(pa.int32())),
        "cat": pa.array(words[rng.integers(0, 6, n)]),
    })


def write_data(root: Path) -> dict[str, tuple]:
    import lance
    from gpu_datasets import rich_table

    out = {}
    uri = root / "pages1000"
    if not uri.exists():
        tbl = _pages_table(137_000)
        reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=1000))
        lance.write_dataset(reader, str(uri), data_storage_version="2.1", max_rows_per_group=1000,
                            max_page_bytes=16 * 1024, data_cache_bytes=8 * 16 * 1024)
    out["pages1000"] = (str(uri), ["id", "i32n", "f64", "b", "s", "emb", "li", "cat"])
    uri = root / "frags16"
    if not uri.exists():
        tbl = rich_table(20_000, seed=3).select(COLUMNS)
        lance.write_dataset(tbl, str(uri), data_storage_version="2.1", max_rows_per_file=1250)
    out["frags16"] = (str(uri), COLUMNS)
    uri = root / "frags256"
    if not uri.exists():
        tbl = rich_table(256 * 80, seed=4).select(COLUMNS)
        lance.write_dataset(tbl, str(uri), data_storage_version="2.1", max_rows_per_file=80)
    out["frags256"] = (str(uri), COLUMNS)
    uri = root / "lists"
    if not uri.exists():
        from gpu_datasets import list_table, write_lists

        write_lists(lance, str(uri), list_table(60_000, seed=5, depth=2), "2.1", rows_per_file=60_000, page_bytes=16 * 1024, batch=1000)
    out["lists"] = (str(uri), ["i", "li", "ls", "lb", "l16"])
    uri = root / "dicts64"
    if not uri.exists():
        tbl = _dicts_table(64_000)
        reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=1000))
        lance.write_dataset(reader, str(uri), data_storage_version="2.2", max_rows_per_file=1000, max_page_bytes=2048,
                            data_cache_bytes=8 * 2048)
    out["dicts64"] = (str(uri), ["cat", "catn", "code", "nulls", "snulls", "const", "sconst"])
    from gpu_datasets import write_mixed_flat_pages, write_mixed_list_pages

    # (written once under --data: each writer names its directory by version and rows)
    got = root / "mixed_list_pages_2.2_40000"
    out["mixedlists"] = (str(got) if got.exists() else write_mixed_list_pages(lance, root, "2.2", n=40_000), ["ls", "li", "lc", "ln"])
    got = root / "mixed_flat_pages_2.1_40000"
    out["mixedflat"] = (str(got) if got.exists() else write_mixed_flat_pages(lance, root, "2.1", n=40_000), ["s", "i", "e", "c"])
    take = np.unique(np.random.default_rng(13).integers(0, 137_000, 2000))
    out["take2000"] = (out["pages1000"][0], out["pages1000"][1], take)  # type: ignore[assignment]
    from gpu_datasets import write_dictionary_beside_plain_pages, write_full_zip_pages

    got = root / "full_zip_pages_2.2_40000"
    uri_fz = str(got) if got.exists() else write_full_zip_pages(lance, root, "2.2", n=40_000)
    take = np.unique(np.random.default_rng(14).integers(0, 40_000, 2000))
    out["takefz"] = (uri_fz, ["id", "long", "embn", "emb", "gap"], take)
    out["takemixed"] = (out["mixedflat"][0], out["mixedflat"][1], take)
    got = root / "dictionary_beside_plain_2.2_40000"
    out["dictplain"] = (str(got) if got.exists() else write_dictionary_beside_plain_pages(lance, root, "2.2", n=40_000),
                        ["s", "li", "iv", "ls"])
    return out


def _dicts_table(n: int) -> pa.Table:
    from gpu_datasets import dictionary_constant_table

    return dictionary_constant_table(n, seed=12)


def plan_read(ds, names: list[str], phases: list[float] | None = None, take: np.ndarray | None = None) -> tuple[int, int]:
    """Plan a full read of ``names`` as ``scan_device`` does (no staging; ``take``: of these
    sorted rows of a one-fragment dataset); returns (pages, chunks); ``phases`` gets the CPU
    seconds of parsing (``plan_field_leaves``) and of placing (``place_unit`` or ``place_leaf``)."""
    from lance_gpu.gpu.plan import UnitPlan, place_leaf, plan_field_leaves
    from lance_gpu.gpu.rows import plan_field_rows

    snap = ds._snapshot
    arrow_fields = {f.name: snap.schema.field(f.name) for f in snap.lance_schema.fields}
    fields = [f for f in snap.lance_schema.fields if f.name in names]
    leaves = []
    t0 = time.thread_time()
    for frag in snap.fragments:
        for f in fields:
            src = frag.field_source(f)
            reader = frag.file_reader(src.path)
            if take is None:
                leaves.extend(plan_field_leaves(reader, arrow_fields[f.name], src.columns))
            else:
                leaves.extend(plan_field_rows(reader, arrow_fields[f.name], src.columns, take)[0])
    t1 = time.thread_time()
    unit = UnitPlan()
    try:  # the unit's placement as scan_device's: the same column of its fragments as one table
        from lance_gpu.gpu.passplan import place_unit
    except ImportError:  # a checkout that places leaf by leaf
        for leaf in leaves:
            place_leaf(unit, leaf)
    else:
        place_unit(unit, leaves)
    device = gather = 0.0  # the device pre-pass's own work (stood in for by its CPU form): not the host's
    device_chunks = 0
    if getattr(unit, "device_pages", None) or getattr(unit, "device_blocks", None):
        from lance_gpu.gpu import headers

        headers.stage(unit)  # host: the chunk table, staged with the unit's bytes
        table = unit.chunk_table[0]
        g0 = time.thread_time()
        staged = unit.stage.host_bytes()  # the staging threads' gather (the slab fill's per-item copies)
        gather = time.thread_time() - g0
        d0 = time.thread_time()
        headers.parse_on_host(table, staged)  # the device's part
        device = time.thread_time() - d0 + gather
        headers.check(table)  # host, after the one readback: the work of every device-parsed page
        if hasattr(headers, "settle_levels"):  # list leaves' level regions, from the in-band counts
            headers.settle_levels(unit, table)
        headers.emit(unit, table)
        device_chunks = table.nchunks
    if phases is not None:
        if not gather:
            g0 = time.thread_time()
            unit.stage.host_bytes()
            gather = time.thread_time() - g0
            device += gather
        phases[:] = [t1 - t0, time.thread_time() - t1 - device, device, gather]
    pages = sum(leaf.num_pages for leaf in leaves)
    # chunks of the pages the host parsed (a checkout with per-page plans: ``leaf.pages``), and of
    # those the device pre-pass parses (whose chunk layouts live in the chunk table alone)
    host_chunks = sum(int(p.parsed["counts"].size) for leaf in leaves for p in getattr(leaf, "pages", ())
                      if "counts" in p.parsed and "bufs" in p.parsed)
    chunks = host_chunks + device_chunks
    return pages, chunks


def _forget_layouts() -> None:
    try:
        from lance_gpu.gpu import pagetable
    except ImportError:  # a checkout without the shared layouts
        return
    pagetable.clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data", default=str(HERE / "data" / "gpu_plan"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--code", default=None, help="another checkout whose lance_gpu to time")
    ap.add_argument("--label", default="")
    ap.add_argument("--only", help="comma-separated data names to time (default: all)")
    ap.add_argument("--cold", action="store_true",
                    help="forget the planner's shared page layouts and column page arrays before every plan "
                         "(lance_gpu.gpu.pagetable, where the checkout has it): a first read's cost")
    args = ap.parse_args()
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    sets = write_data(root)
    if args.only:
        sets = {name: sets[name] for name in args.only.split(",")}
    import lance

    import lance_gpu

    rows = []
    for name, (uri, cols, *take) in sets.items():
        times, cpu, ptimes, parse, place, gather = [], [], [], [], [], []
        for r in range(args.repeat + 1):
            ds = lance_gpu.dataset(uri)
            if args.cold:
                _forget_layouts()
            c0 = time.thread_time()
            t0 = time.perf_counter()
            phases: list[float] = []
            pages, chunks = plan_read(ds, cols, phases, *take)
            t1 = time.perf_counter()
            c1 = time.thread_time()
            if take:
                lance.dataset(uri).take(take[0], columns=cols)
            else:
                lance.dataset(uri).to_table(columns=cols)
            t2 = time.perf_counter()
            if r:
                times.append(t1 - t0 - phases[2])
                cpu.append(c1 - c0 - phases[2])
                parse.append(phases[0])
                place.append(phases[1])
                gather.append(phases[3])
                ptimes.append(t2 - t1)
        t = statistics.median(times)
        c = min(cpu)
        p = statistics.median(ptimes)
        rows.append((name, len(lance.dataset(uri).get_fragments()), pages, chunks, t, c, 1e6 * c / pages,
                     1e6 * c / max(chunks, 1), 1e6 * min(parse) / pages, 1e6 * min(place) / pages, p, t / p,
                     1e6 * min(gather) / pages))
    load = os.getloadavg()
    head = ("| data | fragments | pages | chunks | plan s (median wall) | plan CPU s (min) | CPU us/page | CPU us/chunk "
            "| parse us/page | place us/page | pylance to_table s | plan / pylance (wall) | gather us/page |")
    cold = ", cold: shared layouts forgotten before every plan" if args.cold else ""
    lines = [f"{args.label}: {Path(lance_gpu.__file__).parent.parent}{cold} (load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.repeat} repeats)", "", head,
             "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.1f} | {r[7]:.2f} | {r[8]:.1f} "
                     f"| {r[9]:.1f} | {r[10]:.4f} | {r[11]:.2f} | {r[12]:.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text + "\n\n")


if __name__ == "__main__":
    main()
