# SPDX-License-Identifier: Apache-2.0
"""pylance's commit API over the one commit: ``LanceDataset.commit`` / ``commit_batch``.

:func:`commit_operation` and :func:`commit_transactions` return the committed version
number; :class:`lance_gpu.dataset.LanceDataset` wraps them as its static ``commit`` /
``commit_batch`` (returning a dataset), so nothing here imports the dataset module.

``commit_lock`` (pylance's ``CommitLock``): a callable taking the version number about to be
written and returning a context manager; the manifest is published inside it.
"""

from __future__ import annotations

import os
import uuid as _uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from lance_gpu.errors import DatasetNotFoundError
from lance_gpu.io import ObjectStore, resolve
from lance_gpu.table import features
from lance_gpu.table.manifest import (
    NamingScheme,
    latest_version,
    read_manifest_file,
    resolve_manifest,
)
from lance_gpu.txn.commit import commit
from lance_gpu.txn.operations import (
    Append,
    Merge,
    Operation,
    Overwrite,
    Restore,
    _as_lance_schema,
)

__all__ = ["Transaction", "commit_operation", "commit_transactions", "resolve_target"]

CommitLock = Callable[[int], AbstractContextManager[Any]]


@dataclass
class Transaction:
    """pylance's ``lance.Transaction``: an operation and the version it was planned on."""

    read_version: int
    operation: Operation
    uuid: str = field(default_factory=lambda: str(_uuid.uuid4()))
    transaction_properties: dict[str, str] | None = field(default_factory=dict)


def resolve_target(base_uri: Any, storage_options: dict[str, str] | None) -> tuple[ObjectStore, str]:
    """The store and root key of ``base_uri``: a URI or path (opened with ``storage_options``),
    one of our datasets (its own store), or any object with a ``uri`` (pylance's dataset)."""
    if isinstance(base_uri, (str, os.PathLike)):
        return resolve(base_uri, storage_options)
    store, root = getattr(base_uri, "store", None), getattr(base_uri, "root", None)
    if isinstance(store, ObjectStore) and isinstance(root, str):
        return store, root
    uri = getattr(base_uri, "uri", None)
    if isinstance(uri, str):
        return resolve(uri, storage_options)
    raise TypeError(f"base_uri must be a path or a dataset, not {type(base_uri).__name__}")


def commit_operation(
    base_uri: Any,
    operation: Operation | Transaction,
    read_version: int | None = None,
    commit_lock: CommitLock | None = None,
    storage_options: dict[str, str] | None = None,
    enable_v2_manifest_paths: bool | None = None,
    detached: bool | None = False,
    max_retries: int = 20,
    *,
    commit_message: str | None = None,
    enable_stable_row_ids: bool | None = None,
) -> int:
    """Commit ``operation`` on top of ``read_version`` of the dataset at ``base_uri``;
    returns the new version.

    ``read_version`` is required unless the operation is an ``Overwrite`` (which may create
    the dataset) -- as in pylance.  Conflicts with versions committed since are resolved by
    the operation's rules (:mod:`lance_gpu.txn.operations`).  ``detached=True`` commits a
    detached version (``_versions/d{version}.manifest``, bit 63 set; see
    :func:`lance_gpu.txn.commit.commit`) that only checking it out by number finds.
    """
    properties: dict[str, str] = {}
    if isinstance(operation, Transaction):
        read_version = operation.read_version if read_version is None else read_version
        properties = dict(operation.transaction_properties or {})
        operation = operation.operation
    if not isinstance(operation, Operation):
        raise TypeError(f"operation must be a LanceOperation, not {type(operation).__name__}")
    if commit_message is not None:
        properties["__lance_commit_message"] = commit_message
    store, root = resolve_target(base_uri, storage_options)
    try:
        latest_info = latest_version(store, root)
    except DatasetNotFoundError:
        latest_info = None
    if latest_info is None:
        if not isinstance(operation, Overwrite):
            raise DatasetNotFoundError(f"dataset {store.uri(root)} does not exist; only an Overwrite can create it")
        base = None
        naming: NamingScheme = "V2" if enable_v2_manifest_paths is not False else "V1"
        if enable_stable_row_ids:
            operation.writer_flags |= features.FLAG_STABLE_ROW_IDS
    else:
        if read_version is None and not isinstance(operation, (Overwrite, Restore)):
            # an Overwrite or a Restore replaces the whole version: it reads none (pylance's rule)
            raise ValueError("read_version is required for operations other than Overwrite and Restore")
        info = resolve_manifest(store, root, read_version) if read_version is not None else latest_info
        base = read_manifest_file(store, info.path)
        naming = latest_info.naming
    if isinstance(operation, Merge) and not hasattr(operation.schema, "by_id"):
        operation.schema = _as_lance_schema(operation.schema, base)
    if detached and base is None:
        raise ValueError("a detached commit needs an existing dataset")
    manifest = commit(store, root, operation, base, naming, transaction_properties=properties, lock=commit_lock,
                      detached=bool(detached))
    return int(manifest.version)


def commit_transactions(
    dest: Any,
    transactions: Sequence[Transaction],
    commit_lock: CommitLock | None = None,
    storage_options: dict[str, str] | None = None,
    enable_v2_manifest_paths: bool | None = None,
    detached: bool | None = False,
    max_retries: int = 20,
    **_options: Any,
) -> tuple[int, Transaction]:
    """Merge append ``transactions`` into one and commit it (pylance's ``commit_batch``: only
    appends are supported); returns (new version, the merged transaction)."""
    if not transactions:
        raise ValueError("commit_batch needs at least one transaction")
    fragments = []
    for t in transactions:
        if not isinstance(t.operation, Append):
            raise TypeError("commit_batch: only Append transactions are supported")
        fragments.extend(t.operation.fragments)
    read_version = min(int(t.read_version) for t in transactions)
    merged = Transaction(read_version, Append(fragments))
    version = commit_operation(dest, merged, commit_lock=commit_lock, storage_options=storage_options, detached=detached)
    return version, merged

