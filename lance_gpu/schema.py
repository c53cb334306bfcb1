# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.schema``: :class:`LanceSchema` / :class:`LanceField` (a schema with Lance
field ids, pylance's methods) and the JSON form of Arrow schemas (:func:`schema_to_json` /
:func:`json_to_schema`).

The JSON form is lance's: ``{"fields": [FIELD...], "metadata": {...}}`` (``metadata`` only
when the schema has some), each ``FIELD`` ``{"name", "type": TYPE, "nullable",
"metadata"?}`` and each ``TYPE`` ``{"type": NAME}`` where ``NAME`` is the Lance logical
type string of a scalar (``"int32"``, ``"float"``, ``"timestamp:us:UTC"``,
``"decimal:128:10:2"``, ``"dict:string:int32:false"``...), or for nested types
``{"type": "struct" | "list" | "large_list", "fields": [...]}``,
``{"type": "fixed_size_list", "fields": [item], "length": n}`` and
``{"type": "fixed_size_binary", "length": n}``.  Maps and view types have no JSON form
(ValueError, as pylance).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from lance_gpu.errors import InvalidArgumentError
from lance_gpu.table.schema import arrow_type_to_logical, logical_to_arrow_type
from lance_gpu.table.schema_view import LanceField, LanceSchema

__all__ = ["LanceField", "LanceSchema", "json_to_schema", "schema_to_json"]


def _metadata(md: dict[bytes, bytes] | None) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (md or {}).items()}


def _type_json(t: pa.DataType) -> dict[str, Any]:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_json(t.field(i)) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "list" if pa.types.is_list(t) else "large_list", "fields": [_field_json(t.value_field)]}
    if pa.types.is_fixed_size_list(t):
        return {"type": "fixed_size_list", "fields": [_field_json(t.value_field)], "length": t.list_size}
    if pa.types.is_fixed_size_binary(t) and not isinstance(t, pa.BaseExtensionType):
        return {"type": "fixed_size_binary", "length": t.byte_width}
    if pa.types.is_map(t) or t in (pa.string_view(), pa.binary_view()):
        raise InvalidArgumentError(f"Failed to convert schema to json: Json conversion: Unsupported type: {t}")
    try:
        return {"type": arrow_type_to_logical(t)}
    except ValueError as exc:
        raise InvalidArgumentError(f"Failed to convert schema to json: {exc}") from None


def _field_json(f: pa.Field) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.name, "type": _type_json(f.type), "nullable": f.nullable}
    if f.metadata:
        out["metadata"] = _metadata(f.metadata)
    return out


def schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    """Converts a pyarrow schema to a JSON-compatible dict (lance's JSON form).

    Parameters
    ----------
    schema : pyarrow.Schema
        The schema to convert.

    Returns
    -------
    dict
        ``{"fields": [...], "metadata": {...}}``; see the module docstring.
    """
    out: dict[str, Any] = {"fields": [_field_json(f) for f in schema]}
    if schema.metadata:
        out["metadata"] = _metadata(schema.metadata)
    return out


def _bad(schema_json: Any, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Failed to convert json to schema: {why}, json={json.dumps(schema_json)}")


def _type_from(spec: Any, whole: Any) -> pa.DataType:
    if not isinstance(spec, dict) or "type" not in spec:
        raise _bad(whole, "missing field `type`")
    name = spec["type"]
    children = [_field_from(c, whole) for c in spec.get("fields") or []]
    if name == "struct":
        return pa.struct(children)
    if name in ("list", "large_list", "fixed_size_list"):
        if len(children) != 1:
            raise _bad(whole, f"a {name} type needs exactly one child field")
        if name == "list":
            return pa.list_(children[0])
        if name == "large_list":
            return pa.large_list(children[0])
        return pa.list_(children[0], int(spec.get("length", -1)))
    if name == "fixed_size_binary":
        return pa.binary(int(spec["length"]))
    try:
        return logical_to_arrow_type(str(name))
    except ValueError:
        raise _bad(whole, f"Json conversion: Unsupported type: {name!r}") from None


def _field_from(spec: Any, whole: Any) -> pa.Field:
    if not isinstance(spec, dict) or "name" not in spec:
        raise _bad(whole, "missing field `name`")
    typ = _type_from(spec.get("type"), whole)
    return pa.field(spec["name"], typ, bool(spec.get("nullable", True)), metadata=spec.get("metadata") or None)


def json_to_schema(schema_json: dict[str, Any]) -> pa.Schema:
    """Converts a JSON-compatible dict (as :func:`schema_to_json` gives) to a pyarrow schema.

    Parameters
    ----------
    schema_json : dict
        The JSON payload.

    Returns
    -------
    pyarrow.Schema

    Raises
    ------
    ValueError
        (:class:`~lance_gpu.errors.InvalidArgumentError`) for a payload without ``fields``,
        a field without ``type`` or an unknown type name.
    """
    if not isinstance(schema_json, dict) or "fields" not in schema_json:
        raise _bad(schema_json, "missing field `fields`")
    fields = [_field_from(f, schema_json) for f in schema_json["fields"]]
    return pa.schema(fields, metadata=schema_json.get("metadata") or None)
