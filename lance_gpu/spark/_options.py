# SPDX-License-Identifier: Apache-2.0
"""Options of the ``lance`` Spark data source: parsed once on the driver into plain, picklable values.

Spark hands a Python data source its options as a case-insensitive dict of strings, the
path given to ``load(path)`` / ``save(path)`` included. Unknown keys are errors, so a typo
(``.option("verison", 3)``) fails on the driver instead of being ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from lance_gpu._device import DEVICES
from lance_gpu.errors import LanceGpuError

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_ROWS_PER_PARTITION",
    "LanceSparkOptionError",
    "READ_OPTIONS",
    "ReadOptions",
    "WRITE_OPTIONS",
    "check_known",
    "storage_options",
    "parse_read_options",
]

DEFAULT_BATCH_SIZE = 65536
DEFAULT_MAX_ROWS_PER_PARTITION = 1 << 20

READ_OPTIONS = {
    "path": "the dataset URI (what load(path) passes)",
    "version": "a version number or tag to read (default: the latest, resolved once at planning)",
    "columns": "comma-separated (or JSON list of) columns to read; dotted names select struct fields",
    "filter": "a pylance SQL predicate applied while reading",
    "batch_size": f"rows per Arrow batch handed to Spark (default {DEFAULT_BATCH_SIZE})",
    "max_rows_per_partition": f"fragments with more physical rows are split into row ranges (default {DEFAULT_MAX_ROWS_PER_PARTITION})",
    "device": "where tasks decode: auto | gpu | cpu (default auto)",
    "pushdown": "true | false: evaluate Spark's pushed filters in the reader (needs spark.sql.python.filterPushdown.enabled)",
}
WRITE_OPTIONS = {
    "path": "the dataset URI (what save(path) passes)",
    "max_rows_per_file": "rows per data file written by a task (default: the writer's default)",
    "data_storage_version": "file format version of a new dataset, e.g. 2.0 / 2.1 (default: the writer's default)",
    "device": "where tasks encode: cpu | gpu | auto (gpu when the task has a usable GPU, else cpu; default cpu)",
}


class LanceSparkOptionError(LanceGpuError, ValueError):
    """A Spark option of the lance data source is unknown, missing or malformed."""


def _describe(known: Mapping[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in known.items())


#: Prefix of storage options (``.option("storage_options.aws_region", "us-east-1")``).
STORAGE_PREFIX = "storage_options."
_FLAT_STORAGE_PREFIXES = ("aws_", "google_", "azure_", "gcs_", "s3_")
_FLAT_STORAGE_KEYS = frozenset(
    {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "read_timeout",
     "max_retries", "retry_timeout", "client_max_retries", "client_retry_timeout", "proxy_url",
     "user_agent", "region", "endpoint", "access_key_id", "secret_access_key", "session_token",
     "service_account", "account_name", "account_key"}
)


def _is_storage_key(key: str) -> bool:
    low = key.lower()
    return low.startswith(STORAGE_PREFIX) or low.startswith(_FLAT_STORAGE_PREFIXES) or low in _FLAT_STORAGE_KEYS


def storage_options(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The pylance ``storage_options`` among Spark options: ``storage_options.<key>`` keys
    (prefix removed) and flat keys of known storage option names (``aws_region``...);
    sorted ``(key, value)`` pairs (hashable, picklable)."""
    out: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low.startswith(STORAGE_PREFIX):
            out[low[len(STORAGE_PREFIX) :]] = str(value)
        elif _is_storage_key(low):
            out[low] = str(value)
    return tuple(sorted(out.items()))


def check_known(options: Mapping[str, str], known: Mapping[str, str], what: str) -> None:
    """Raise for an option key that is not in ``known`` (keys compare case-insensitively);
    storage options (see :func:`storage_options`) are always accepted."""
    unknown = sorted(k for k in options if k.lower() not in known and not _is_storage_key(k))
    if unknown:
        msg = f"unknown option(s) {unknown} for a lance {what}; the options are: {_describe(known)}"
        raise LanceSparkOptionError(msg)


def _positive_int(options: Mapping[str, str], key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        msg = f"option {key!r} must be a positive integer, not {raw!r}"
        raise LanceSparkOptionError(msg)
    return value


def parse_version(raw: str | None) -> int | str | None:
    """``"12"`` -> 12, a tag name stays a string, None -> None (latest)."""
    if raw is None:
        return None
    text = str(raw).strip()
    if not text:
        msg = "option 'version' is empty; give a version number or a tag"
        raise LanceSparkOptionError(msg)
    if text.lstrip("-").isdigit():
        number = int(text)
        if number < 1:
            msg = f"option 'version' must be a version number >= 1 or a tag, not {raw!r}"
            raise LanceSparkOptionError(msg)
        return number
    return text


def parse_columns(raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    text = str(raw).strip()
    if text.startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"option 'columns' is not a JSON list of names: {exc}"
            raise LanceSparkOptionError(msg) from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            msg = "option 'columns' must be a JSON list of strings"
            raise LanceSparkOptionError(msg)
    else:
        names = [n.strip() for n in text.split(",")]
    if not names or any(not n for n in names):
        msg = f"option 'columns' must name at least one column and no empty ones, not {raw!r}"
        raise LanceSparkOptionError(msg)
    return tuple(names)


def parse_bool(options: Mapping[str, str], key: str) -> bool | None:
    raw = options.get(key)
    if raw is None:
        return None
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        msg = f"option {key!r} must be true or false, not {raw!r}"
        raise LanceSparkOptionError(msg)
    return text == "true"


def require_path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        msg = "no dataset path: use load(path) / save(path) or .option('path', ...)"
        raise LanceSparkOptionError(msg)
    return str(path)


@dataclass(frozen=True)
class ReadOptions:
    """The parsed read options (plain values: picklable, shipped to executors)."""

    path: str
    version: int | str | None = None
    columns: tuple[str, ...] | None = None
    filter: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_rows_per_partition: int = DEFAULT_MAX_ROWS_PER_PARTITION
    device: str = "auto"
    pushdown: bool | None = None
    storage_options: tuple[tuple[str, str], ...] = ()


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    check_known(options, READ_OPTIONS, "read")
    device = str(options.get("device", "auto")).strip().lower()
    if device not in DEVICES:
        msg = f"option 'device' must be one of {DEVICES}, not {options.get('device')!r}"
        raise LanceSparkOptionError(msg)
    flt = options.get("filter")
    if flt is not None and not str(flt).strip():
        msg = "option 'filter' is empty"
        raise LanceSparkOptionError(msg)
    return ReadOptions(
        path=require_path(options),
        version=parse_version(options.get("version")),
        columns=parse_columns(options.get("columns")),
        filter=None if flt is None else str(flt),
        batch_size=_positive_int(options, "batch_size", DEFAULT_BATCH_SIZE),
        max_rows_per_partition=_positive_int(options, "max_rows_per_partition", DEFAULT_MAX_ROWS_PER_PARTITION),
        device=device,
        pushdown=parse_bool(options, "pushdown"),
        storage_options=storage_options(options),
    )
