# SPDX-License-Identifier: Apache-2.0
"""``delete``, ``compact`` and ``cleanup``: changing a dataset (each commits a new version,
except ``cleanup``, which removes old ones)."""

from __future__ import annotations

import argparse
import datetime as _dt
import re

from lance_gpu.cli._common import Bars, UsageError, add_uri, storage_options
from lance_gpu.tools._open import open_dataset

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> _dt.timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (or a bare number of days)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a duration such as 30s, 12h, 7d or 2w, got {text!r}")
    return _dt.timedelta(**{_UNITS[m.group(2) or "d"]: float(m.group(1))})


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "delete", parents=[common], help="delete the rows matching a predicate (commits a version)",
        description="Delete the rows matching a SQL predicate; writes deletion files and commits a new version.",
        epilog="examples:\n  lance-gpu delete data/events.lance \"id < 100\"\n  lance-gpu delete data/events.lance \"text IS NULL\"",
        formatter_class=fmt,
    )
    add_uri(p)
    p.add_argument("predicate", help="SQL predicate selecting the rows to delete")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser(
        "compact", parents=[common], help="rewrite small fragments and fragments with many deletions",
        description="Compact fragments (pylance's optimize.compact_files): merges small fragments and drops deleted rows; commits a new version.",
        epilog="examples:\n  lance-gpu compact data/events.lance\n  lance-gpu compact data/events.lance --target-rows-per-fragment 250000",
        formatter_class=fmt,
    )
    add_uri(p)
    p.add_argument("--target-rows-per-fragment", type=int, default=None, metavar="N", help="rows per output fragment (default 1048576)")
    p.add_argument("--no-materialize-deletions", action="store_true", help="leave fragments with deletions alone")
    p.add_argument("--materialize-deletions-threshold", type=float, default=None, metavar="F", help="rewrite fragments with at least this share of rows deleted (default 0.1)")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser(
        "cleanup", parents=[common], help="remove old versions and the files only they use",
        description="Remove versions older than --older-than (default 14d) or beyond the newest --retain-versions, except the latest and tagged ones, and every file only they reference.",
        epilog="examples:\n  lance-gpu cleanup data/events.lance --older-than 7d\n  lance-gpu cleanup data/events.lance --retain-versions 3 --delete-unverified",
        formatter_class=fmt,
    )
    add_uri(p)
    p.add_argument("--older-than", type=duration, default=None, metavar="AGE", help="e.g. 30s, 12h, 7d, 2w")
    p.add_argument("--retain-versions", type=int, default=None, metavar="N", help="keep the newest N versions")
    p.add_argument("--delete-unverified", action="store_true", help="also delete files no version references (no other writer may be running)")
    p.add_argument("--ignore-tagged", action="store_true", help="keep tagged old versions instead of failing")
    p.set_defaults(func=cmd_cleanup)


def cmd_delete(args: argparse.Namespace) -> int:
    ds = open_dataset(args.uri, None, storage_options(args))
    result = ds.delete(args.predicate)
    print(f"deleted {result['num_deleted_rows']} rows; now version {ds.version} with {ds.count_rows()} rows")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    if args.target_rows_per_fragment is not None and args.target_rows_per_fragment < 1:
        raise UsageError("--target-rows-per-fragment must be positive")
    ds = open_dataset(args.uri, None, storage_options(args))
    before = ds.version
    with Bars(args.quiet) as bars:
        m = ds.optimize.compact_files(
            target_rows_per_fragment=args.target_rows_per_fragment,
            materialize_deletions=False if args.no_materialize_deletions else None,
            materialize_deletions_threshold=args.materialize_deletions_threshold,
            progress=bars,
        )
    if ds.version == before:
        print(f"nothing to compact; version {ds.version} unchanged")
    else:
        print(f"compacted {m.fragments_removed} fragments into {m.fragments_added} ({m.files_removed} files removed, {m.files_added} added); now version {ds.version}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    if args.retain_versions is not None and args.retain_versions < 1:
        raise UsageError("--retain-versions must be positive")
    ds = open_dataset(args.uri, None, storage_options(args))
    stats = ds.cleanup_old_versions(
        args.older_than, args.retain_versions,
        delete_unverified=args.delete_unverified, error_if_tagged_old_versions=not args.ignore_tagged,
    )
    extra = ""
    if stats.staging_files_removed:
        extra += f"; {stats.staging_files_removed} staging files of killed writers"
    if stats.multipart_uploads_aborted:
        extra += f"; aborted {stats.multipart_uploads_aborted} incomplete multipart uploads"
    print(f"removed {stats.old_versions} old versions and {stats.bytes_removed} bytes{extra}")
    return 0
