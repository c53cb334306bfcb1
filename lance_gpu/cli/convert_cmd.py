# SPDX-License-Identifier: Apache-2.0
"""``convert``: Parquet / CSV / Arrow IPC / pyarrow dataset -> Lance, and Lance -> Parquet."""

from __future__ import annotations

import argparse

from lance_gpu.cli._common import Bars, add_uri, storage_options, version_or_tag
from lance_gpu.tools.convert import INPUT_FORMATS, convert


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "convert", parents=[common], help="convert Parquet, CSV, Arrow IPC or a dataset directory to Lance, or Lance to Parquet",
        description=(
            "Convert SOURCE to DEST, streaming batch by batch (inputs larger than memory convert). "
            "A Lance SOURCE is written to the Parquet file DEST; any other SOURCE (a .parquet, .csv, "
            ".arrow/.ipc/.feather file, or a directory of them) is written to the Lance dataset DEST."
        ),
        epilog=(
            "examples:\n"
            "  lance-gpu convert events.parquet events.lance\n"
            "  lance-gpu convert logs/ logs.lance --format csv --mode append\n"
            "  lance-gpu convert events.lance events.parquet --columns id,text --filter \"id > 10\""
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="a Lance dataset, or a Parquet / CSV / Arrow IPC file or directory")
    add_uri(p, "dest", "the Lance dataset or Parquet file to write (--storage-option applies to the Lance side)")
    p.add_argument("--format", choices=INPUT_FORMATS, default=None, help="format of a non-Lance SOURCE (default: from its suffix)")
    p.add_argument("--mode", choices=("create", "append", "overwrite"), default="create", help="for an existing DEST (default create: refuse)")
    p.add_argument("--version", "-v", type=version_or_tag, default=None, metavar="N|TAG", help="version of a Lance SOURCE")
    p.add_argument("--columns", "-c", default=None, help="columns of a Lance SOURCE, comma-separated")
    p.add_argument("--filter", "-f", default=None, help="rows of a Lance SOURCE, a SQL predicate")
    p.add_argument("--batch-size", type=int, default=65_536, metavar="N", help="rows per batch in memory (default 65536)")
    p.add_argument("--data-storage-version", choices=("2.0", "2.1", "2.2", "stable"), default=None, help="file version of a new Lance DEST")
    p.add_argument("--max-rows-per-file", type=int, default=None, metavar="N", help="rows per Lance data file")
    p.set_defaults(func=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    with Bars(args.quiet) as bars:
        result = convert(
            args.source, args.dest, source_format=args.format, mode=args.mode, version=args.version,
            columns=columns, filter=args.filter, batch_size=args.batch_size,
            data_storage_version=args.data_storage_version, max_rows_per_file=args.max_rows_per_file,
            progress=bars, storage_options=storage_options(args),
        )
    version = f", version {result.version}" if result.dest_format == "lance" else ""
    print(f"converted {result.rows} rows: {result.source} ({result.source_format}) -> {result.dest} ({result.dest_format}{version})")
    return 0
