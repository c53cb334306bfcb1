# SPDX-License-Identifier: Apache-2.0
"""Manifest feature flags (``Manifest.reader_feature_flags`` = 9, ``writer_feature_flags`` = 10).

Each flag is one bit of a u64. A reader must refuse a dataset whose reader flags hold a bit it
does not implement; a writer likewise for the writer flags.
"""

from __future__ import annotations

import os

from lance_gpu.errors import UnsupportedFeatureError

__all__ = [
    "FLAG_DELETION_FILES",
    "FLAG_STABLE_ROW_IDS",
    "FLAG_USE_V2_FORMAT_DEPRECATED",
    "FLAG_TABLE_CONFIG",
    "FLAG_BASE_PATHS",
    "FLAG_DISABLE_TRANSACTION_FILE",
    "FLAG_DATA_OVERLAYS",
    "FLAG_COVERING_INDEX_METADATA",
    "FLAG_MIXED_DATA_FILE_VERSIONS",
    "FLAG_STABLE_FIELD_IDS",
    "FLAG_NAMES",
    "SUPPORTED_READER_FLAGS",
    "SUPPORTED_WRITER_FLAGS",
    "check_reader_flags",
    "check_writer_flags",
    "describe_flags",
]

#: Fragments may carry deletion files (``_deletions/``).
FLAG_DELETION_FILES = 1 << 0
#: Stable row ids: every fragment carries a RowIdSequence.
FLAG_STABLE_ROW_IDS = 1 << 1
#: Old "files use the v2 format" marker; no longer meaningful.
FLAG_USE_V2_FORMAT_DEPRECATED = 1 << 2
#: ``Manifest.config`` is set (writer-side).
FLAG_TABLE_CONFIG = 1 << 3
#: Files may live under other roots listed in ``Manifest.base_paths``.
FLAG_BASE_PATHS = 1 << 4
#: Only the inline transaction section is written, no ``_transactions/*.txn``.
FLAG_DISABLE_TRANSACTION_FILE = 1 << 5
#: Fragments may carry data overlay files (unstable upstream).
FLAG_DATA_OVERLAYS = 1 << 6
#: Index metadata lists covering fields.
FLAG_COVERING_INDEX_METADATA = 1 << 7
#: Data files of one version may have different file format versions.
FLAG_MIXED_DATA_FILE_VERSIONS = 1 << 8
#: Field ids are never reused (needs ``max_allocated_field_id``).
FLAG_STABLE_FIELD_IDS = 1 << 9

FLAG_NAMES: dict[int, str] = {
    FLAG_DELETION_FILES: "deletion files",
    FLAG_STABLE_ROW_IDS: "stable row ids",
    FLAG_USE_V2_FORMAT_DEPRECATED: "use v2 format (deprecated)",
    FLAG_TABLE_CONFIG: "table config",
    FLAG_BASE_PATHS: "multiple base paths",
    FLAG_DISABLE_TRANSACTION_FILE: "no transaction file",
    FLAG_DATA_OVERLAYS: "data overlay files",
    FLAG_COVERING_INDEX_METADATA: "covering index metadata",
    FLAG_MIXED_DATA_FILE_VERSIONS: "mixed data file versions",
    FLAG_STABLE_FIELD_IDS: "stable field ids",
}

#: Reader bits this package implements. Base paths are not resolved yet, so bit 4 is refused.
SUPPORTED_READER_FLAGS = (
    FLAG_DELETION_FILES
    | FLAG_STABLE_ROW_IDS
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_DISABLE_TRANSACTION_FILE
    | FLAG_COVERING_INDEX_METADATA
    | FLAG_MIXED_DATA_FILE_VERSIONS
)

#: Writer bits this package implements.
SUPPORTED_WRITER_FLAGS = (
    FLAG_DELETION_FILES
    | FLAG_STABLE_ROW_IDS
    | FLAG_USE_V2_FORMAT_DEPRECATED
    | FLAG_TABLE_CONFIG
    | FLAG_DISABLE_TRANSACTION_FILE
)


def describe_flags(flags: int) -> list[str]:
    """Human-readable names of the set bits (``bit N`` for bits without a known name)."""
    out = []
    bit = 0
    while flags >> bit:
        if flags >> bit & 1:
            value = 1 << bit
            out.append(f"{FLAG_NAMES.get(value, 'unknown')} (bit {bit}, value {value})")
        bit += 1
    return out


def _check(flags: int, supported: int, kind: str, path: str | os.PathLike[str]) -> None:
    if flags < 0:
        raise UnsupportedFeatureError(f"{os.fspath(path)}: negative {kind} feature flags {flags}")
    missing = flags & ~supported
    if missing:
        raise UnsupportedFeatureError(
            f"{os.fspath(path)}: {kind} feature flags {flags:#x} include unsupported "
            + ", ".join(describe_flags(missing))
        )


def check_reader_flags(
    flags: int, path: str | os.PathLike[str], supported: int = SUPPORTED_READER_FLAGS
) -> None:
    """Raise :class:`UnsupportedFeatureError` (naming ``path`` and each flag) if ``flags``
    holds a reader bit outside ``supported``."""
    _check(flags, supported, "reader", path)


def check_writer_flags(
    flags: int, path: str | os.PathLike[str], supported: int = SUPPORTED_WRITER_FLAGS
) -> None:
    """Raise :class:`UnsupportedFeatureError` (naming ``path`` and each flag) if ``flags``
    holds a writer bit outside ``supported``."""
    _check(flags, supported, "writer", path)
