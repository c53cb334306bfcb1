# SPDX-License-Identifier: Apache-2.0
"""The ``lance-gpu`` command line (also ``python -m lance_gpu``).

Each subcommand parses its arguments, calls a library function (``lance_gpu.tools`` or the
dataset API) and prints the result; the work lives in the library.  Exit status: 0 success,
1 an error (one line on stderr naming the problem; ``--debug`` prints the traceback), 2 a
usage error, 3 ``verify`` found damage, 130 interrupted.  Progress bars go to stderr, only
when it is a terminal, and never with ``--quiet``.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import TextIO

from lance_gpu import __version__
from lance_gpu.cli import compile_cmd, convert_cmd, demo, inspect_cmds, maintain_cmds, verify_cmd
from lance_gpu.cli._common import UsageError
from lance_gpu.errors import LanceGpuError

PROG = "lance-gpu"
EXAMPLES = """\
examples:
  lance-gpu demo                                   write a sample dataset and read it back
  lance-gpu compile                                compile the CPU kernels into the per-user cache (once)
  lance-gpu convert events.parquet events.lance    Parquet (or CSV, Arrow IPC, a directory) to Lance
  lance-gpu info events.lance                      schema, versions, fragments, files, indices
  lance-gpu head events.lance -c id,text -f "id > 10"
  lance-gpu verify events.lance                    decode every page, name each bad file

Run 'lance-gpu COMMAND --help' for a command's options and examples."""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS, help="no progress bars")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print the traceback of an error")
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common],
        description="Read, write, convert and check Lance datasets; decoded on the GPU where one is usable.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")
    for module in (demo, compile_cmd, inspect_cmds, convert_cmd, maintain_cmds, verify_cmd):
        module.register(sub, common)
    return parser


_MODE_HINT = re.compile(r"\(use mode='(\w+)'(?: or '(\w+)')?\)")


def _as_flags(text: str) -> str:
    """A library message's hint in the command line's terms: ``(use mode='append' or
    'overwrite')`` becomes ``(use --mode append or --mode overwrite)``."""
    def flags(m: re.Match[str]) -> str:
        return f"(use --mode {m.group(1)}" + (f" or --mode {m.group(2)})" if m.group(2) else ")")

    return _MODE_HINT.sub(flags, text)


def _one_line(exc: BaseException, storage_options_given: bool) -> str:
    """The message of an error as one line (our errors carry the whole story in it)."""
    if isinstance(exc, TypeError) and storage_options_given and "storage_options" in str(exc):
        return "this build of lance-gpu does not accept storage options yet (--storage-option)"
    text = _as_flags(str(exc).strip() or type(exc).__name__)
    if isinstance(exc, KeyError) and text.startswith(("'", '"')):
        text = text[1:-1]
    first = text.splitlines()[0]
    if isinstance(exc, (LanceGpuError, OSError, ValueError, KeyError)) or first.startswith(type(exc).__name__):
        return first  # messages of these name the problem themselves
    return f"{type(exc).__name__}: {first}"


def _warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    print(f"{PROG}: warning: {message}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(args_list)
    if args.cmd is None:  # `lance-gpu` alone runs the demo
        args = parser.parse_args(["demo", *args_list])
    args.quiet = getattr(args, "quiet", False)
    args.debug = getattr(args, "debug", False)
    warnings.showwarning = _warning_line
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `lance-gpu scan ... | head`
        sys.stderr.close()
        return 0
    except Exception as exc:  # every failure becomes one line (or a traceback with --debug)
        if args.debug:
            traceback.print_exc()
        else:
            print(f"{PROG}: error: {_one_line(exc, bool(getattr(args, 'storage_options', None)))}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1


__all__ = ["build_parser", "main"]
