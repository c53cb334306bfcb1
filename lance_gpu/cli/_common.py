# SPDX-License-Identifier: Apache-2.0
"""What every subcommand shares: URI options, progress bars, value and table formatting."""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import decimal
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, Self, TextIO

import pyarrow as pa

from lance_gpu.errors import LanceGpuError


class UsageError(LanceGpuError, ValueError):
    """A command line that parses but asks for something impossible (exit status 2)."""


def storage_option(text: str) -> tuple[str, str]:
    """``key=value`` of ``--storage-option``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def version_or_tag(text: str) -> int | str:
    """``--version``: a version number, or else a tag name."""
    return int(text) if text.isdigit() else text


def add_uri(parser: argparse.ArgumentParser, name: str = "uri", help: str = "the Lance dataset (a path or URI)") -> None:  # noqa: A002 - argparse's name
    parser.add_argument(name, help=help)
    parser.add_argument(
        "--storage-option", "-s", dest="storage_options", action="append", type=storage_option, default=[],
        metavar="KEY=VALUE", help="object store option, repeatable (passed on as storage_options=)",
    )


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", "-v", type=version_or_tag, default=None, metavar="N|TAG", help="version number or tag (default: latest)")


def storage_options(args: argparse.Namespace) -> dict[str, str] | None:
    return dict(args.storage_options) or None


class Bars:
    """A :data:`lance_gpu.progress.ProgressHook` drawing one tqdm bar per task on stderr.

    Off with ``--quiet`` and whenever stderr is not a terminal (a pipe, a file, CI logs)."""

    def __init__(self, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.bars: dict[str, Any] = {}

    def __call__(self, task: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        bar = self.bars.get(task)
        if bar is None:
            from tqdm import tqdm

            unit = task.split()[0]
            # a terminal that reports no size (0 x 0, e.g. a fresh pty) gets 80 x 24: tqdm
            # draws nothing at all on zero rows
            columns, lines = os.get_terminal_size(self.stream.fileno())
            bar = tqdm(
                total=total, desc=task.split()[-1], unit=f" {unit}", file=self.stream, ncols=columns or 80,
                nrows=lines or 24, unit_scale=unit == "rows", leave=False,
            )
            self.bars[task] = bar
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def jsonable(value: Any) -> Any:
    """A value of ``Scalar.as_py()`` as JSON: timestamps ISO 8601, bytes base64, decimals as strings."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def cell(value: Any, top: bool = True) -> str:
    """A value as it is shown in a table: ``null``, ``[1, null]``, ``{a: 1, b: [x]}``; strings
    bare at the top level and quoted inside lists and structs, so ``"null"`` differs from null."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {cell(v, False)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(cell(v, False) for v in value) + "]"
    if isinstance(value, tuple):  # a map entry
        return f"{cell(value[0], False)}: {cell(value[1], False)}"
    if isinstance(value, str):
        return value if top else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    return str(value)


def render_table(table: pa.Table, max_width: int = 48) -> Iterator[str]:
    """Lines of an aligned text table: a header of names, the types, then one line per row."""
    names = table.column_names
    rows = [[cell(v) for v in row.values()] for row in table.to_pylist()]
    types = [str(t) for t in table.schema.types]

    def clip(text: str) -> str:
        text = text.replace("\n", "\\n")
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    grid = [[clip(x) for x in r] for r in [names, types, *rows]]
    widths = [max(len(r[i]) for r in grid) for i in range(len(names))]
    for k, r in enumerate(grid):
        yield "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()
        if k == 1:
            yield "  ".join("-" * w for w in widths)
