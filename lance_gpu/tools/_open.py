# SPDX-License-Identifier: Apache-2.0
"""Opening datasets with optional ``storage_options`` (passed on only when given, so these
tools run against a ``dataset()`` / ``write_dataset()`` with or without that parameter)."""

from __future__ import annotations

import os
from typing import Any

import lance_gpu
from lance_gpu.dataset import LanceDataset
from lance_gpu.errors import DatasetNotFoundError
from lance_gpu.io import resolve
from lance_gpu.table.manifest import list_versions

StorageOptions = dict[str, str]


def open_dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    storage_options: StorageOptions | None = None,
    **kwargs: Any,
) -> LanceDataset:
    """``lance_gpu.dataset(uri, version, storage_options=...)``."""
    if storage_options:
        kwargs["storage_options"] = storage_options
    return lance_gpu.dataset(uri, version, **kwargs)


def write(data: object, uri: str | os.PathLike[str], storage_options: StorageOptions | None = None, **kwargs: Any) -> LanceDataset:
    """``lance_gpu.write_dataset(data, uri, storage_options=..., **kwargs)``."""
    if storage_options:
        kwargs["storage_options"] = storage_options
    return lance_gpu.write_dataset(data, uri, **kwargs)


def is_lance_dataset(uri: str | os.PathLike[str], storage_options: StorageOptions | None = None) -> bool:
    """Whether ``uri`` holds at least one committed Lance version."""
    try:
        store, root = resolve(uri, storage_options)
        return bool(list_versions(store, root))
    except (DatasetNotFoundError, NotADirectoryError):
        return False
