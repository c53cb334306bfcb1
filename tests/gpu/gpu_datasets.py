# SPDX-License-Identifier: Apache-2.0
"""Small pylance-written datasets for the GPU read path (simulator and real-GPU tests).

Kept small on purpose: under the numba CUDA simulator every CUDA thread is a Python thread.
Together they make pylance 14 write every layout and encoding the GPU decoder covers
(see :data:`EXPECTED_ENCODINGS`): mini-block Flat / FastLanes bit-packing / Variable /
FSST / page dictionaries / RLE / FixedSizeList, levels bit-packed, run-length encoded or
flat, full-zip fixed width (embeddings) and variable width with control words and
repetition, constant and all-null pages; with nulls, lists, structs, 2 fragments and a
deletion file.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa

WORDS = ["alpha", "beta", "gamma", "delta", "", "épsilon ünïcode ✓", "x" * 40]
FSST_WORDS = ["lance", "gpu", "decode", "column", "page", "chunk", "string", "value"]

# What the datasets below must exercise (checked by test_encodings_exercised).
EXPECTED_ENCODINGS = {
    "mini_block_layout", "full_zip_layout", "constant_layout", "inline_bitpacking", "flat", "variable",
    "fsst", "dictionary", "rle", "fixed_size_list", "bits_rep", "bits_def", "inline_value",
}


def rich_table(n: int, *, seed: int, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)

    def mask(p: float = 0.2) -> np.ndarray:
        return rng.random(n) < p

    strs = [WORDS[i % len(WORDS)] + str(int(x)) for i, x in enumerate(rng.integers(0, 1000, n))]
    longs = [f"{start + i:05d}-" + " ".join(FSST_WORDS[j] for j in rng.integers(0, 8, 50))[:300] for i in range(n)]
    lists = [None if i % 9 == 0 else ([] if i % 9 == 1 else [int(x) for x in rng.integers(0, 1000, i % 4)]) for i in range(n)]
    cols = {
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "i32n": pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=mask()),
        "f64": pa.array(rng.standard_normal(n)),
        "b": pa.array(rng.random(n) < 0.5, mask=mask(0.1)),
        "s": pa.array(strs, mask=mask(0.1)),
        "cat": pa.array([WORDS[i] for i in rng.integers(0, 4, n)]),
        "runs": pa.array(np.repeat(rng.integers(0, 100, n // 25 + 1), 25)[:n]),
        "ts": pa.array(1_600_000_000_000_000 + rng.integers(0, 10**9, n), pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(-10**6, 10**6, n)], pa.decimal128(10, 2)),
        "fsb": pa.array([rng.bytes(16) for _ in range(n)], pa.binary(16)),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 64).astype(np.float32)), 64),
        "embn": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 4).astype(np.float32)), 4, mask=pa.array(mask())),
        "long": pa.array(longs, mask=mask(0.1)),
        "li": pa.array(lists, pa.list_(pa.int32())),
        "llong": pa.array([None if l is None else [longs[(i + j) % n] for j in range(len(l))] for i, l in enumerate(lists)], pa.list_(pa.string())),
        "st": pa.StructArray.from_arrays(
            [pa.array(rng.integers(0, 9, n).astype(np.int16)), pa.array(strs[::-1], mask=mask(0.1))], names=["a", "b"],
            mask=pa.array(mask(0.1)),
        ),
        "const": pa.array(np.full(n, 42, np.int32)),
        "null_s": pa.nulls(n, pa.string()),
    }
    return pa.table(cols)


def write_rich(lance, root: Path, version: str) -> str:
    """Two fragments (plus an appended one), and a deletion file: ~300 live rows."""
    uri = str(root / f"rich_{version}")
    lance.write_dataset(rich_table(240, seed=1), uri, data_storage_version=version, max_rows_per_file=120)
    lance.write_dataset(rich_table(100, seed=2, start=240), uri, mode="append", data_storage_version=version)
    lance.dataset(uri).delete("id % 10 = 3 OR (id >= 50 AND id < 60) OR id = 339")
    return uri


def nested_table(n: int, *, seed: int, start: int = 0) -> pa.Table:
    """Lists and structs with nulls at every level (as ``benchmarks/bench_gpu.py``'s "nested"
    dataset, smaller): ``li`` list<int64>, ``ls`` list<string>, ``st`` struct<a: int32,
    b: string, c: list<float32>>, ``lli`` list<list<int32>>; null lists and structs, null
    fields and inner lists, null items, empty lists."""
    rng = np.random.default_rng(seed)

    def lists(count: int, most: int, items) -> pa.Array:
        nulls = rng.random(count) < 0.12
        lengths = np.where(nulls, 0, rng.integers(0, most + 1, count))
        offsets = np.zeros(count + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), items(int(offsets[-1])), mask=pa.array(nulls))

    def strs(k: int) -> pa.Array:
        return pa.array([WORDS[i % len(WORDS)] + str(i) for i in rng.integers(0, 500, k)], mask=rng.random(k) < 0.1)

    st = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=rng.random(n) < 0.1), strs(n),
         lists(n, 4, lambda k: pa.array(rng.random(k, dtype=np.float32), mask=rng.random(k) < 0.1))],
        names=["a", "b", "c"], mask=pa.array(rng.random(n) < 0.1))
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "li": lists(n, 6, lambda k: pa.array(rng.integers(-(10**9), 10**9, k), mask=rng.random(k) < 0.1)),
        "ls": lists(n, 4, strs),
        "st": st,
        "lli": lists(n, 3, lambda k: lists(k, 3, lambda j: pa.array(rng.integers(0, 100, j).astype(np.int32), mask=rng.random(j) < 0.1))),
    })


def write_nested(lance, root: Path, version: str = "2.2") -> str:
    """:func:`nested_table` in two fragments plus an appended one, with a deletion file."""
    uri = str(root / f"nested_{version}")
    lance.write_dataset(nested_table(400, seed=3), uri, data_storage_version=version, max_rows_per_file=200)
    lance.write_dataset(nested_table(150, seed=4, start=400), uri, mode="append", data_storage_version=version)
    lance.dataset(uri).delete("id % 7 = 2 OR (id >= 100 AND id < 130)")
    return uri


def write_fsst(lance, root: Path, version: str = "2.2") -> str:
    """One fragment of strings long enough (>= 32 KiB a page) for pylance to FSST them in
    mini-block chunks, nulls included."""
    uri = str(root / f"fsst_{version}")
    n = 1300
    rng = np.random.default_rng(5)
    vals = [" ".join(FSST_WORDS[j] for j in rng.integers(0, 8, 5)) + f" {i}" for i in range(n)]
    tbl = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "text": pa.array(vals, mask=rng.random(n) < 0.05)})
    lance.write_dataset(tbl, uri, data_storage_version=version)
    return uri


def write_fallback(lance, root: Path) -> str:
    """A column pylance writes with byte-stream-split (no GPU kernel) next to plain ones."""
    uri = str(root / "fallback")
    n = 160
    rng = np.random.default_rng(6)
    tbl = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "x": pa.array(rng.standard_normal(n)), "y": pa.array(rng.random(n).astype(np.float32))})
    schema = pa.schema([tbl.schema.field(0), pa.field("x", pa.float64(), metadata={"lance-encoding:compression": "zstd", "lance-encoding:bss": "on"}), tbl.schema.field(2)])
    lance.write_dataset(tbl.cast(schema), uri, max_rows_per_file=80)
    lance.dataset(uri).delete("id = 7")
    return uri


def write_v20(lance, root: Path) -> str:
    uri = str(root / "v20")
    tbl = pa.table({"id": pa.array(np.arange(50, dtype=np.int64)), "s": pa.array([f"v{i}" for i in range(50)])})
    lance.write_dataset(tbl, uri, data_storage_version="2.0")
    return uri


def write_binary(lance, root: Path) -> str:
    """Plain (Variable) binary values: the offsets are only ever read on the device."""
    uri = str(root / "binary")
    rng = np.random.default_rng(7)
    tbl = pa.table({"bin": pa.array([rng.bytes(int(k)) for k in rng.integers(0, 24, 100)], pa.binary())})
    lance.write_dataset(tbl, uri)
    return uri


def encodings_seen(uris: list[str]) -> set[str]:
    """Layouts and encodings named in the page layouts of the datasets' files."""
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.reader import parse_layout

    seen: set[str] = set()
    for uri in uris:
        for path in Path(uri, "data").glob("*.lance"):
            reader = LanceFileReader(path)
            for ci in range(reader.num_columns):
                for page in reader.column(ci).pages:
                    layout = parse_layout(page, DecodeContext(str(path), ci))
                    seen.add(layout.WhichOneof("layout"))
                    text = str(layout)
                    seen.update(t for t in EXPECTED_ENCODINGS if f"{t} " in text or f"{t}:" in text)
                    if "fsst" in text and "symbol_table" in text:
                        kind = layout.WhichOneof("layout")
                        enc = getattr(layout, kind).value_compression
                        if enc.WhichOneof("compression") == "fsst" and enc.fsst.symbol_table[0]:
                            seen.add(f"fsst-compressed-{kind}")
    return seen


def many_pages_table(n: int, *, seed: int) -> pa.Table:
    """Columns of the kinds mini-block pages hold (bit-packed and flat integers, nullable
    ones, booleans, plain, dictionary and FSST strings, lists), for :func:`write_many_pages`."""
    rng = np.random.default_rng(seed)
    longs = [" ".join(FSST_WORDS[j] for j in rng.integers(0, 8, 12)) + f" {i}" for i in range(n)]
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "small": pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=rng.random(n) < 0.2),
        "f64": pa.array(rng.standard_normal(n)),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "s": pa.array([WORDS[i % len(WORDS)] + str(int(x)) for i, x in enumerate(rng.integers(0, 10**6, n))], mask=rng.random(n) < 0.1),
        "cat": pa.array([WORDS[i] for i in rng.integers(0, 4, n)]),
        "long": pa.array(longs, mask=rng.random(n) < 0.05),
        "li": pa.array([None if i % 7 == 0 else [int(v) for v in rng.integers(0, 1000, i % 4)] for i in range(n)], pa.list_(pa.int32())),
    })


def write_many_pages(lance, root: Path, version: str, n: int = 1600) -> str:
    """One fragment whose columns span many mini-block pages each (small batches, small
    ``max_page_bytes``): tables of many pages a leaf."""
    uri = str(root / f"many_pages_{version}")
    tbl = many_pages_table(n, seed=12)
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=200))
    lance.write_dataset(reader, uri, data_storage_version=version, max_rows_per_group=200, max_page_bytes=2048,
                        data_cache_bytes=8 * 2048)
    return uri


def write_fixed_dictionaries(lance, root: Path, version: str = "2.2", n: int = 4000) -> str:
    """One fragment whose low-cardinality fixed-width columns (int64 and float64 in runs;
    2.2 writes them with page dictionaries, LZ4-compressed) and a dictionary string column
    span several small pages each, beside a nullable int32 column in runs."""
    uri = str(root / f"fixed_dictionaries_{version}")
    rng = np.random.default_rng(3)
    tbl = pa.table({
        "runs": pa.array(np.repeat(rng.integers(0, 100, n // 25 + 1), 25)[:n]),
        "r32": pa.array(np.repeat(rng.integers(0, 50, n // 10 + 1), 10)[:n].astype(np.int32), mask=rng.random(n) < 0.1),
        "f": pa.array(np.repeat(rng.standard_normal(40), n // 40 + 1)[:n]),
        "cat": pa.array([WORDS[i] for i in rng.integers(0, 3, n)]),
    })
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=500))
    lance.write_dataset(reader, uri, data_storage_version=version, max_rows_per_group=500, max_page_bytes=2048,
                        data_cache_bytes=8 * 2048)
    return uri


def _random_lists(rng: np.random.Generator, n: int, depth: int, null_p: float, empty_p: float, leaf) -> list:
    """``n`` random lists nested ``depth`` deep (null lists with probability ``null_p`` at
    every level, empty ones with ``empty_p``), their items from ``leaf(count)``."""
    out: list = []
    for _ in range(n):
        if rng.random() < null_p:
            out.append(None)
        elif rng.random() < empty_p:
            out.append([])
        else:
            k = int(rng.integers(1, 6))
            out.append(leaf(k) if depth == 1 else _random_lists(rng, k, depth - 1, null_p, empty_p, leaf))
    return out


def list_table(n: int, *, seed: int, depth: int = 1, null_p: float = 0.2, empty_p: float = 0.1) -> pa.Table:
    """A list-heavy table: lists of ints, strings and booleans nested ``depth`` deep, with
    null and empty lists at every level and null items, a list of structs and a struct
    holding a list, beside a nullable int column."""
    rng = np.random.default_rng(seed)

    def nulls(k: int) -> np.ndarray:
        return rng.random(k) < null_p

    def ints(k: int) -> list:
        return [None if z else int(x) for z, x in zip(nulls(k), rng.integers(-10**6, 10**6, k), strict=True)]

    def strs(k: int) -> list:
        return [None if z else WORDS[int(x) % len(WORDS)] * int(x % 3) for z, x in zip(nulls(k), rng.integers(0, 99, k), strict=True)]

    def bools(k: int) -> list:
        return [None if z else bool(x) for z, x in zip(nulls(k), rng.integers(0, 2, k), strict=True)]

    def nested(t: pa.DataType) -> pa.DataType:
        for _ in range(depth):
            t = pa.list_(t)
        return t

    return pa.table({
        "i": pa.array(ints(n), pa.int32()),
        "li": pa.array(_random_lists(rng, n, depth, null_p, empty_p, ints), nested(pa.int64())),
        "ls": pa.array(_random_lists(rng, n, depth, null_p, empty_p, strs), nested(pa.string())),
        "lb": pa.array(_random_lists(rng, n, 1, null_p, empty_p, bools), pa.list_(pa.bool_())),
        "l16": pa.array(_random_lists(rng, n, 1, null_p, empty_p, lambda k: [int(x) for x in rng.integers(0, 300, k)]),
                        pa.list_(pa.int16())),
        "lst": pa.array(_random_lists(rng, n, 1, null_p, empty_p, lambda k: [
            None if z else {"a": int(a), "b": w} for z, a, w in zip(nulls(k), rng.integers(0, 9, k), strs(k), strict=True)
        ]), pa.list_(pa.struct([("a", pa.int16()), ("b", pa.string())]))),
        "sl": pa.array([None if z else {"l": items, "x": x} for z, items, x in zip(
            nulls(n), _random_lists(rng, n, 1, null_p, empty_p, ints), ints(n), strict=True)],
            pa.struct([("l", pa.list_(pa.int64())), ("x", pa.int32())])),
    })


def write_lists(lance, uri: str, table: pa.Table, version: str, *, rows_per_file: int, page_bytes: int | None,
                batch: int) -> str:
    """Write ``table`` in batches of ``batch`` rows, ``rows_per_file`` rows a fragment and
    pages of at most ``page_bytes`` (None: pylance's default): page and chunk boundaries and
    fragment splits where the caller wants them."""
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=batch))
    extra = {} if page_bytes is None else {"max_page_bytes": page_bytes, "data_cache_bytes": 8 * page_bytes}
    lance.write_dataset(reader, uri, data_storage_version=version, max_rows_per_file=rows_per_file,
                        max_rows_per_group=batch, **extra)
    return uri


def mixed_list_pages_table(n: int = 4000, *, seed: int = 1, run: int = 500) -> pa.Table:
    """List columns whose pages pylance 14 writes in more than one layout (with
    :func:`write_mixed_list_pages`): ``ls`` short strings in runs of ``run`` rows between runs
    of long ones (mini-block and full-zip pages), ``li`` null in the third pair of runs (rows
    2000-2999 with the default ``run``: constant pages between mini-block ones), ``lc`` one
    constant list in the second pair (a constant page in 2.2), ``ln`` null items and null /
    empty lists beside the all-null fourth pair (definition levels of every kind).  Down to
    ``n=2000, run=250`` pylance 14 still writes every one of these layouts."""
    rng = np.random.default_rng(seed)

    def strs(i: int) -> list[str] | None:
        if i % 97 == 5:
            return None
        if (i // run) % 2:
            return [("x" * int(rng.integers(200, 400))) + str(i) for _ in range(i % 3)]
        return [str(i)] * (i % 3)

    return pa.table({
        "ls": pa.array([strs(i) for i in range(n)], pa.list_(pa.string())),
        "li": pa.array([None if i // (2 * run) == 2 else [i, i + 1] for i in range(n)], pa.list_(pa.int64())),
        "lc": pa.array([[7, 7] if i // (2 * run) == 1 else [int(x) for x in rng.integers(0, 1000, 2)] for i in range(n)],
                       pa.list_(pa.int64())),
        "ln": pa.array([None if i // (2 * run) == 3 or i % 11 == 0 else [] if i % 13 == 0 else [None if i % 3 == 0 else i]
                        for i in range(n)], pa.list_(pa.int32())),
    })


def write_mixed_list_pages(lance, root: Path, version: str, n: int = 4000, run: int = 500) -> str:
    """:func:`mixed_list_pages_table` in batches of ``run`` rows (one page per column each) and
    pages of at most 8 KiB."""
    uri = str(root / f"mixed_list_pages_{version}_{n}")
    tbl = mixed_list_pages_table(n, run=run)
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=run))
    lance.write_dataset(reader, uri, data_storage_version=version, max_page_bytes=8192, data_cache_bytes=4 * 8192)
    return uri


def mixed_flat_pages_table(n: int = 4000, *, run: int = 500) -> pa.Table:
    """Flat columns whose pages pylance 14 writes in more than one layout (with
    :func:`write_mixed_flat_pages`): ``s`` short strings in runs of ``run`` rows between runs
    of long ones (mini-block and full-zip pages, a few nulls), ``i`` nullable integers null
    in the third run (an all-null constant page between mini-block ones), and two columns of
    one layout (``e``, ``c``)."""

    def s(i: int) -> str | None:
        if i % 97 == 5:
            return None
        return ("y" * (200 + i % 200)) + str(i) if (i // run) % 2 else str(i)

    return pa.table({
        "s": pa.array([s(i) for i in range(n)], pa.string()),
        "i": pa.array([None if i // run == 2 or i % 7 == 0 else i for i in range(n)], pa.int32()),
        "e": pa.array([None if i // run == 3 else i * 3 for i in range(n)], pa.int64()),
        "c": pa.array([5 if i // run == 1 else i for i in range(n)], pa.int64()),
    })


def write_mixed_flat_pages(lance, root: Path, version: str, n: int = 4000, run: int = 500) -> str:
    """:func:`mixed_flat_pages_table` as :func:`write_mixed_list_pages` writes its table."""
    uri = str(root / f"mixed_flat_pages_{version}_{n}")
    tbl = mixed_flat_pages_table(n, run=run)
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=run))
    lance.write_dataset(reader, uri, data_storage_version=version, max_page_bytes=8192, data_cache_bytes=4 * 8192)
    return uri


def write_full_zip_pages(lance, root: Path, version: str, n: int = 3000, batch: int = 250) -> str:
    """Full-zip columns of many pages (pylance 14 writes a page per batch of ``batch`` rows
    here): ``long`` nullable long strings (variable width, control words, a repetition
    index), ``embn`` a nullable embedding (fixed width with control words), ``emb`` one
    without nulls (fixed width, no control words: copied), beside an ``id``; ``gap`` long
    strings null in the fifth batch (an all-null constant page between full-zip ones)."""
    uri = str(root / f"full_zip_pages_{version}_{n}")
    flat = flat_nullable_table(n, seed=5, null_p=0.2)
    rng = np.random.default_rng(6)
    tbl = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "long": flat["long"],
        "embn": flat["emb"],
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 64).astype(np.float32)), 64),
        "gap": pa.array(flat["long"].to_pylist()[::-1], pa.string(), mask=(np.arange(n) // batch) == 4),
    })
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=batch))
    lance.write_dataset(reader, uri, data_storage_version=version, max_page_bytes=16384, data_cache_bytes=4 * 16384)
    return uri


def dictionary_beside_plain_table(n: int = 4000, run: int = 500) -> pa.Table:
    """Columns whose pages pylance 14 writes with a page dictionary in some runs of ``run``
    rows (few distinct values) and without in others (with
    :func:`write_dictionary_beside_plain_pages`): ``s`` strings, null in every fourth run
    (all-null constant pages; one dictionary page), ``li`` lists of strings, null in the
    sixth run, ``iv`` integers (2.2: dictionary pages beside plain ones), ``ls`` long
    strings (full-zip pages) beside runs of a few short ones (dictionary pages)."""

    def s(i: int) -> str | None:
        b = i // run
        if b % 4 == 1:
            return ["aa", "bb", "cc"][i % 3]
        return None if b % 4 == 3 else f"value-{i * 7919 % 100000}"

    def li(i: int) -> list[str] | None:
        b = i // run
        if b == 5:
            return None
        if b % 2:
            return [["x", "y", "zz"][(i + j) % 3] for j in range(i % 4)]
        return [f"item-{i}-{j}" for j in range(i % 4)]

    def ls(i: int) -> str:
        return ["pp", "qq", "rr"][i % 3] if (i // run) % 2 else f"{i:05d}-" + "long " * 60

    return pa.table({
        "s": pa.array([s(i) for i in range(n)], pa.string()),
        "li": pa.array([li(i) for i in range(n)], pa.list_(pa.string())),
        "iv": pa.array([(i % 3) * 1000 if (i // run) % 2 else i * 7919 % 1000003 for i in range(n)], pa.int64()),
        "ls": pa.array([ls(i) for i in range(n)], pa.string()),
    })


def write_dictionary_beside_plain_pages(lance, root: Path, version: str, n: int = 4000, run: int = 500) -> str:
    """:func:`dictionary_beside_plain_table` written as :func:`write_mixed_list_pages` writes its table."""
    uri = str(root / f"dictionary_beside_plain_{version}_{n}")
    tbl = dictionary_beside_plain_table(n, run)
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=run))
    lance.write_dataset(reader, uri, data_storage_version=version, max_page_bytes=8192, data_cache_bytes=4 * 8192)
    return uri


def null_runs_table(n: int = 20_000) -> pa.Table:
    """Columns null in runs of 500 rows (a flat int64, a list<int32>, a run-length int32):
    pylance 14 writes their definition levels run-length encoded (Rle) in 2.2 files,
    out-of-line bit-packed in 2.1."""
    nulls = np.repeat(np.arange(-(-n // 500)) % 2 == 0, 500)[:n]
    return pa.table({
        "x": pa.array(np.arange(n), mask=nulls),
        "l": pa.array([None if z else [i, -i] for i, z in enumerate(nulls)], pa.list_(pa.int32())),
        "y": pa.array((np.arange(n) * 20 // n).astype(np.int32), mask=nulls),
    })


def flat_nullable_table(n: int, *, seed: int, null_p: float = 0.3) -> pa.Table:
    """Flat nullable columns (one definition layer, no repetition) of every page kind the GPU
    decodes, each with its own random null mask of density ``null_p``: bit-packed integers,
    flat floats, booleans, a dictionary of a few strings, short strings, integers in runs of
    25 (RLE), long strings and an embedding (full-zip), a constant value, and a struct of a
    nullable integer (two item layers).  ``null_p`` 1.0 makes every page all-null
    (constant layout)."""
    rng = np.random.default_rng(seed)

    def mask() -> np.ndarray:
        return rng.random(n) < null_p

    return pa.table({
        "bp": pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=mask()),
        "fl": pa.array(rng.standard_normal(n), mask=mask()),
        "b": pa.array(rng.random(n) < 0.5, mask=mask()),
        "d": pa.array([WORDS[i] for i in rng.integers(0, 3, n)], pa.string(), mask=mask()),
        "s": pa.array([f"v{int(x)}" for x in rng.integers(0, 10**6, n)], pa.string(), mask=mask()),
        "r": pa.array(np.repeat(rng.integers(0, 100, n // 25 + 1), 25)[:n].astype(np.int64), mask=mask()),
        "long": pa.array([f"{i:05d}-" + " ".join(FSST_WORDS[j] for j in rng.integers(0, 8, 60)) for i in range(n)], pa.string(), mask=mask()),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 64).astype(np.float32)), 64, mask=pa.array(mask())),
        "c": pa.array(np.full(n, 42, np.int32), mask=mask()),
        "st": pa.StructArray.from_arrays([pa.array(rng.integers(0, 9, n).astype(np.int16), mask=mask())], names=["a"], mask=pa.array(mask())),
    })


def dictionary_constant_table(n: int, *, seed: int) -> pa.Table:
    """Columns of few distinct values (pylance gives their pages dictionaries): strings,
    nullable strings, integers (2.2: fixed-width dictionaries); and of one value or none
    (constant and all-null pages): null integers and strings, a constant integer and
    string (2.2: constant pages, the string's in a value buffer)."""
    rng = np.random.default_rng(seed)
    words = np.array([f"word-{i}" for i in range(12)])
    return pa.table({
        "cat": pa.array(words[rng.integers(0, 12, n)].tolist()),
        "catn": pa.array(words[rng.integers(0, 5, n)].tolist(), mask=rng.random(n) < 0.3),
        "code": pa.array(rng.integers(0, 7, n).astype(np.int64) * 1_000_003),
        "nulls": pa.nulls(n, pa.int32()),
        "snulls": pa.nulls(n, pa.string()),
        "const": pa.array(np.full(n, 42, np.int64)),
        "sconst": pa.array(["the same string"] * n),
    })
