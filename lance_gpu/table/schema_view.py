# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.schema.LanceSchema`` / ``LanceField``: read-only handles over the
table layer's field tree (:class:`lance_gpu.table.schema.LanceSchema`), with pylance's
method names (``fields()``, ``field(name)``, ``name()``, ``id()``, ``children()``, a
``metadata`` property) and its ``repr`` (Rust's one-line ``Debug`` of ``Schema { ... }`` /
``Field { ... }``).

These are what ``LanceDataset.lance_schema`` returns and what ``LanceOperation.Project`` /
``Overwrite`` take; the library itself works on the table layer's schema
(``snapshot.lance_schema``), which a handle exposes as :attr:`LanceSchema.table_schema`.
Handles compare equal when the field trees (names, ids, types, nullability, metadata,
encodings) and the schema metadata are equal, and pickle.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from lance_gpu.errors import SchemaMismatchError
from lance_gpu.table import schema as table_schema
from lance_gpu.table.debug_format import field_struct, render_compact, schema_struct

__all__ = ["LanceField", "LanceSchema"]


class LanceField:
    """One field of a :class:`LanceSchema` (pylance's ``lance.schema.LanceField``)."""

    def __init__(self, field: table_schema.LanceField) -> None:
        self._field = field

    def name(self) -> str:
        """The field's name (its last path component)."""
        return self._field.name

    def id(self) -> int:
        """The field id (stable across renames)."""
        return self._field.id

    def children(self) -> list[LanceField]:
        """The child fields (struct members, a list's item), in order."""
        return [LanceField(c) for c in self._field.children]

    @property
    def metadata(self) -> dict[str, str]:
        """The field's metadata as text (pylance's is a property, not a method)."""
        return {k: (bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v))
                for k, v in self._field.metadata.items()}

    def to_arrow(self) -> pa.Field:
        """The field as a ``pyarrow.Field`` (extension types resolved as in ``ds.schema``)."""
        return table_schema.LanceSchema([self._field]).to_arrow().field(0)

    def is_unenforced_primary_key(self) -> bool:
        """Whether the field is part of the unenforced primary key."""
        return bool(self._field.unenforced_primary_key)

    def unenforced_primary_key_position(self) -> int | None:
        """The field's position in the unenforced primary key (None: not part of it)."""
        return None

    def is_unenforced_clustering_key(self) -> bool:
        """Whether the field is part of the unenforced clustering key (lance-gpu writes none)."""
        return False

    def unenforced_clustering_key_position(self) -> int | None:
        """The field's position in the unenforced clustering key (None: not part of it)."""
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LanceField):
            return NotImplemented
        mine = [f.to_proto() for f in self._field.walk()]
        return mine == [f.to_proto() for f in other._field.walk()]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return render_compact(field_struct(self._field))


class LanceSchema:
    """A schema with Lance field ids (pylance's ``lance.schema.LanceSchema``).

    Parameters
    ----------
    schema : lance_gpu.table.schema.LanceSchema
        The field tree (use :meth:`from_pyarrow` to build one from an Arrow schema).
    """

    def __init__(self, schema: table_schema.LanceSchema) -> None:
        if not isinstance(schema, table_schema.LanceSchema):
            raise TypeError(f"LanceSchema wraps a field tree; use LanceSchema.from_pyarrow for a {type(schema).__name__}")
        self._schema = schema

    @property
    def table_schema(self) -> table_schema.LanceSchema:
        """The table layer's field tree this handle shows."""
        return self._schema

    @staticmethod
    def from_pyarrow(schema: pa.Schema) -> LanceSchema:
        """A Lance schema for ``schema``, field ids from 0 depth-first.

        Parameters
        ----------
        schema : pyarrow.Schema
            The schema to convert.
        """
        if not isinstance(schema, pa.Schema):
            raise TypeError(f"from_pyarrow takes a pyarrow.Schema, not {type(schema).__name__}")
        return LanceSchema(table_schema.LanceSchema.from_arrow(schema))

    def to_pyarrow(self) -> pa.Schema:
        """The Arrow schema (as ``LanceDataset.schema`` gives it)."""
        return self._schema.to_arrow()

    def fields(self) -> list[LanceField]:
        """The top-level fields, in order."""
        return [LanceField(f) for f in self._schema.fields]

    def field(self, name: str) -> LanceField | None:
        """The field at ``name`` (a top-level name or a dotted path such as ``"s.x"``), None if absent.

        Parameters
        ----------
        name : str
            The field's name or dotted path.
        """
        try:
            return LanceField(self._schema.field(name))
        except SchemaMismatchError:
            return None

    def field_case_insensitive(self, name: str) -> LanceField | None:
        """As :meth:`field`, matching names without regard to case (an exact match first).

        Parameters
        ----------
        name : str
            The field's name or dotted path.
        """
        exact = self.field(name)
        if exact is not None:
            return exact
        level, hit = self._schema.fields, None
        for part in name.split("."):
            hit = next((f for f in level if f.name.lower() == part.lower()), None)
            if hit is None:
                return None
            level = hit.children
        return LanceField(hit) if hit is not None else None

    def unenforced_primary_key(self) -> list[LanceField]:
        """The fields of the unenforced primary key, in schema order."""
        return [LanceField(f) for f in self._schema.walk() if f.unenforced_primary_key]

    def unenforced_clustering_key(self) -> list[LanceField]:
        """The fields of the unenforced clustering key (lance-gpu writes none)."""
        return []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LanceSchema):
            return NotImplemented
        return self._schema == other._schema

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return render_compact(schema_struct(self._schema))

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceSchema, (self._schema,))
