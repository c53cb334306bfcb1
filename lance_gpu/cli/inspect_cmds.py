# SPDX-License-Identifier: Apache-2.0
"""``info``, ``versions``, ``head`` and ``scan``: looking at a dataset."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from lance_gpu.cli._common import (
    Bars,
    UsageError,
    add_uri,
    add_version,
    jsonable,
    render_table,
    storage_options,
)
from lance_gpu.progress import count_rows
from lance_gpu.table.tags import tagged_versions
from lance_gpu.tools import describe
from lance_gpu.tools._open import open_dataset
from lance_gpu.tools.convert import file_suffix, output_stream

OUTPUT_FORMATS = ("table", "csv", "json", "parquet")
_BY_SUFFIX = {".csv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet", ".pq": "parquet"}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "info", parents=[common], help="describe a dataset: schema, versions, fragments, files, indices",
        description="Describe one version of a dataset: rows, schema, versions, fragments, data file versions, sizes and indices.",
        epilog="examples:\n  lance-gpu info data/events.lance\n  lance-gpu info data/events.lance --version 3 --fragments\n  lance-gpu info s3://bucket/events.lance -s aws_region=eu-west-1 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_uri(p)
    add_version(p)
    p.add_argument("--fragments", action="store_true", help="list every fragment")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "versions", parents=[common], help="list the committed versions and tags",
        description="List every committed version (oldest first) with its time and tags.",
        epilog="examples:\n  lance-gpu versions data/events.lance\n  lance-gpu versions data/events.lance --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_uri(p)
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    p.set_defaults(func=cmd_versions)

    for name, limit, what in (("head", 10, "print the first rows (default 10)"), ("scan", None, "read rows, filtered and projected, to the terminal or a file")):
        p = sub.add_parser(
            name, parents=[common], help=what,
            description=f"{what[0].upper()}{what[1:]}. Tables show nulls as null, lists as [..] and structs as {{field: value}}.",
            epilog=(
                "examples:\n"
                f"  lance-gpu {name} data/events.lance --columns id,text --filter \"id > 10\"\n"
                f"  lance-gpu {name} data/events.lance --version v1-tag --limit 5\n"
                f"  lance-gpu {name} data/events.lance --output rows.parquet      # or .csv / .json (JSON lines)\n"
                f"  lance-gpu {name} data/events.lance --format json | jq .id"
            ),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_uri(p)
        add_version(p)
        p.add_argument("--columns", "-c", default=None, help="comma-separated columns (dotted for struct fields)")
        p.add_argument("--filter", "-f", default=None, help="SQL predicate, e.g. \"id > 10 AND text LIKE 'a%%'\"")
        p.add_argument("--limit", "-n", type=int, default=limit, help=f"at most this many rows (default {limit if limit is not None else 'all'})")
        p.add_argument("--output", "-o", default=None, metavar="PATH", help="write to PATH (.csv, .json, .parquet) instead of the terminal")
        p.add_argument("--format", choices=OUTPUT_FORMATS, default=None, help="output format (default: from --output's suffix, else table)")
        p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="where to decode (default auto)")
        p.set_defaults(func=cmd_scan)


def cmd_info(args: argparse.Namespace) -> int:
    info = describe(args.uri, args.version, storage_options=storage_options(args))
    if args.json:
        print(json.dumps(jsonable(info.to_dict(fragments=args.fragments))))
        return 0
    print(f"{info.uri}  version {info.version} of {info.latest_version}  (data storage {info.data_storage_version})")
    print(f"rows: {info.rows}  (deleted: {info.deleted_rows})  fragments: {len(info.fragments)}  data files: {info.data_files}  size: {_size(info.data_bytes)}")
    print(f"file versions: {', '.join(info.file_versions) or '-'}")
    print(f"versions: {info.num_versions}  tags: {', '.join(f'{k}={v}' for k, v in info.tags.items()) or '-'}")
    print("indices: " + (", ".join(f"{i['name']} ({', '.join(i['fields'])})" for i in info.indices) or "-"))
    print("schema:")
    for line in str(info.schema).splitlines():
        print(f"  {line}")
    if args.fragments:
        print("fragments:")
        for f in info.fragments:
            print(f"  {f.id}: {f.rows} rows ({f.deleted_rows} deleted), {len(f.files)} file(s), {_size(f.bytes)}")
    return 0


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def cmd_versions(args: argparse.Namespace) -> int:

    ds = open_dataset(args.uri, None, storage_options(args))
    tags = tagged_versions(ds.store, ds.root)
    rows = [{"version": v["version"], "timestamp": v["timestamp"], "tags": tags.get(v["version"], [])} for v in ds.versions()]
    if args.json:
        for r in rows:
            print(json.dumps(jsonable(r)))
        return 0
    print("version  timestamp                   tags")
    for r in rows:
        print(f"{r['version']:>7}  {r['timestamp'].isoformat(sep=' ', timespec='seconds'):<26}  {', '.join(r['tags'])}".rstrip())
    return 0


def _limited(batches: Iterator[pa.RecordBatch], limit: int | None) -> Iterator[pa.RecordBatch]:
    left = limit
    for batch in batches:
        if left is not None:
            if left <= 0:
                return
            batch = batch.slice(0, left)
            left -= batch.num_rows
        yield batch


def cmd_scan(args: argparse.Namespace) -> int:
    fmt = args.format
    if fmt is None:
        suffix = file_suffix(args.output) if args.output and args.output != "-" else ""
        if args.output and args.output != "-" and suffix not in _BY_SUFFIX:
            raise UsageError(f"cannot tell the output format from {args.output!r}; pass --format {{csv,json,parquet}}")
        fmt = _BY_SUFFIX.get(suffix, "table")
    if fmt == "parquet" and (args.output is None or args.output == "-"):
        raise UsageError("--format parquet needs --output PATH")
    if fmt == "table" and args.output and args.output != "-":
        raise UsageError("--format table prints to the terminal; drop --output or pick csv, json or parquet")
    if args.limit is not None and args.limit < 0:
        raise UsageError("--limit must not be negative")
    ds = open_dataset(args.uri, args.version, storage_options(args), device=args.device)
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    batches = _limited(ds.to_batches(columns, args.filter), args.limit)
    total = None if args.filter is not None else ds.count_rows() if args.limit is None else min(args.limit, ds.count_rows())
    with Bars(args.quiet) as bars:  # a first read may spend seconds compiling decoders: show it
        counted = count_rows(batches, bars, "rows read", total)
        if fmt == "table":
            table = _collect(ds, columns, args.filter, counted)
        else:
            rows = _write_rows(fmt, args.output, counted)
    if fmt == "table":
        for line in render_table(table):
            print(line)
    elif args.output and args.output != "-":
        print(f"wrote {rows} rows to {args.output} ({fmt})")
    return 0


def _collect(ds: Any, columns: list[str] | None, filter: str | None, batches: Iterator[pa.RecordBatch]) -> pa.Table:  # noqa: A002
    got = list(batches)
    if got:
        return pa.Table.from_batches(got)
    return ds.to_table(columns, filter, limit=0)


def _write_rows(fmt: str, output: str | None, batches: Iterator[pa.RecordBatch]) -> int:
    rows = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        writer = None
        try:
            for batch in batches:
                if writer is None:
                    writer = pq.ParquetWriter(output, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            raise UsageError("no rows to write (a Parquet file needs a schema; use --format json or csv)")
        return rows
    if fmt == "csv":
        return _write_csv(output, batches)
    to_stdout = output is None or output == "-"
    out: Any = sys.stdout.buffer if to_stdout else output_stream(str(output))
    try:
        for batch in batches:
            out.write("".join(json.dumps(jsonable(row), ensure_ascii=False) + "\n" for row in batch.to_pylist()).encode())
            rows += batch.num_rows
    finally:
        if to_stdout:
            out.flush()
        else:
            out.close()
    return rows


def _csv_ready(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Nested columns (lists, structs, maps) as JSON text; CSV has no nesting."""
    cols = []
    for col in batch.columns:
        if pa.types.is_nested(col.type):
            col = pa.array([None if v is None else json.dumps(jsonable(v), ensure_ascii=False) for v in col.to_pylist()], pa.string())
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names)


def _write_csv(output: str | None, batches: Iterator[pa.RecordBatch]) -> int:
    """CSV through pyarrow's writer: a header, nulls as empty fields, "" quoted."""
    import pyarrow.csv as pcsv

    sink: Any = sys.stdout.buffer if output is None or output == "-" else output_stream(output)
    writer = None
    rows = 0
    try:
        for batch in batches:
            batch = _csv_ready(batch)
            if writer is None:
                sys.stdout.flush()
                writer = pcsv.CSVWriter(sink, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows
