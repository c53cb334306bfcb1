# SPDX-License-Identifier: Apache-2.0
"""``verify``: decode every page of a version; exit status 3 names the damage."""

from __future__ import annotations

import argparse

from lance_gpu.cli._common import Bars, add_uri, add_version, storage_options
from lance_gpu.tools.verify import verify

EXIT_PROBLEMS = 3


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "verify", parents=[common], help="decode every page of a version and check deletion files and row ids",
        description=(
            "Decode every page of one version, check its deletion files and row ids, and print one line per "
            f"corrupt or missing file. Exit status: 0 intact, {EXIT_PROBLEMS} damaged, 1 the dataset could not be opened."
        ),
        epilog="examples:\n  lance-gpu verify data/events.lance\n  lance-gpu verify data/events.lance --version 4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_uri(p)
    add_version(p)
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    with Bars(args.quiet) as bars:
        report = verify(args.uri, args.version, progress=bars, storage_options=storage_options(args))
    for problem in report.problems:
        print(f"BAD {problem.path}: {problem.reason}")
    what = f"{report.fragments} fragments, {report.data_files} data files, {report.deletion_files} deletion files"
    if report.ok:
        print(f"OK {report.uri} version {report.version}: {what}, {report.rows} rows decoded")
        return 0
    print(f"DAMAGED {report.uri} version {report.version}: {len(report.problems)} bad file(s) among {what}")
    return EXIT_PROBLEMS
