# SPDX-License-Identifier: Apache-2.0
"""Debug dumps of a dataset's metadata (pylance's ``lance.debug``): :func:`format_schema`,
:func:`format_fragment`, :func:`format_manifest`, :func:`list_transactions`.

pylance prints its Rust structures with Rust's pretty ``{:#?}`` format; these print the
same structures (the same type and field names, as the manifest and transaction protobufs
hold them) in that format, so tools grepping pylance's dumps (``"major_version: 2"``,
``"operation: Delete {"``) find the same text.  They are for people: the layout is not a
stable interface, in pylance either.

The format: ``Name {`` / ``Name(`` with one ``field: value,`` per line indented by four
spaces and the closing brace on its own line; empty lists ``[]``, maps ``{}``; options
``Some(\\n    value,\\n)`` or ``None``; strings in double quotes with Rust's escapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lance_gpu._proto import table_pb2
from lance_gpu.table.debug_format import Struct as _Struct
from lance_gpu.table.debug_format import Tuple as _Tuple
from lance_gpu.table.debug_format import Unit as _Unit
from lance_gpu.table.debug_format import render as _render
from lance_gpu.table.debug_format import schema_struct as _schema
from lance_gpu.table.debug_format import some as _some
from lance_gpu.table.schema import LanceSchema
from lance_gpu.txn.fragment import FragmentMetadata

__all__ = ["format_fragment", "format_manifest", "format_schema", "list_transactions"]


def _deletion(pb: table_pb2.DataFragment) -> Any:
    if not pb.HasField("deletion_file"):
        return _Unit("None")
    d = pb.deletion_file
    kind = "Bitmap" if d.file_type == table_pb2.DeletionFile.BITMAP else "Array"
    return _some(_Struct("DeletionFile", [
        ("read_version", int(d.read_version)), ("id", int(d.id)), ("file_type", _Unit(kind)),
        ("num_deleted_rows", _some(int(d.num_deleted_rows) if d.num_deleted_rows else None)),
        ("base_id", _Unit("None")),
    ]))


def _data_file(f: table_pb2.DataFile) -> _Struct:
    return _Struct("DataFile", [
        ("path", f.path), ("fields", list(f.fields)), ("column_indices", list(f.column_indices)),
        ("file_major_version", int(f.file_major_version)), ("file_minor_version", int(f.file_minor_version)),
        ("file_size_bytes", _Tuple("CachedFileSize", [int(f.file_size_bytes)])), ("base_id", _Unit("None")),
    ])


def _fragment(pb: table_pb2.DataFragment) -> _Struct:
    return _Struct("Fragment", [
        ("id", int(pb.id)), ("files", [_data_file(f) for f in pb.files]), ("overlays", []),
        ("deletion_file", _deletion(pb)),
        ("row_id_meta", _Unit("None") if not pb.HasField("inline_row_ids") and not pb.HasField("external_row_ids") else _some(_Unit("RowIdSequence"))),
        ("physical_rows", _some(int(pb.physical_rows))),
        ("last_updated_at_version_meta", _Unit("None")), ("created_at_version_meta", _Unit("None")),
    ])


def format_schema(dataset: Any) -> str:
    """The dataset's Lance schema (field ids, logical types, encodings).

    Parameters
    ----------
    dataset : LanceDataset
        The dataset (its version's schema).
    """
    return _render(_schema(dataset.snapshot.lance_schema))


def format_fragment(fragment: FragmentMetadata | Any, dataset: Any) -> str:
    """One fragment: its data files each with the schema of the fields it holds and its
    file version (``major_version`` / ``minor_version``), its deletion file and rows.

    Parameters
    ----------
    fragment : FragmentMetadata
        The fragment (``LanceFragment.metadata``; a ``LanceFragment`` is taken too).
    dataset : LanceDataset
        The dataset whose schema names the fields.
    """
    meta = fragment.metadata if not isinstance(fragment, FragmentMetadata) and hasattr(fragment, "metadata") else fragment
    pb = meta.to_pb()
    schema = dataset.snapshot.lance_schema
    files = []
    for f in pb.files:
        ids = {int(i) for i in f.fields if int(i) >= 0}
        sub = LanceSchema([top for top in schema.fields if any(x.id in ids for x in top.walk())], schema.metadata)
        files.append(_Struct("PrettyPrintableDataFile", [
            ("path", f.path), ("fields", list(f.fields)), ("column_indices", list(f.column_indices)),
            ("schema", _schema(sub)), ("major_version", int(f.file_major_version)),
            ("minor_version", int(f.file_minor_version)),
        ]))
    return _render(_Struct("PrettyPrintableFragment", [
        ("id", int(pb.id)), ("files", files), ("deletion_file", _deletion(pb)),
        ("physical_rows", _some(int(pb.physical_rows))),
    ]))


def format_manifest(dataset: Any) -> str:
    """The dataset version's manifest: schema, version, writer, fragments, flags, format.

    Parameters
    ----------
    dataset : LanceDataset
        The dataset version to describe.
    """
    m = dataset.manifest
    writer = _Unit("None")
    if m.HasField("writer_version"):
        writer = _some(_Struct("WriterVersion", [
            ("library", m.writer_version.library), ("version", m.writer_version.version),
            ("prerelease", _Unit("None")), ("build_metadata", _Unit("None")),
        ]))
    major, _, minor = m.data_format.version.partition(".")
    return _render(_Struct("Manifest", [
        ("schema", _schema(dataset.snapshot.lance_schema)), ("version", int(m.version)), ("branch", _Unit("None")),
        ("writer_version", writer), ("fragments", [_fragment(f) for f in m.fragments]),
        ("version_aux_data", int(m.version_aux_data)), ("index_section", _some(int(m.index_section)) if m.HasField("index_section") else _Unit("None")),
        ("timestamp_nanos", int(m.timestamp.seconds) * 1_000_000_000 + int(m.timestamp.nanos)),
        ("tag", _Unit("None")), ("reader_feature_flags", int(m.reader_feature_flags)),
        ("writer_feature_flags", int(m.writer_feature_flags)),
        ("max_fragment_id", _some(int(m.max_fragment_id)) if m.HasField("max_fragment_id") else _Unit("None")),
        ("transaction_file", _some(m.transaction_file) if m.transaction_file else _Unit("None")),
        ("next_row_id", int(m.next_row_id)),
        ("data_storage_format", _Struct("DataStorageFormat", [
            ("file_format", m.data_format.file_format), ("version", _Unit(f"V{major}_{minor}")),
        ])),
        ("config", dict(m.config)), ("table_metadata", dict(m.table_metadata)),
    ]))


def _operation(op: Any) -> _Struct:
    kind = type(op).__name__
    fields: list[tuple[str, Any]] = []
    for name in ("fragments", "updated_fragments", "new_fragments"):
        if hasattr(op, name):
            fields.append((name, [_fragment(f.to_pb()) for f in getattr(op, name)]))
    for name in ("removed_fragment_ids", "deleted_fragment_ids", "fields_modified"):
        value = getattr(op, name, None)
        if value is None and name == "deleted_fragment_ids":
            value = getattr(op, "deleted_ids", None)
        if value is not None:
            fields.append((name, [int(i) for i in value]))
    if hasattr(op, "predicate"):
        fields.append(("predicate", op.predicate))
    if hasattr(op, "version") and kind == "Restore":
        fields.append(("version", int(op.version)))
    return _Struct(kind, fields)


def list_transactions(dataset: Any, max_transactions: int = 10) -> Sequence[str]:
    """The transactions of the latest ``max_transactions`` versions, newest first, each
    formatted (``Transaction { read_version, uuid, operation: Kind { ... }, ... }``).

    Parameters
    ----------
    dataset : LanceDataset
        The dataset (versions up to this one).
    max_transactions : int, default 10
        How many versions to go back.
    """
    out = []
    for txn in dataset.get_transactions(max_transactions):
        if txn is None:
            out.append("None")
            continue
        out.append(_render(_Struct("Transaction", [
            ("read_version", int(txn.read_version)), ("uuid", txn.uuid), ("operation", _operation(txn.operation)),
            ("tag", _Unit("None")),
            ("transaction_properties", _some(dict(txn.transaction_properties)) if txn.transaction_properties else _Unit("None")),
        ])))
    return out
