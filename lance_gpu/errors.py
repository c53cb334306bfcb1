# SPDX-License-Identifier: Apache-2.0
"""The error types of lance-gpu.

Every error we raise derives from :class:`LanceGpuError` and from the builtin a user would
catch without knowing us (pyarrow's pattern: ``ArrowInvalid(ValueError, ArrowException)``).
"""

from __future__ import annotations

import errno as _errno

import pyarrow as pa


class LanceGpuError(Exception):
    """Base class of every error lance-gpu raises."""


class DatasetNotFoundError(LanceGpuError, FileNotFoundError):
    """The URI holds no Lance dataset, or the requested version does not exist."""


class DatasetExistsError(LanceGpuError, FileExistsError):
    """``mode="create"`` was asked for where a dataset already exists; nothing was written."""


class CorruptFileError(LanceGpuError, ValueError):
    """A manifest, data file or deletion file is truncated, malformed or inconsistent.

    The message always names the file.
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"corrupt Lance file {self.path}: {reason}")


class UnsupportedEncodingError(LanceGpuError, NotImplementedError):
    """A page uses an encoding, layout or file version this reader does not decode."""


class UnsupportedFeatureError(LanceGpuError, NotImplementedError):
    """The dataset sets a reader or writer feature flag we do not implement."""


class UnsupportedTypeError(UnsupportedFeatureError, OSError):
    """An Arrow type Lance cannot store (a write's schema): pylance refuses it with an
    ``OSError`` ("LanceError(Schema): Unsupported data type: ...")."""


class SchemaMismatchError(LanceGpuError, ValueError):
    """Data does not match the dataset's schema, or a requested column does not exist."""


class FilterError(LanceGpuError, ValueError, OSError):
    """A filter predicate or SQL expression could not be parsed or refers to unknown
    columns.  pylance raises ``ValueError`` for a bad scan filter and ``OSError`` for a bad
    ``delete`` / ``add_columns`` expression: this is both, so either ``except`` catches it.

    The message starts with pylance's ``"Invalid user input: "`` (tests and callers match it)."""

    PREFIX = "Invalid user input: "

    def __init__(self, message: object = "", *args: object) -> None:
        text = str(message)
        if not text.startswith(self.PREFIX):
            text = self.PREFIX + text
        super().__init__(text, *args)


class DecimalArithmeticError(LanceGpuError, pa.ArrowInvalid):
    """Decimal arithmetic in a filter or projection failed while it was evaluated: a zero
    divisor of ``/`` or ``%``, or a result outside the 128-bit range.  Also an
    ``ArrowInvalid`` (a ``ValueError``), the type pylance raises for these."""


class CommitConflictError(LanceGpuError, RuntimeError, OSError):
    """A concurrent writer committed an incompatible change first.  Also an ``OSError``,
    the type pylance raises (``lance.commit.CommitConflictError``, and "Too many
    concurrent writers" once an update's retries run out).

    Given the ``version`` the winner committed, the message starts as pylance's does:
    ``"Commit conflict for version 3: ..."`` (``"Retryable commit conflict for version 3:
    ..."`` for :class:`RetryableCommitConflictError`).
    """

    _PREFIX = "Commit conflict"

    def __init__(self, message: str = "", version: int | None = None) -> None:
        self.version = version
        super().__init__(message if version is None else f"{self._PREFIX} for version {version}: {message}")


class MergeInsertError(LanceGpuError, ValueError, OSError):
    """A merge_insert cannot run as asked: several source rows match one target row
    (pylance: "Ambiguous merge inserts are prohibited"), or ``when_matched_fail`` matched.
    Also an ``OSError``, the type pylance raises."""


class IncompatibleSchemaError(SchemaMismatchError, OSError):
    """Rows added to an existing dataset (append, ``insert``, ``merge_insert``) whose columns
    do not fit it: a type other than the column's (even a castable one, such as int32 for
    int64), a column the dataset lacks, or a missing non-nullable column.  Also an
    ``OSError``, the type pylance raises ("Append with different schema")."""


class ColumnCastError(SchemaMismatchError, OSError):
    """``alter_columns(data_type=)`` to a type pylance does not convert the column to (an
    integer to a string, a string to binary...): pylance's ``OSError`` 'Cannot cast column
    "x" from Int32 to Utf8', which the message repeats; also a ``ValueError``."""


class ValueCastError(ColumnCastError):
    """A stored value does not fit the type a column is changed to (``alter_columns(data_type=)``):
    pylance's ``OSError`` "Cast error: Can't cast value 1024 to type Int8", which the message
    repeats; also a ``ValueError``."""


class InvalidJsonError(SchemaMismatchError, OSError):
    """A value of an ``arrow.json`` column being written is not JSON (or repeats an object
    key); pylance refuses it with an ``OSError`` ("Failed to encode JSON")."""


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent writer changed what this operation read (e.g. it deleted or compacted
    the same fragments): re-running the operation on the latest version may succeed.
    ``LanceDataset.delete`` does that itself, ``conflict_retries`` times."""

    _PREFIX = "Retryable commit conflict"


class CommitLockError(LanceGpuError, OSError):
    """The user's ``commit_lock`` raised (entering or leaving): the commit did not happen.
    The message names the lock's exception (``"... CommitConflictError: ..."``), which is
    chained; an ``OSError``, as pylance's."""


class PlanNotSupportedError(UnsupportedFeatureError, OSError):
    """A plan cannot be shown for this call (pylance's "Not supported: ... does not support
    explain_plan"); an ``OSError`` as pylance's, and a ``NotImplementedError``."""


class GpuUnavailableError(LanceGpuError, ImportError):
    """``device="gpu"`` was requested but no usable CUDA device or library is present."""


class VersionNotFoundError(LanceGpuError, ValueError):
    """No version matches the request: ``asof`` precedes the first version, or a tag would
    point at a version that does not exist (pylance raises ``ValueError`` in both cases)."""


class VersionMissingError(DatasetNotFoundError, VersionNotFoundError):
    """The version number or tag asked for does not exist in the dataset.  pylance raises
    ``ValueError`` when ``lance.dataset(uri, version=)`` opens it and ``OSError`` from
    ``checkout_version`` / ``restore``: this is both (a ``FileNotFoundError`` and a
    ``ValueError``), so either ``except`` catches it."""


class ColumnExistsError(SchemaMismatchError, OSError):
    """A new column (``add_columns``, ``merge``, ``merge_columns``) is named like an existing
    one.  pylance raises ``OSError`` from ``add_columns`` and ``ValueError`` from a
    fragment's ``merge_columns``: this is both."""


class EmptyWriteError(LanceGpuError, ValueError, OSError):
    """A write that must produce data has none: ``LanceFragment.create`` of no rows or of
    no columns.  pylance raises ``OSError`` ("Input data was empty", "Cannot write with an
    empty schema"); this is also a ``ValueError``."""


class RowCountMismatchError(LanceGpuError, ValueError, OSError):
    """New column values (``add_columns`` / ``merge_columns`` from a reader) are fewer or
    more than the rows they are for.  pylance raises ``OSError`` ("Stream ended before
    producing values for all rows in dataset"); this is also a ``ValueError``."""


class ColumnNotFoundError(SchemaMismatchError, OSError):
    """A column named in ``drop_columns`` / ``alter_columns`` does not exist.  pylance raises
    ``ValueError`` from ``drop_columns`` and ``OSError`` from ``alter_columns``: this is
    both."""


class TagExistsError(LanceGpuError, ValueError):
    """``tags.create`` of a tag that already exists; nothing was written."""


class TagNotFoundError(LanceGpuError, ValueError):
    """``tags.update`` / ``tags.delete`` of a tag that does not exist."""


class InvalidTagNameError(LanceGpuError, OSError):
    """A tag name with characters other than letters, digits, ``.``, ``-`` and ``_``
    (pylance raises ``OSError`` here)."""


class CleanupError(LanceGpuError, OSError):
    """``cleanup_old_versions`` refused to run: a bad argument (``retain_versions`` or
    ``delete_rate_limit`` below 1), or tagged versions would go (:class:`TaggedVersionError`).
    pylance raises ``OSError`` ("Cleanup error") in these cases; nothing was deleted."""


class TaggedVersionError(CleanupError):
    """``cleanup_old_versions`` would remove tagged versions and ``error_if_tagged_old_versions``
    is set; nothing was deleted."""


class RowOutOfRangeError(LanceGpuError, IndexError, ValueError):
    """A requested row index, id or address does not exist; the message names it. An
    ``IndexError`` (as ``take`` raises) and a ``ValueError`` (as pylance's ``take_blobs``)."""


class StorageError(LanceGpuError, OSError):
    """Reading, writing, listing or deleting an object failed (disk full, I/O error, timeout,
    throttling, refused connection...).  ``uri`` names the object; ``errno`` is set when the
    operating system reported one.  Subclasses add the builtin a pylance user catches."""

    def __init__(self, uri: object, reason: str, errno_code: int | None = None) -> None:
        self.uri = str(uri)
        self.reason = reason
        self.message = f"{self.uri}: {reason}"
        super().__init__(self.message)
        self.errno = errno_code
        self.filename = self.uri

    def __str__(self) -> str:
        return self.message


class ObjectNotFoundError(StorageError, DatasetNotFoundError):
    """The object (or its bucket / container) does not exist: a missing data, deletion or
    manifest file is a missing (part of a) dataset, hence a :class:`DatasetNotFoundError`
    (and a ``FileNotFoundError``)."""


class MissingFileError(ObjectNotFoundError, CorruptFileError):
    """A file a committed manifest references (a data or deletion file) does not exist: the
    dataset is damaged.  A ``FileNotFoundError`` (an ``OSError``, as pylance's ``take`` and
    ``count_rows`` raise) and a :class:`CorruptFileError` (a ``ValueError``, as pylance's
    scans raise).  ``uri`` and ``path`` name the file."""

    def __init__(self, uri: object, reason: str = "referenced by the manifest but does not exist") -> None:
        # StorageError's attributes and message; CorruptFileError's ``path`` and ``reason``
        # (its __init__ takes other arguments, so neither runs up the chain).
        self.uri = self.path = str(uri)
        self.reason = reason
        self.message = f"{self.uri}: {reason}"
        OSError.__init__(self, self.message)
        self.errno = _errno.ENOENT
        self.filename = self.uri

    def __reduce__(self) -> tuple:
        return (type(self), (self.uri, self.reason))


class NotADatasetError(DatasetNotFoundError, ValueError):
    """The URI holds no Lance dataset: nothing is there, or a directory without committed
    versions in ``_versions/`` (the message says which).  A ``FileNotFoundError`` and, as
    pylance raises here, a ``ValueError``."""


class StoragePermissionError(StorageError, PermissionError):
    """Access was denied: missing permissions or bad credentials."""


class ObjectExistsError(StorageError, FileExistsError):
    """A put-if-absent found the object already there (another writer won)."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A request timed out (after the store's bounded retries)."""


class StorageConnectionError(StorageError, ConnectionError):
    """The store could not be reached (refused or reset connection, DNS failure)."""


class ConditionalPutUnsupportedError(StorageError):
    """The store cannot create an object only if it is absent, so commits would be unsafe."""


class InvalidArgumentError(LanceGpuError, ValueError):
    """An argument pylance refuses with a ``ValueError`` (negative ``limit`` / ``offset``,
    ``batch_size`` of 0, ``include_deleted_rows`` without ``with_row_id``, ...)."""


class ArgumentTypeError(LanceGpuError, TypeError):
    """An argument of a type pylance refuses with a ``TypeError`` (``columns`` given as a
    string, a float ``limit``, non-integer ``take`` indices, an unknown keyword...)."""


class QueryShapeError(InvalidArgumentError, pa.ArrowInvalid):
    """A ``nearest`` query that is neither a vector nor a 2-D array of vectors (pylance:
    ``ArrowInvalid`` as it builds the query array)."""


class EmptyQueryError(InvalidArgumentError, IndexError):
    """A ``nearest`` query with no values (pylance: an ``IndexError`` as it reads the query)."""


class NegativeArgumentError(InvalidArgumentError, OverflowError):
    """A negative value where pylance wants an unsigned one (a ``batch_size`` or a ``take``
    index below 0): pylance raises ``OverflowError`` converting it."""


class ZeroSubVectorsError(InvalidArgumentError, ZeroDivisionError):
    """``create_index(..., "IVF_PQ", num_sub_vectors=0)``: pylance raises
    ``ZeroDivisionError`` dividing the dimension by it."""


class RowIndexError(LanceGpuError, IndexError, OSError):
    """A ``take`` index beyond the rows there are; the message names it (pylance raises
    ``OSError`` here; ``IndexError`` is what Python code expects)."""


class UnknownDeviceError(InvalidArgumentError):
    """``device=`` is not one of ``"auto"``, ``"gpu"``, ``"cpu"``."""


class GpuFallbackWarning(UserWarning):
    """A read decoded on the CPU although the GPU was asked for or a GPU stack is installed;
    the message says why.  Warned once per reason and process.  ``device="auto"`` on a machine
    without CuPy decodes on the CPU silently."""


class CpuDecodeWarning(GpuFallbackWarning):
    """A field of a GPU read was decoded by the CPU reader (no GPU kernel for its encoding,
    or its type) and uploaded; the message names the reason.  Warned once per reason."""


class IndexExistsError(LanceGpuError, RuntimeError):
    """``create_index`` / ``create_scalar_index`` with the name of an existing index and
    ``replace=False`` (pylance: a ``RuntimeError``)."""


class FieldNotFoundError(LanceGpuError, KeyError):
    """A column named to build an index on is not in the schema (pylance: a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class IndexNotFoundError(LanceGpuError, RuntimeError):
    """No index of that name in this version (pylance's ``RuntimeError`` ``Lance index not
    found: name=...``)."""


class IndexStatsNotFoundError(LanceGpuError, KeyError):
    """``ds.stats.index_stats`` of a name no index has (pylance's ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class IndexedColumnError(LanceGpuError, OSError):
    """An ``alter_columns`` cast of a column an index is attached to (pylance's ``OSError``
    "Cannot cast column(s) ... index(es) attached")."""
