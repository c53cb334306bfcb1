# SPDX-License-Identifier: Apache-2.0
"""SQL filter predicates → :class:`pyarrow.compute.Expression`.

pylance users write filters as SQL text (``ds.to_table(filter="x > 5 AND s LIKE 'a%'")``).
:func:`parse_filter` parses that text with sqlglot and compiles it to a pyarrow compute
expression that gives the rows pylance gives, in the same order, when used as
``table.filter(expression)``.

Pipeline (it mirrors what pylance does internally, so that the same literals get the same
types and the same predicates are rejected):

1. **Parse** with sqlglot using :class:`LanceFilterDialect`, sqlglot's default dialect with the
   quoting rules of pylance's filter parser: backticks quote identifiers (`` `my col` ``),
   single *and double* quotes delimit string literals (pylance turns ``"abc"`` into the string
   ``'abc'``, not a column; ``s = "apple"`` compares with a string), a quote is escaped by
   doubling it, and a backslash is an ordinary character (so ``'a\\_b'`` reaches LIKE intact).
   sqlglot's Spark/Hive dialects were not used: they treat backslash as a string escape.
2. **Build** a small logical tree (column refs, literals, binary ops, ...). Unquoted names are
   matched to top-level columns exactly, then case-insensitively (as pylance does); backticked
   names and struct children (``a.b``, ``a['b']``) match exactly. Integer literals are Int64
   (UInt64 above ``2**63 - 1``), decimals are Float64, ``-5`` is the literal ``-5``.
3. **Resolve** literal types the way lance's ``resolve_expr`` does: at the top level and through
   AND/OR only, a literal compared with a column (or struct field), the literal-only arithmetic
   on the other side, BETWEEN bounds and the IN list of a column are converted to the column's
   type, *exactly* (``int8_col > 200``, ``int_col > 5.5``, ``uint_col > -1``, ``ts_col > '2024-01-01'``
   are errors, as in pylance; ``int32_col > 5`` stays int32; ``float32_col = 0.1`` compares in float32).
4. **Coerce and compile** with DataFusion's rules: numeric operands are cast to DataFusion's
   common type (``uint32 + int32`` is int64, ``int8 * int8`` stays int8), integer arithmetic
   wraps on overflow, ``/`` on integers truncates toward zero and ``%`` takes the sign of the
   dividend (both raise ``ArrowInvalid`` on a zero divisor when applied, like pylance), string
   literals compared with numbers or dates are cast, dates compared with timestamps become
   timestamps, timestamps of different units compare at the coarser unit,
   ``CAST(int AS narrower int) <op> literal`` compares the uncast value (DataFusion's "unwrap cast
   in comparison" rewrite), ``IN`` / ``NOT IN`` and every boolean operator use SQL's three-valued
   logic. Arithmetic DataFusion does in Decimal128 (a decimal operand; uint64 with a signed
   integer, as in ``_rowid % 3``) has arrow-rs's result types and is computed exactly
   (:mod:`lance_gpu.filter_udfs`); a zero divisor or a 128-bit overflow raises
   :class:`~lance_gpu.errors.DecimalArithmeticError` (an ``ArrowInvalid``) when evaluated.
   Float comparisons follow lance: Arrow's total order (NaN equals NaN and sorts above
   +inf; ``-0.0 < 0.0``) except that a comparison with a zero constant treats ``-0.0`` and
   ``0.0`` as equal.

A NULL predicate result drops the row (``Table.filter``'s default), like SQL ``WHERE``.

Known differences from pylance 14.0.2:

* NaN sign: pylance orders NaNs by their sign bit (a negative NaN sorts below -inf); pyarrow
  expressions cannot read that bit, so every NaN is taken to be positive. Stored NaNs
  (``float('nan')``, ``np.nan``) are positive; NaNs made inside the filter by ``-x`` or ``0/0``
  may differ (their sign is platform dependent).
* pylance's optimizer merges IN lists over one operand (``x IN (1) AND x IN (2)`` becomes
  ``x IN ()``, ``x NOT IN (1) OR x NOT IN (2)`` becomes ``x NOT IN ()``) and so keeps rows whose
  ``x`` is NULL under a NOT / in the NOT IN case; we keep SQL's NULL (the row is dropped).
* pylance's simplifier folds ``(x = 0) AND NOT (x = 0)`` to FALSE for a float ``x`` compared
  with zero (and so keeps a NULL ``x``'s row under an enclosing NOT); we keep SQL's NULL.
  (``i = 1 AND NOT (i = 1)`` on integers, or ``f > 1 AND NOT (f > 1)``, keep NULL in pylance too.)
* pylance ignores text after a complete predicate (``x > 5 )``, ``x > 5 LIMIT 1``); we raise.
* sqlglot drops a unary plus (``x = +5``), which pylance rejects.
* We accept the SQL keyword forms pylance 14's planner refuses although DataFusion has the
  functions: ``CEIL`` / ``FLOOR``, ``SUBSTR`` / ``SUBSTRING`` (also ``FROM .. FOR``), ``TRIM``
  (also ``BOTH .. FROM``), ``EXTRACT(part FROM x)``, ``OVERLAY(.. PLACING ..)``; each computes
  what pylance computes for the backticked name (`` `ceil`(x) ``), which we take too.
* Array literals may hold NULL (``[1, NULL]``; pylance fails on them at execution).
* A projection of constants only (``columns={"v": "[1, 2]"}``) repeats the value per row;
  pylance refuses it ("Scans must request at least one column").
* ``arrow_typeof`` is decided when the expression is compiled, so ``arrow_typeof(x)`` of an
  ``x`` that would fail when evaluated (a failing ``arrow_cast``) gives the type's name.
* ``a IS DISTINCT FROM b AND c`` is ``(a IS DISTINCT FROM b) AND c`` here; pylance's parser
  reads ``a IS DISTINCT FROM (b AND c)`` (and then usually fails). We also read ``<=>`` as
  ``IS NOT DISTINCT FROM``, which pylance refuses.
* ``CAST`` of a text column to a timestamp takes every ISO 8601 text Arrow reads (also
  ``'2024-03-05T10'``, which DataFusion may refuse).

SQL functions (pylance's names; each compiles to Arrow compute, or to a pyarrow scalar UDF from
:mod:`lance_gpu.filter_udfs` where Arrow has no kernel): ``array_has`` / ``array_contains``,
``array_has_any``, ``array_has_all``, ``array_length``, ``regexp_match`` (a ``list<string>``;
true where it matches when used as a condition), ``regexp_like`` (flags ``i m s x U``; the
pattern and the flags of both may be columns), ``starts_with``, ``ends_with``, ``contains`` (the pattern may be a column),
``left`` / ``right`` (``string_view``, as pylance), ``lpad`` / ``rpad``, ``length`` / ``char_length`` /
``character_length``, ``lower``, ``upper``, ``abs``, ``coalesce``, ``round`` (half away from
zero; the digits may be a column), ``date_trunc``, ``current_date``, ``now``, ``is_valid``, ``json_extract``,
``json_exists``, ``json_array_length``, ``json_array_contains``, ``json_get_string``,
``json_get_int``, ``json_get_float``, ``json_get_bool``, ``json_get`` (Lance's binary JSONB of the
member or array element, ``large_binary``); ``sqrt``, ``exp``, ``ln``, ``log10``,
``log2``, ``power`` / ``pow``, ``signum``, ``trunc``, ``replace``, ``btrim``, ``ltrim``, ``rtrim``,
``concat``, ``strpos`` / ``instr`` (character positions; the substring may be a column), ``reverse``,
``initcap``, ``octet_length``, ``bit_length``, ``split_part`` (constant delimiter and part), ``repeat``
(the count may be a column); ``log`` (``log(base, x)``; ``log(x)`` is ``log(10, x)``), ``sin``, ``cos``,
``tan``, ``asin``, ``acos``, ``atan``, ``atan2``, ``cot``, ``degrees``, ``radians``, ``isnan``,
``iszero``, ``nanvl``, ``nullif``, ``ifnull`` / ``nvl`` (``coalesce``), ``nvl2``, ``greatest``,
``least`` (of the non-NULL arguments), ``regexp_count``, ``regexp_replace`` (``g`` flag; constant
pattern and replacement), ``arrow_cast`` / ``arrow_typeof`` (DataFusion's type names, parsed
and printed by :mod:`lance_gpu.filter_types`: ``FixedSizeList(32, Float32)``,
``Timestamp(Nanosecond, Some("+00:00"))``, ``Decimal128(10, 2)``, ``List(Int64)``, ...), ``ascii``, ``md5``,
``sha224`` / ``sha256`` / ``sha384`` / ``sha512``, ``to_hex``, ``translate``, ``levenshtein``,
``find_in_set``, ``substr_index``, ``encode`` (hex, base64); ``ceil``, ``floor``, ``trunc(x, digits)``,
``cbrt``, ``sinh`` / ``cosh`` / ``tanh`` / ``asinh`` / ``acosh`` / ``atanh``, ``pi``, ``gcd``, ``lcm``,
``factorial``, ``chr``, ``substr`` / ``substring``, ``trim``, ``overlay``, ``concat_ws``;
``to_timestamp`` (text with optional chrono formats, seconds, timestamps) and
``to_timestamp_seconds`` / ``_millis`` / ``_micros`` / ``_nanos``, ``to_date``, ``to_unixtime``,
``from_unixtime``, ``make_date``, ``date_part`` / ``datepart`` / ``EXTRACT``, ``to_char`` /
``date_format``; lists: ``list[i]`` / ``array_element`` (1-based, negative from the end),
``cardinality``, ``empty``, ``array_position`` / ``array_positions``, ``string_to_array``,
``array_to_string``, ``array_sort``, ``array_distinct``, ``array_max`` / ``array_min``,
``array_reverse``, ``array_slice``, ``array_append`` / ``array_prepend`` / ``array_concat``,
``array_remove`` / ``array_remove_all``, ``array_pop_back`` / ``array_pop_front``,
``array_any_value``, ``flatten``, ``array_union`` / ``array_intersect`` / ``array_except``,
``array_replace`` / ``_all`` / ``_n``, ``array_remove_n``, ``array_dims`` / ``array_ndims``,
``array_repeat``, ``array_resize``, ``array_distance``, ``range``, ``generate_series`` (and the
``list_*`` names, ``array_indexof``, ``array_join``, ``make_list``, ``string_to_list``);
``make_array`` with columns among its items (a list per row); ``regexp_instr``, ``decode``,
``digest``, ``substring_index``, ``datetrunc``, ``today``, ``random``, ``uuid``, ``date_bin``
(any interval; by months or years only from the default origin); structs: ``named_struct``,
``struct``, ``get_field``, ``x['field']`` / ``x.field`` of any struct value
(``list_struct[1]['x']``). ``TRY_CAST`` (NULL where a value cannot be cast); ``LIKE`` / ``ILIKE``
with a pattern per row (``s LIKE other_col``). Array literals (``[1, 2]``, ``make_array(1, 2)``) are constant lists
of the first item's type; lists compare element by element (``nums = [1, 2]``,
``tags IN (['a'], ['b'])``). The JSON functions also take ``large_binary`` JSONB (what
``json_get`` returns: ``json_get_string(json_get(j, 'user'), 'name')``). As in pylance, ``length``,
``reverse``, ``left`` / ``right``, ``lpad`` / ``rpad``, ``regexp_match`` and ``concat`` take
integers, booleans, dates and floats as text (floats printed as DataFusion prints them, also
for ``CAST(f AS STRING)``); the other string functions refuse them. JSON paths, keys and
values may be columns. ``X'0102'`` (and ``0x0102``, as in
pylance) is a binary literal. ``_rowid``, ``_rowaddr`` and ``_rowoffset`` are uint64 virtual
columns (:data:`VIRTUAL_COLUMNS`; pylance refuses ``_rowoffset`` in filters, we accept it):
the reader appends those the compiled result lists in ``virtual_columns``.
:func:`compile_expression` compiles any expression (projections), :func:`parse_filter`
predicates.

Errors are :class:`~lance_gpu.errors.FilterError` (a ``ValueError`` and an ``OSError``) whose
message starts with pylance's ``Invalid user input:`` (an unknown column: ``No field named x``).

Not supported (raise :class:`~lance_gpu.errors.FilterError` naming the function or construct):
other SQL functions (``date_bin`` by months from another origin, ``array_to_string`` of nested lists,
``map`` functions, aggregates, ...); float16 as text; the ``U`` flag in
a per-row regular expression; JSON paths pylance's parser accepts but sqlglot's refuses
(``'1a'`` as a constant); ``LIKE ... ESCAPE`` with a character other than backslash
(pylance rejects that too); date/time arithmetic other than ``ts - ts`` (a duration)
and ``date - date`` (days; pylance refuses INTERVAL literals); decimal256 arithmetic; subqueries, ``CASE``,
nested array literals (``[[1]]``, refused by pylance too), list
slices (``x[1:2]``), comparisons of struct values.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Tokenizer as _SqlglotTokenizer

from lance_gpu import filter_udfs
from lance_gpu.errors import FilterError
from lance_gpu.filter_types import UNIT_PER_SECOND, parse_date, parse_timestamp, parse_type_name, type_name
from lance_gpu.filter_udfs import UdfSpec

__all__ = [
    "SUPPORTED_FUNCTIONS",
    "VIRTUAL_COLUMNS",
    "CompiledExpression",
    "CompiledFilter",
    "LanceFilterDialect",
    "compile_expression",
    "parse_expression",
    "parse_filter",
    "predicate_tree",
]

# Row-identity columns a predicate or projection may name without them being in the schema.
# The reader appends them (uint64) to the table before applying the expression.
VIRTUAL_COLUMNS = ("_rowid", "_rowaddr", "_rowoffset")


# --------------------------------------------------------------------------------------
# Dialect
# --------------------------------------------------------------------------------------


class LanceFilterDialect(Dialect):
    """sqlglot's default dialect with pylance's quoting rules (see the module docstring)."""

    class Tokenizer(_SqlglotTokenizer):
        QUOTES = ["'", '"']  # noqa: RUF012 - sqlglot's tokenizer settings
        IDENTIFIERS = ["`"]  # noqa: RUF012 - sqlglot's tokenizer settings
        # Only the doubled delimiter escapes ('it''s', "say ""hi"""); backslash is literal.
        STRING_ESCAPES = ["'", '"']  # noqa: RUF012 - sqlglot's tokenizer settings
        # X'0102' is a binary literal, as in pylance.
        HEX_STRINGS = [("x'", "'"), ("X'", "'")]  # noqa: RUF012 - sqlglot's tokenizer settings


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledFilter:
    """A filter ready to apply to Arrow tables.

    ``expression``: the predicate as a pyarrow compute expression.
    ``columns``: the top-level columns it reads (schema order), which a reader must load.
    ``source``: the SQL text it was parsed from (``None`` for an expression input).
    ``virtual_columns``: the row-identity columns it reads (a subset of
    :data:`VIRTUAL_COLUMNS`), which a reader must append as uint64 columns of those names.
    ``udfs``: the pyarrow UDFs the expression calls (registered again by :meth:`apply`).
    """

    expression: pc.Expression
    columns: list[str] = field(default_factory=list)
    source: str | None = None
    virtual_columns: list[str] = field(default_factory=list)
    udfs: tuple[UdfSpec, ...] = ()
    #: The same predicate as a :data:`DirectTree` (None: only as :attr:`expression`).
    direct: tuple | None = None

    def mask(self, table: pa.Table) -> pa.BooleanArray:
        """The predicate's value for every row of ``table``, as one boolean array (NULL
        where the predicate is NULL), evaluated in the calling thread: by the compute
        functions of :attr:`direct` where the predicate has that form, else by a one-node
        Acero projection of :attr:`expression`.

        ``table`` must hold :attr:`columns` and :attr:`virtual_columns`; a missing virtual
        column raises :class:`FilterError` naming it."""
        from pyarrow import acero

        _check_virtual(self.virtual_columns, table)
        if self.direct is not None and not self.udfs:
            value = _evaluate_direct(self.direct, table)
            if value is not None:
                return _as_mask(value, table.num_rows)
        filter_udfs.ensure_registered(self.udfs)
        source = table if table.num_columns else pa.table({"__rows": pa.nulls(table.num_rows)})
        plan = acero.Declaration.from_sequence([
            acero.Declaration("table_source", acero.TableSourceNodeOptions(source)),
            acero.Declaration("project", acero.ProjectNodeOptions([self.expression], ["keep"])),
        ])
        column = plan.to_table(use_threads=False).column(0)
        if column.type != pa.bool_():
            column = column.cast(pa.bool_())
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)

    def positions(self, table: pa.Table) -> np.ndarray:
        """Row numbers (int64, ascending) of ``table`` where the predicate is true."""
        return true_positions(self.mask(table))

    def count(self, table: pa.Table) -> int:
        """How many rows of ``table`` the predicate keeps."""
        return int(pc.sum(self.mask(table)).as_py() or 0)

    def apply(self, table: pa.Table) -> pa.Table:
        """Keep the rows for which the predicate is true (false and NULL drop the row).

        ``table`` must hold :attr:`columns` and :attr:`virtual_columns`; a missing virtual
        column raises :class:`FilterError` naming it."""
        return table.filter(self.mask(table))

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"CompiledFilter({self.expression!s}, columns={self.columns!r})"


@dataclass(frozen=True)
class CompiledExpression:
    """Any SQL expression (a projection such as ``lower(s) || '!'``), ready to evaluate.

    ``expression``: the pyarrow compute expression; ``type``: the Arrow type of its result;
    ``columns`` / ``virtual_columns`` / ``udfs``: as in :class:`CompiledFilter`;
    ``source``: the SQL text.
    """

    expression: pc.Expression
    type: pa.DataType
    columns: list[str]
    virtual_columns: list[str]
    source: str
    udfs: tuple[UdfSpec, ...] = ()
    #: The same expression as a :data:`DirectTree` (None: only as :attr:`expression`).
    direct: tuple | None = None

    def evaluate(self, table: pa.Table) -> pa.ChunkedArray:
        """The expression's value for every row of ``table`` (which holds ``columns`` and
        ``virtual_columns``); a constant expression is repeated ``table.num_rows`` times.
        Evaluated by the compute calls of :attr:`direct` where it has that form, else by a
        one-node Acero projection."""
        from pyarrow import acero

        _check_virtual(self.virtual_columns, table)
        if self.direct is not None and not self.udfs:
            value = _evaluate_direct(self.direct, table)
            if value is not None:
                if isinstance(value, pa.Scalar):
                    value = pa.repeat(value, table.num_rows)
                if not isinstance(value, pa.ChunkedArray):
                    value = pa.chunked_array([value], type=value.type)
                return value if value.type == self.type else value.cast(self.type)
        filter_udfs.ensure_registered(self.udfs)
        if table.num_columns == 0:
            table = pa.table({"__rows": pa.nulls(table.num_rows)})
        plan = acero.Declaration.from_sequence(
            [
                acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
                acero.Declaration("project", acero.ProjectNodeOptions([self.expression], ["value"])),
            ]
        )
        try:
            column = plan.to_table(use_threads=False).column(0)
        except pa.ArrowNotImplementedError as e:  # pragma: no cover - a kernel pyarrow lacks
            raise FilterError(f"cannot evaluate {self.source!r}: {_first_line(e)}") from None
        return column if column.type == self.type else column.cast(self.type)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"CompiledExpression({self.source!r}: {self.type})"


def true_positions(mask: pa.BooleanArray) -> np.ndarray:
    """Positions (int64, ascending) where ``mask`` is true and not NULL, straight from its
    bitmaps (pyarrow's indices_nonzero is several times slower)."""
    n = len(mask)
    if n == 0:
        return np.zeros(0, np.int64)
    validity, values = mask.buffers()[0], mask.buffers()[1]
    bits = np.unpackbits(np.frombuffer(values, np.uint8), bitorder="little", count=mask.offset + n)[mask.offset :]
    if mask.null_count and validity is not None:
        valid = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little", count=mask.offset + n)[mask.offset :]
        bits &= valid
    # unpackbits gives 0 / 1 bytes: read them as booleans (flatnonzero of uint8 first
    # compares every byte with zero, five times slower)
    return np.flatnonzero(bits.view(np.bool_)).astype(np.int64, copy=False)


#: A predicate as plain compute calls, evaluated without an Acero plan: ``("column", name)``
#: (a top-level column of the table), ``("scalar", value)`` (a ``pyarrow.Scalar``) or
#: ``("call", name, operands)`` (``pyarrow.compute.<name>`` of the operands' values).  The
#: compiler builds one, beside the expression and from the same coerced operands, for columns,
#: constants, comparisons and ``+ - * /`` whose operands need no cast of a column, IS [NOT]
#: NULL, NOT, AND and OR; any other construct leaves the filter (or expression) without one.
#: Picklable (a scan plan carries its filter).  An Acero plan costs ~0.15 ms more per
#: evaluation in a process that was idle before (a delete or update of a few rows evaluates
#: its predicate and its SET values once each).
DirectTree = tuple


def _evaluate_direct(tree: DirectTree, table: pa.Table) -> Any:
    """The value of ``tree`` over ``table`` (an array, a chunked array or a scalar); None
    when ``table`` lacks a column it reads (the caller then evaluates the expression, which
    reports that as it always did)."""
    kind = tree[0]
    if kind == "column":
        try:
            return table.column(tree[1])
        except KeyError:
            return None
    if kind == "scalar":
        return tree[1]
    args = [_evaluate_direct(arg, table) for arg in tree[2]]
    if any(a is None for a in args):
        return None
    return getattr(pc, tree[1])(*args)


def _as_mask(value: Any, num_rows: int) -> pa.BooleanArray:
    """A predicate's value as one boolean array of ``num_rows`` (a constant repeated)."""
    if isinstance(value, pa.Scalar):
        value = pa.repeat(value, num_rows)
    elif isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks() if value.num_chunks != 1 else value.chunk(0)
    if value.type != pa.bool_():
        value = value.cast(pa.bool_())
    return value


def _direct(*parts: _C) -> bool:
    """Whether every operand has a :data:`DirectTree`."""
    return all(p.direct is not None for p in parts)


def _check_virtual(virtual: list[str], table: pa.Table) -> None:
    missing = [name for name in virtual if name not in table.column_names]
    if missing:
        raise FilterError(
            f"the expression reads {missing}, which this read does not provide "
            "(row-identity columns must be appended by the reader)"
        )


def compile_expression(sql: str, schema: pa.Schema, role: str = "expression") -> CompiledExpression:
    """Compile any pylance SQL expression (not only predicates) against ``schema``;
    ``role`` is what error messages call it (``"update expression"``...).

    This is the entry point for projections (``columns={"name": "sql expression"}``):
    columns, struct fields, literals, operators, CAST and every function in
    :data:`SUPPORTED_FUNCTIONS`, typed as pylance types them. Raises :class:`FilterError`
    naming what is wrong (unknown column or function, bad argument types, syntax).
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if not isinstance(sql, str):
        raise TypeError(f"a SQL expression must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise FilterError("empty SQL expression")
    try:
        hash(schema)
    except TypeError:  # a schema with an unhashable (extension) type: compiled every time
        return _compile_expression_text(sql, schema, role)
    return _compile_expression_text_cached(sql, schema, role)


def _compile_expression_text(sql: str, schema: pa.Schema, role: str) -> CompiledExpression:
    compiled, ir, udfs = _compile_text(sql, schema, role)
    virtual = _collect_virtual(ir)
    _validate(compiled.expr, _with_virtual(schema, virtual), sql, project=True)
    direct = ("scalar", compiled.const) if compiled.const is not None else compiled.direct
    return CompiledExpression(compiled.expr, compiled.type, _collect_columns(ir, schema), virtual, sql, udfs, direct)


#: :func:`compile_expression` kept per (text, schema, role), as :func:`parse_filter` keeps
#: predicates: an update compiles its ``SET`` expressions on every call (0.4 ms each, half
#: of it binding the expression to an empty table), and a frozen CompiledExpression is safe
#: to share.
_compile_expression_text_cached = functools.lru_cache(maxsize=128)(_compile_expression_text)


def parse_filter(filter: str | pc.Expression, schema: pa.Schema) -> CompiledFilter:  # noqa: A002 - pylance's argument name
    """Compile a pylance-style SQL predicate (or a pyarrow expression) against ``schema``.

    Raises :class:`FilterError` for SQL that does not parse, refers to unknown columns or
    fields, mixes incompatible types, or uses a construct this module does not support.

    For a :class:`pyarrow.compute.Expression` input the expression is used as given; it is
    validated by binding it to an empty table of ``schema`` and its columns are found by
    taking the top-level names that occur in ``str(expr)`` and keeping those the expression
    fails to bind without.
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if isinstance(filter, pc.Expression):
        return _compile_expression_input(filter, schema)
    if not isinstance(filter, str):
        raise TypeError(
            f"filter must be a SQL string or a pyarrow.compute.Expression, got {type(filter).__name__}"
        )
    if not filter.strip():
        raise FilterError("empty filter predicate")
    try:
        hash(schema)
    except TypeError:  # a schema with an unhashable (extension) type: compiled every time
        return _parse_filter_text(filter, schema)
    return _parse_filter_text_cached(filter, schema)


def _parse_filter_text(filter: str, schema: pa.Schema) -> CompiledFilter:  # noqa: A002 - as parse_filter
    compiled, ir, udfs = _compile_text(filter, schema)
    if compiled.truth is not None:
        compiled = _C(compiled.truth, pa.bool_())
    if compiled.type == pa.null() or not pa.types.is_boolean(compiled.type):
        raise FilterError(f"the filter {filter!r} does not return a boolean (it is {compiled.type})")
    virtual = _collect_virtual(ir)
    _validate(compiled.expr, _with_virtual(schema, virtual), filter)
    direct = ("scalar", compiled.const) if compiled.const is not None else compiled.direct
    return CompiledFilter(compiled.expr, _collect_columns(ir, schema), filter, virtual, udfs, direct)


#: :func:`parse_filter` of SQL text, kept per (text, schema): a read plans and runs its filter
#: more than once (and a frozen CompiledFilter is safe to share).
_parse_filter_text_cached = functools.lru_cache(maxsize=128)(_parse_filter_text)


def _compile_text(text: str, schema: pa.Schema, role: str = "filter") -> tuple[_C, _Node, tuple[UdfSpec, ...]]:
    tree = _parse_sql(text)
    _check_function_names(text, role)
    if tree.find(exp.Cast) is not None:
        _check_type_spellings(text)
    ir = _resolve(_Builder(schema, text, role).build(tree), f"{role} {text!r}")
    compiler = _Compiler(text, role)
    compiled = compiler.compile(ir)
    return compiled, ir, tuple(compiler.udfs)


def predicate_tree(filter: str, schema: pa.Schema) -> _Node:  # noqa: A002 - as parse_filter
    """The resolved logical tree of the SQL predicate ``filter`` (literals typed as the columns
    they are compared with): column refs ``_Col``, literals ``_Lit``, ``_Bin`` (``and`` /
    ``or`` / comparisons ...), ``_Unary``, ``_InList``, ``_Between``, ``_Func``, ``_ArrayLit``.
    Index planning (:mod:`lance_gpu.index.query`) walks it to find the terms an index answers."""
    return _predicate_tree_cached(filter, schema)


@functools.lru_cache(maxsize=128)
def _predicate_tree_cached(filter: str, schema: pa.Schema) -> _Node:  # noqa: A002 - as parse_filter
    return _compile_text(filter, schema)[1]


def _with_virtual(schema: pa.Schema, virtual: list[str]) -> pa.Schema:
    for name in virtual:
        if name not in schema.names:  # the scan passes schemas that already hold them
            schema = schema.append(pa.field(name, pa.uint64()))
    return schema


def parse_expression(text: str, schema: pa.Schema) -> CompiledExpression:
    """Compile a pylance-style SQL value expression (``"a * 2"``, ``"st.p"``, ``"lower(s)"``)
    against ``schema`` (the scan's name for :func:`compile_expression`); the result need not
    be boolean.  Raises :class:`FilterError`."""
    if not isinstance(text, str):
        raise TypeError(f"a projection expression must be SQL text, got {type(text).__name__}")
    if not text.strip():
        raise FilterError("empty projection expression")
    return compile_expression(text, schema)


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


def _parse_sql(text: str) -> exp.Expression:
    try:
        statements = sqlglot.parse(text, dialect=LanceFilterDialect)
    except sqlglot.errors.ParseError as e:
        raise FilterError(f"could not parse {text!r}: {_describe_parse_error(e)}") from None
    except sqlglot.errors.TokenError:
        raise FilterError(f"could not parse {text!r}: a string or a `quoted name` is not closed") from None
    except sqlglot.errors.SqlglotError as e:
        raise FilterError(f"could not parse {text!r}: {_strip_class_names(_first_line(e))}") from None
    except (RecursionError, ValueError, TypeError) as e:
        raise FilterError(f"could not parse {text!r}: {e}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise FilterError(f"filter {text!r} must be a single predicate expression")
    tree = statements[0]
    if isinstance(tree, exp.Block) or not isinstance(tree, exp.Expression):
        raise FilterError(f"filter {text!r} must be a single predicate expression")
    return tree


def _strip_class_names(message: str) -> str:
    return _CLASS_NAME.sub(lambda m: m.group(1), message)


def _describe_parse_error(e: sqlglot.errors.ParseError) -> str:
    """sqlglot's first parse error in the user's terms (what is wrong, and where)."""
    if not e.errors:
        return _strip_class_names(_first_line(e))
    info = e.errors[0]
    description = str(info.get("description") or "")
    token = str(info.get("highlight") or "").strip()
    where = f" at position {info['col']}" if info.get("col") else ""
    if description.startswith("Required keyword"):
        m = _MISSING_OPERAND.search(description)
        if m is not None:
            op = _OPERATOR_WORDS.get(m.group(2), m.group(2).upper())
            side = "right-hand operand" if m.group(1) == "expression" else "operand"
            return f"{op} is missing its {side}{where}"
        return f"an operand is missing next to {token!r}{where}" if token else "an operand is missing"
    if description.startswith("Expecting )"):
        return f"a closing parenthesis ')' is missing{where}"
    if description.startswith("Expecting ("):
        return f"an opening parenthesis '(' is missing{where}"
    if description.startswith("Invalid expression / Unexpected token"):
        what = f"unexpected {token!r}" if token else "unexpected text"
        return f"{what}{where} (an unbalanced parenthesis or a stray token?)"
    return _strip_class_names(description) + where


# SQL keywords that take parentheses but are not function calls.
_NOT_FUNCTIONS = frozenset(
    ["in", "cast", "try_cast", "exists", "and", "or", "not", "is", "between", "like", "ilike", "timestamp", "datetime", "date", "decimal", "numeric", "float", "double", "int", "integer", "varchar", "char", "interval", "case", "when", "then", "else", "values", "select", "any", "all", "some", "escape", "array", "struct", "row", "from", "where", "over", "filter", "distinct"]
)
# Every function name we compile (sqlglot's aliases included), lower case.
SUPPORTED_FUNCTIONS = frozenset(
    (
        # lists
        "array_has", "array_contains", "array_has_any", "array_has_all", "array_length", "make_array",
        # strings
        "regexp_match", "regexp_like", "starts_with", "ends_with", "contains", "length", "char_length",
        "character_length", "lower", "upper", "replace", "btrim", "ltrim", "rtrim", "concat", "strpos",
        "reverse", "initcap", "octet_length", "repeat", "left", "right", "lpad", "rpad", "instr", "bit_length",
        "split_part", "regexp_count", "regexp_replace", "arrow_cast", "arrow_typeof", "ascii", "md5", "sha224", "sha256",
        "sha384", "sha512", "to_hex", "translate", "levenshtein", "find_in_set", "substr_index", "encode",
        # numbers
        "abs", "coalesce", "round", "sqrt", "exp", "ln", "log10", "log2", "power", "pow", "signum", "trunc",
        "log", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "cot", "degrees", "radians", "isnan", "iszero",
        "nanvl", "nullif", "ifnull", "nvl", "nvl2", "greatest", "least",
        # time, validity
        "date_trunc", "current_date", "now", "current_timestamp", "is_valid",
        # DataFusion functions pylance takes (``ceil`` ... ``extract``: pylance's planner refuses the
        # SQL keyword forms but DataFusion has them, so lance-gpu takes them too)
        "array_element", "list_element", "array_extract", "list_extract", "cardinality", "array_position",
        "list_position", "string_to_array", "array_to_string", "list_to_string", "empty", "array_empty",
        "ceil", "floor", "substr", "substring", "cbrt", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pi",
        "gcd", "lcm", "factorial", "chr", "concat_ws", "to_timestamp", "to_timestamp_seconds",
        "to_timestamp_millis", "to_timestamp_micros", "to_timestamp_nanos", "to_date", "to_unixtime",
        "from_unixtime", "date_part", "datepart", "extract", "make_date", "trim",
        "array_sort", "list_sort", "array_distinct", "list_distinct", "array_max", "list_max", "array_min",
        "list_min", "array_reverse", "list_reverse", "array_slice", "list_slice", "array_append", "list_append",
        "array_push_back", "array_prepend", "list_prepend", "array_push_front", "array_concat", "array_cat",
        "list_concat", "list_cat", "array_remove", "list_remove", "array_remove_all", "list_remove_all",
        "flatten", "array_any_value", "list_any_value", "array_pop_back", "list_pop_back", "array_pop_front",
        "list_pop_front", "array_positions", "list_positions", "list_has", "list_has_any", "list_has_all",
        "named_struct", "struct", "get_field", "to_char", "date_format", "overlay",
        "array_union", "list_union", "array_intersect", "list_intersect", "array_except", "list_except",
        "array_replace", "list_replace", "array_replace_all", "list_replace_all", "array_replace_n",
        "list_replace_n", "array_remove_n", "list_remove_n", "array_ndims", "list_ndims", "array_dims",
        "list_dims", "array_repeat", "list_repeat", "array_resize", "list_resize", "regexp_instr",
        "make_list", "substring_index", "array_indexof", "list_indexof", "list_join", "array_join",
        "string_to_list", "datetrunc", "today", "list_length", "decode", "digest", "range", "generate_series",
        "array_distance", "list_distance", "random", "uuid", "date_bin",
        # JSON
        "json_extract", "json_exists", "json_array_length", "json_array_contains", "json_get_string",
        "json_get_int", "json_get_float", "json_get_bool", "json_get",
    )
)


def _check_function_names(text: str, role: str = "filter") -> None:
    """Every ``name(`` in ``text`` must be a function we compile; names the first that is not
    (with the closest names we have)."""
    try:
        tokens = LanceFilterDialect().tokenize(text)
    except sqlglot.errors.SqlglotError:  # pragma: no cover - it parsed a moment ago
        return
    TT = sqlglot.tokens.TokenType
    for token, after in itertools.pairwise(tokens):
        if after.token_type != TT.L_PAREN or token.token_type in (TT.STRING, TT.IDENTIFIER, TT.NUMBER):
            continue
        name = token.text.lower()
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or name in _NOT_FUNCTIONS:
            continue
        if name not in SUPPORTED_FUNCTIONS:
            close = difflib.get_close_matches(name, sorted(SUPPORTED_FUNCTIONS), n=3)
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            raise FilterError(
                f"unknown SQL function {token.text!r} in {role} {text!r}{hint}; the functions lance-gpu "
                "compiles are listed in lance_gpu.filter.SUPPORTED_FUNCTIONS"
            )


# The type names pylance's CAST accepts, as spelled. sqlglot maps aliases onto these (BOOL,
# REAL, TEXT, INT8, DOUBLE PRECISION, ...), which pylance rejects, so the spelling is checked.
_CAST_TYPE_NAMES = frozenset(
    ["int", "integer", "tinyint", "smallint", "bigint", "float", "double", "string", "binary", "date", "timestamp", "datetime", "decimal", "boolean"]
)
_SUPPORTED_TYPES_TEXT = (
    "int [unsigned], tinyint [unsigned], smallint [unsigned], bigint [unsigned], float, double, "
    "string, binary, date, timestamp(precision), datetime(precision), decimal(precision,scale), boolean"
)


def _check_type_spellings(text: str) -> None:
    try:
        tokens = LanceFilterDialect().tokenize(text)
    except sqlglot.errors.SqlglotError:  # pragma: no cover - it parsed a moment ago
        return
    for before, token in itertools.pairwise(tokens):
        if before.token_type not in (sqlglot.tokens.TokenType.ALIAS, sqlglot.tokens.TokenType.DCOLON):
            continue
        name = " ".join(token.text.lower().split())
        if name not in _CAST_TYPE_NAMES:
            raise FilterError(
                f"unsupported data type {token.text!r} in filter {text!r}; supported: {_SUPPORTED_TYPES_TEXT}"
            )


_OPERATOR_WORDS = {
    "GT": "'>'", "GTE": "'>='", "LT": "'<'", "LTE": "'<='", "EQ": "'='", "NEQ": "'!='",
    "And": "AND", "Or": "OR", "Not": "NOT", "Add": "'+'", "Sub": "'-'", "Mul": "'*'", "Div": "'/'",
    "Mod": "'%'", "Like": "LIKE", "ILike": "ILIKE", "In": "IN", "Between": "BETWEEN", "Is": "IS",
}
_MISSING_OPERAND = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*\.(\w+)'>")
_CLASS_NAME = re.compile(r"<class '[\w.]*\.(\w+)'>")


def _first_line(e: Exception) -> str:
    """The first line of a parser error, in the user's terms: a missing operand names the
    operator, not sqlglot's expression class."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else "the text is not a SQL expression"
    m = _MISSING_OPERAND.search(text)
    if m is not None:
        op = _OPERATOR_WORDS.get(m.group(2), m.group(2).upper())
        side = "right-hand operand" if m.group(1) == "expression" else "operand"
        text = _MISSING_OPERAND.sub(f"{op} is missing its {side}", text)
    text = _CLASS_NAME.sub(lambda m: m.group(1).upper(), text)
    return text.replace("Invalid expression / Unexpected token", "unexpected text (an unbalanced parenthesis or a stray token?)")


_CONSTRUCT_NAMES = {
    "BitwiseRightShift": "the '>>' operator", "BitwiseLeftShift": "the '<<' operator", "Case": "CASE",
    "Select": "a SELECT statement",
    "Subquery": "a subquery", "Star": "'*'", "Array": "an array literal",
    "TryCast": "TRY_CAST", "Anonymous": "this function", "Window": "a window function",
    "Alias": "a name right after an expression (a missing operator?)", "Div": "typed division",
}


def _construct_name(node: exp.Expression) -> str:
    """A filter construct named as a SQL user would (not by sqlglot's class name)."""
    name = type(node).__name__
    if name in _CONSTRUCT_NAMES:
        return _CONSTRUCT_NAMES[name]
    return "the " + re.sub(r"(?<!^)(?=[A-Z])", " ", name).upper() + " construct"


# --------------------------------------------------------------------------------------
# Logical tree (mirrors the DataFusion expressions pylance builds)
# --------------------------------------------------------------------------------------


class _Node:
    __slots__ = ()


@dataclass
class _Col(_Node):
    path: tuple[str, ...]  # resolved names: top-level column, then struct children
    type: pa.DataType


@dataclass
class _Lit(_Node):
    value: pa.Scalar


@dataclass
class _Bin(_Node):
    op: str  # and or eq neq lt lte gt gte add sub mul div mod concat
    left: _Node
    right: _Node


@dataclass
class _Unary(_Node):
    op: str  # not neg is_null is_not_null is_true is_not_true is_false is_not_false
    operand: _Node


@dataclass
class _InList(_Node):
    operand: _Node
    items: list[_Node]
    negated: bool


@dataclass
class _Between(_Node):
    operand: _Node
    low: _Node
    high: _Node
    negated: bool


@dataclass
class _Like(_Node):
    operand: _Node
    pattern: _Node
    negated: bool
    ignore_case: bool


@dataclass
class _Cast(_Node):
    operand: _Node
    to: pa.DataType
    safe: bool = False  # TRY_CAST: NULL where a value cannot be cast


@dataclass
class _Func(_Node):
    name: str
    args: list[_Node]


@dataclass
class _ArrayLit(_Node):
    items: list[_Node]
    brackets: bool = True  # ``[..]`` (constants only, as pylance) rather than ``make_array(..)``


@dataclass
class _Index(_Node):
    """``base[index]``: DataFusion's ``array_element`` (1-based; negative counts from the
    end; 0, out of range or NULL give NULL)."""

    base: _Node
    index: _Node


@dataclass
class _Field(_Node):
    """``base['name']`` / ``base.name`` of a struct value that is not a column path
    (``list_struct[1]['x']``); a column's fields are :class:`_Col` paths."""

    base: _Node
    name: str


_COMPARISONS = {"eq", "neq", "lt", "lte", "gt", "gte"}
_ARITHMETIC = {"add", "sub", "mul", "div", "mod"}

_BINARY_NODES: dict[type, str] = {
    exp.EQ: "eq",
    exp.NEQ: "neq",
    exp.LT: "lt",
    exp.LTE: "lte",
    exp.GT: "gt",
    exp.GTE: "gte",
    exp.Add: "add",
    exp.Sub: "sub",
    exp.Mul: "mul",
    exp.Div: "div",
    exp.Mod: "mod",
    exp.DPipe: "concat",
    exp.And: "and",
    exp.Or: "or",
    exp.NullSafeNEQ: "distinct",  # IS DISTINCT FROM
    exp.NullSafeEQ: "not_distinct",  # IS NOT DISTINCT FROM (sqlglot also reads <=>, which pylance refuses)
}

_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


def _number_literal(text: str, negative: bool) -> pa.Scalar:
    """The literal DataFusion's SQL planner makes of a number token (lance's ``number``)."""
    if re.fullmatch(r"[0-9]+", text):
        n = int(text)
        if negative:
            # lance parses the positive text as i64 and negates; anything wider becomes f64.
            if n <= _INT64_MAX:
                return pa.scalar(-n, pa.int64())
            return pa.scalar(-float(text), pa.float64())
        if n <= _INT64_MAX:
            return pa.scalar(n, pa.int64())
        if n <= _UINT64_MAX:
            return pa.scalar(n, pa.uint64())
        return pa.scalar(float(text), pa.float64())
    try:
        value = float(text)
    except ValueError:
        raise FilterError(f"{text!r} is not a supported number literal") from None
    return pa.scalar(-value if negative else value, pa.float64())


def _json_path_text(node: exp.Expression) -> exp.Expression:
    """sqlglot turns a JSON path literal into a JSONPath node; back to its text."""
    if isinstance(node, exp.JSONPath):
        return exp.Literal.string(node.sql(dialect=LanceFilterDialect).strip("'"))
    return node


def _function_call(node: exp.Expression) -> tuple[str, list[exp.Expression]] | None:
    """``(function name, argument nodes)`` of a call to a function we compile, else None.

    sqlglot parses several functions into dedicated nodes (``array_has`` → ArrayContains);
    this maps them back to pylance's names.
    """

    def opt(*keys: str) -> list[exp.Expression]:
        return [node.args[k] for k in keys if node.args.get(k) is not None]

    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        return (name, list(node.expressions)) if name in SUPPORTED_FUNCTIONS else None
    simple: dict[type, str] = {
        exp.ArrayContains: "array_has",
        exp.ArrayContainsAll: "array_has_all",
        exp.StartsWith: "starts_with",
        exp.EndsWith: "ends_with",
        exp.Contains: "contains",
    }
    for cls, name in simple.items():
        if type(node) is cls:
            return name, opt("this", "expression")
    if type(node) is exp.ArraySize:
        return "array_length", opt("this", "expression")
    if type(node) is exp.RegexpLike:
        return "regexp_like", opt("this", "expression", "flag")
    if type(node) is exp.Length:
        return "length", opt("this")
    if type(node) is exp.Lower:
        return "lower", opt("this")
    if type(node) is exp.Upper:
        return "upper", opt("this")
    if type(node) is exp.Abs:
        return "abs", opt("this")
    if type(node) is exp.Coalesce:
        return "coalesce", opt("this") + list(node.expressions)
    if type(node) is exp.Round:
        return "round", opt("this", "decimals")
    if type(node) is exp.Left:
        return "left", opt("this", "expression")
    if type(node) is exp.Right:
        return "right", opt("this", "expression")
    if type(node) is exp.Pad:
        return ("lpad" if node.args.get("is_left") else "rpad"), opt("this", "expression", "fill_pattern")
    if type(node) is exp.DateTrunc:
        return "date_trunc", opt("unit", "this")
    if type(node) is exp.CurrentDate:
        return "current_date", []
    if type(node) is exp.CurrentTimestamp:
        return "now", []
    if type(node) is exp.Trunc:
        return "trunc", opt("this", "decimals")
    simple_one = {exp.Sqrt: "sqrt", exp.Exp: "exp", exp.Ln: "ln", exp.Sign: "signum",
                  exp.Reverse: "reverse", exp.Initcap: "initcap"}
    for cls, name in simple_one.items():
        if type(node) is cls:
            return name, opt("this")
    if type(node) is exp.Log:
        # log(base, x) is ln(x) / ln(base) as DataFusion computes it; log(x) is log(10, x)
        # (the same division, not log10: they differ in the last bit)
        if node.expression is not None:
            return "log", [node.this, node.expression]
        return "log", [exp.Literal.number(10), node.this]
    trig = {exp.Sin: "sin", exp.Cos: "cos", exp.Tan: "tan", exp.Asin: "asin", exp.Acos: "acos", exp.Atan: "atan",
            exp.Cot: "cot", exp.Degrees: "degrees", exp.Radians: "radians", exp.IsNan: "isnan", exp.BitLength: "bit_length"}
    for cls, name in trig.items():
        if type(node) is cls:
            return name, opt("this")
    two = {exp.Atan2: "atan2", exp.Nanvl: "nanvl", exp.Nullif: "nullif"}
    for cls, name in two.items():
        if type(node) is cls:
            return name, opt("this", "expression")
    if type(node) is exp.Nvl2:
        return "nvl2", opt("this", "true", "false")
    if type(node) in (exp.Greatest, exp.Least):
        return ("greatest" if type(node) is exp.Greatest else "least"), opt("this") + list(node.expressions)
    if type(node) is exp.RegexpReplace:
        # sqlglot files a fourth argument (the flags) under "position"
        return "regexp_replace", opt("this", "expression", "replacement") + opt("modifiers", "position")
    if type(node) is exp.RegexpCount:
        return "regexp_count", opt("this", "expression", "position", "parameters")
    one_arg = {exp.Ascii: "ascii", exp.MD5: "md5", exp.Hex: "to_hex"}
    for cls, name in one_arg.items():
        if type(node) is cls:
            return name, opt("this")
    if type(node) is exp.Translate:
        return "translate", opt("this", "from_", "to")
    if type(node) is exp.Levenshtein:
        return "levenshtein", opt("this", "expression")
    if type(node) is exp.Encode:
        return "encode", opt("this", "charset")
    if type(node) is exp.SplitPart:
        return "split_part", opt("this", "delimiter", "part_index")
    if type(node) is exp.Pow:
        return "power", opt("this", "expression")
    if type(node) is exp.Replace:
        return "replace", opt("this", "expression", "replacement")
    if type(node) is exp.Trim and node.args.get("position") in ("LEADING", "TRAILING"):
        return ("ltrim" if node.args["position"] == "LEADING" else "rtrim"), opt("this", "expression")
    if type(node) is exp.Concat:
        return "concat", list(node.expressions)
    if type(node) is exp.StrPosition:
        return "strpos", opt("this", "substr")
    if type(node) is exp.Repeat:
        return "repeat", opt("this", "times")
    if type(node) is exp.JSONExtract:
        return "json_extract", [node.this, _json_path_text(node.expression)]
    if type(node) in (exp.Ceil, exp.Floor):
        return ("ceil" if type(node) is exp.Ceil else "floor"), opt("this", "decimals", "to")
    if type(node) is exp.Substring:
        return "substr", opt("this", "start", "length")
    if type(node) is exp.Trim and node.args.get("position") in (None, "BOTH") and not node.args.get("collation"):
        return "btrim", opt("this", "expression")
    hyperbolic = {exp.Cbrt: "cbrt", exp.Sinh: "sinh", exp.Cosh: "cosh", exp.Tanh: "tanh", exp.Asinh: "asinh",
                  exp.Acosh: "acosh", exp.Atanh: "atanh", exp.Factorial: "factorial"}
    for cls, name in hyperbolic.items():
        if type(node) is cls:
            return name, opt("this")
    if type(node) is exp.Pi:
        return "pi", []
    if type(node) is exp.Rand and not any(node.args.values()):
        return "random", []
    if type(node) is exp.Uuid and not any(node.args.values()):
        return "uuid", []
    if type(node) is exp.Chr and not node.args.get("charset"):
        return "chr", list(node.expressions)
    if type(node) is exp.ConcatWs:
        return "concat_ws", list(node.expressions)
    if type(node) is exp.StringToArray:
        return "string_to_array", opt("this", "expression", "null")
    if type(node) is exp.ArrayToString:
        return "array_to_string", opt("this", "expression", "null")
    if type(node) is exp.ArrayPosition:
        return "array_position", opt("this", "expression", "zero_based")  # sqlglot files the start there
    if type(node) is exp.Extract and isinstance(node.this, (exp.Var, exp.Identifier, exp.Column, exp.Literal)):
        return "date_part", [exp.Literal.string(node.this.name), node.expression]
    list_nodes = {exp.ArrayDistinct: ("array_distinct", ("this",)), exp.ArrayMax: ("array_max", ("this",)),
                  exp.ArrayMin: ("array_min", ("this",)), exp.ArrayReverse: ("array_reverse", ("this",)),
                  exp.Flatten: ("flatten", ("this",)), exp.ArrayAppend: ("array_append", ("this", "expression")),
                  exp.ArrayPrepend: ("array_prepend", ("this", "expression")),
                  exp.ArrayRemove: ("array_remove", ("this", "expression")),
                  exp.ArraySlice: ("array_slice", ("this", "start", "end", "step")),
                  exp.ArraySort: ("array_sort", ("this", "expression", "asc")),
                  exp.Overlay: ("overlay", ("this", "expression", "from_", "for_")),
                  exp.ToChar: ("to_char", ("this", "format"))}
    for cls, (name, keys) in list_nodes.items():
        if type(node) is cls:
            return name, opt(*keys)
    if type(node) is exp.DateBin:
        return "date_bin", opt("this", "expression", "unit")  # sqlglot files the origin under "unit"
    if type(node) is exp.SubstringIndex:
        return "substr_index", opt("this", "delimiter", "count")
    if type(node) is exp.Decode:
        return "decode", opt("this", "charset")
    if type(node) is exp.GenerateSeries:
        return "generate_series", opt("start", "end", "step")
    if type(node) is exp.ArrayIntersect:
        return "array_intersect", list(node.expressions)
    if type(node) is exp.ArrayExcept:
        return "array_except", opt("this", "expression")
    if type(node) is exp.RegexpInstr:
        # sqlglot files the flags under "option" and the group under "parameters"
        return "regexp_instr", opt("this", "expression", "position", "occurrence", "option", "parameters")
    if type(node) is exp.ArrayConcat:
        return "array_concat", opt("this") + list(node.expressions)
    if type(node) is exp.Struct:
        return "struct", list(node.expressions)
    if type(node) is exp.JSONArrayContains:
        return "json_array_contains", opt("this", "expression", "json_type")
    return None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


class _Builder:
    """sqlglot AST → logical tree, resolving column names against the schema."""

    def __init__(self, schema: pa.Schema, source: str, role: str = "filter") -> None:
        self.schema = schema
        self.source = source
        #: What the user wrote, as error messages call it ("filter", "add_columns expression").
        self.role = role

    def unsupported(self, node: exp.Expression, what: str | None = None) -> FilterError:
        try:
            text = node.sql(dialect=LanceFilterDialect)
        except (sqlglot.errors.SqlglotError, ValueError, TypeError, KeyError):  # pragma: no cover
            text = node.key
        what = what or f"{_construct_name(node)} is"
        return FilterError(f"unsupported {self.role} construct in {self.source!r}: {text!r} ({what} not supported)")

    # -- columns ------------------------------------------------------------------------

    def top_level(self, ident: exp.Identifier) -> pa.Field:
        name = ident.name
        names = self.schema.names
        if name in names:
            return self.schema.field(name)
        if not ident.quoted:
            folded = [n for n in names if n.lower() == name.lower()]
            if len(folded) == 1:
                return self.schema.field(folded[0])
            if len(folded) > 1:
                raise FilterError(
                    f"column name {name!r} in {self.role} {self.source!r} is ambiguous "
                    f"(matches {folded}); quote it with backticks"
                )
        if name.lower() in VIRTUAL_COLUMNS:
            return pa.field(name.lower(), pa.uint64())
        shown = names if len(names) <= 20 else [*names[:20], "..."]
        raise FilterError(
            f"No field named {name}: there is no column {name!r} in {self.role} {self.source!r}; columns are {shown} "
            "(quote names with backticks; double quotes make a string literal, as in pylance)"
        )

    def child(self, col: _Col, name: str) -> _Col:
        if not pa.types.is_struct(col.type):
            raise FilterError(
                f"cannot access field {name!r} of {'.'.join(col.path)!r} in {self.role} "
                f"{self.source!r}: it is {col.type}, not a struct"
            )
        index = col.type.get_field_index(name)
        if index < 0:
            names = [col.type.field(i).name for i in range(col.type.num_fields)]
            raise FilterError(
                f"struct column {'.'.join(col.path)!r} has no field {name!r} "
                f"({self.role} {self.source!r}); fields are {names}"
            )
        return _Col((*col.path, name), col.type.field(index).type)

    def column(self, node: exp.Column) -> _Col:
        parts = [p for p in node.parts if isinstance(p, exp.Identifier)]
        if len(parts) != len(node.parts) or not parts:
            raise self.unsupported(node, "this column reference is")
        top = self.top_level(parts[0])
        col = _Col((top.name,), top.type)
        for part in parts[1:]:
            col = self.child(col, part.name)
        return col

    # -- expressions --------------------------------------------------------------------

    def build(self, node: exp.Expression) -> _Node:
        b = self.build
        if isinstance(node, exp.Paren):
            return b(node.this)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self.unsupported(node, "'*' is")
            return self.column(node)
        if isinstance(node, exp.Dot):
            base = b(node.this)
            if not isinstance(node.expression, exp.Identifier):
                raise self.unsupported(node, "this field access is")
            if isinstance(base, _Col):
                return self.child(base, node.expression.name)
            return _Field(base, node.expression.name)
        if isinstance(node, exp.Bracket):
            base = b(node.this)
            keys = node.expressions
            if len(keys) != 1 or node.args.get("safe"):
                raise self.unsupported(node, "indexing with more than one key is")
            key = keys[0]
            if isinstance(key, exp.Literal) and key.is_string:  # a struct field
                return self.child(base, key.this) if isinstance(base, _Col) else _Field(base, key.this)
            if isinstance(key, exp.Slice):
                raise self.unsupported(node, "list slices are")
            return _Index(base, b(key))
        if isinstance(node, exp.Literal):
            if node.is_string:
                return _Lit(pa.scalar(node.this, pa.string()))
            return _Lit(_number_literal(node.this, negative=False))
        if isinstance(node, exp.Boolean):
            return _Lit(pa.scalar(bool(node.this), pa.bool_()))
        if isinstance(node, exp.Null):
            return _Lit(pa.scalar(None, pa.null()))
        if isinstance(node, exp.Neg):
            inner = node.this
            if isinstance(inner, exp.Literal) and not inner.is_string:
                return _Lit(_number_literal(inner.this, negative=True))
            return _Unary("neg", b(inner))
        if isinstance(node, exp.Not):
            inner = node.this
            # sqlglot spells NOT IN / NOT BETWEEN / NOT LIKE / IS NOT as Not(...)
            if isinstance(inner, exp.Paren):
                return _Unary("not", b(inner))
            if isinstance(inner, exp.In):
                return self.in_list(inner, negated=True)
            if isinstance(inner, exp.Between):
                return self.between(inner, negated=True)
            if isinstance(inner, (exp.Like, exp.ILike, exp.Escape)):
                return self.like(inner, negated=True)
            if isinstance(inner, exp.Is):
                return self.is_(inner, negated=True)
            return _Unary("not", b(inner))
        if type(node) in _BINARY_NODES:
            if isinstance(node, exp.Div) and (node.args.get("typed") or node.args.get("safe")):
                raise self.unsupported(node)
            return _Bin(_BINARY_NODES[type(node)], b(node.this), b(node.expression))
        if isinstance(node, exp.Is):
            return self.is_(node, negated=False)
        if isinstance(node, exp.In):
            return self.in_list(node, negated=False)
        if isinstance(node, exp.Between):
            return self.between(node, negated=False)
        if isinstance(node, (exp.Like, exp.ILike, exp.Escape)):
            return self.like(node, negated=False)
        if isinstance(node, exp.TryCast):
            return _Cast(b(node.this), self.data_type(node.to, node), safe=True)
        if isinstance(node, exp.Cast):
            return _Cast(b(node.this), self.data_type(node.to, node))
        if isinstance(node, exp.HexString):
            try:
                digits = node.this if len(node.this) % 2 == 0 else "0" + node.this  # X'1' is 0x01
                return _Lit(pa.scalar(bytes.fromhex(digits), pa.binary()))
            except ValueError:
                raise FilterError(f"invalid binary literal X'{node.this}' in {self.source!r}") from None
        if isinstance(node, exp.Array) or (isinstance(node, exp.Anonymous) and str(node.this).lower() in ("make_array", "make_list")):
            return _ArrayLit([b(e) for e in node.expressions], brackets=isinstance(node, exp.Array))
        if isinstance(node, exp.Interval):
            return _Lit(self.interval(node))
        if isinstance(node, exp.Case):
            raise self.unsupported(node, "CASE expressions are")
        call = _function_call(node)
        if call is not None:
            name, args = call
            return _Func(name, [b(a) for a in args])
        if isinstance(node, (exp.Func, exp.Anonymous)):
            raise self.unsupported(node, "this SQL function is")
        raise self.unsupported(node)

    _INTERVAL_NANOS: ClassVar[dict[str, int]] = {
        "nanosecond": 1, "microsecond": 10**3, "millisecond": 10**6, "second": 10**9, "minute": 60 * 10**9,
        "hour": 3600 * 10**9,
    }

    def interval(self, node: exp.Interval) -> pa.Scalar:
        """``INTERVAL '1 hour 30 minutes'`` / ``INTERVAL '2' HOUR`` as a month-day-nano scalar
        (pylance takes intervals only in ``date_bin``; elsewhere the arithmetic refuses them)."""
        text = node.this.name if isinstance(node.this, exp.Literal) else node.this.sql()
        if node.args.get("unit") is not None:
            text = f"{text} {node.args['unit'].name}"
        words = text.lower().split()
        if not words or len(words) % 2:
            raise FilterError(f"cannot read the interval {text!r} in {self.role} {self.source!r}")
        months = days = nanos = 0
        for amount, unit in zip(words[0::2], words[1::2], strict=True):
            unit = unit.rstrip("s") if unit not in ("s", "ms", "us", "ns") else unit
            if not re.fullmatch(r"-?\d+", amount):
                raise FilterError(f"cannot read the interval {text!r} in {self.role} {self.source!r}")
            k = int(amount)
            if unit in ("year", "month"):
                months += k * (12 if unit == "year" else 1)
            elif unit in ("week", "day"):
                days += k * (7 if unit == "week" else 1)
            elif unit in self._INTERVAL_NANOS:
                nanos += k * self._INTERVAL_NANOS[unit]
            else:
                raise FilterError(f"unknown interval unit {unit!r} in {self.role} {self.source!r}")
        return pa.scalar((months, days, nanos), pa.month_day_nano_interval())

    def is_(self, node: exp.Is, negated: bool) -> _Node:
        negated = negated != bool(node.args.get("negate"))
        target = node.expression
        operand = self.build(node.this)
        if isinstance(target, exp.Null):
            return _Unary("is_not_null" if negated else "is_null", operand)
        if isinstance(target, exp.Boolean):
            name = "true" if target.this else "false"
            return _Unary(f"is_not_{name}" if negated else f"is_{name}", operand)
        raise self.unsupported(node, "IS is supported with NULL, TRUE and FALSE only;")

    def in_list(self, node: exp.In, negated: bool) -> _Node:
        if any(node.args.get(k) is not None for k in ("query", "unnest", "field")):
            raise self.unsupported(node, "IN with a subquery is")
        negated = negated != bool(node.args.get("negate"))
        if not node.expressions:
            raise FilterError(f"could not parse {self.role} {self.source!r}: IN needs at least one value")
        return _InList(self.build(node.this), [self.build(e) for e in node.expressions], negated)

    def between(self, node: exp.Between, negated: bool) -> _Node:
        if node.args.get("symmetric"):
            raise self.unsupported(node, "BETWEEN SYMMETRIC is")
        negated = negated != bool(node.args.get("negate"))
        return _Between(self.build(node.this), self.build(node.args["low"]), self.build(node.args["high"]), negated)

    def like(self, node: exp.Expression, negated: bool) -> _Node:
        # sqlglot spells NOT LIKE either as Not(Like) or as Like(negate=True)
        negated = negated != bool(node.args.get("negate"))
        if isinstance(node, exp.Escape):
            escape = node.expression
            if not (isinstance(escape, exp.Literal) and escape.is_string and escape.this == "\\"):
                raise self.unsupported(node, "LIKE ... ESCAPE with a character other than backslash is")
            node = node.this
            if not isinstance(node, (exp.Like, exp.ILike)):
                raise self.unsupported(node)
            negated = negated != bool(node.args.get("negate"))
        pattern = node.expression
        if isinstance(pattern, (exp.Any, exp.All)):
            raise self.unsupported(node, "LIKE ANY/ALL is")
        return _Like(self.build(node.this), self.build(pattern), negated, isinstance(node, exp.ILike))

    def data_type(self, dt: exp.DataType, node: exp.Expression) -> pa.DataType:
        """The Arrow type of a SQL type name, for the names pylance's CAST accepts."""
        T = exp.DataType.Type
        kind = dt.this
        params = [p.this if isinstance(p, exp.DataTypeParam) else p for p in dt.expressions]

        def int_param(i: int) -> int:
            p = params[i]
            if isinstance(p, exp.Literal) and not p.is_string and p.this.isdigit():
                return int(p.this)
            raise self.unsupported(node, f"type parameter {p.sql()!r} is")

        simple = {
            T.TEXT: pa.string(),
            T.BINARY: pa.binary(),
            T.FLOAT: pa.float32(),
            T.DOUBLE: pa.float64(),
            T.BOOLEAN: pa.bool_(),
            T.TINYINT: pa.int8(),
            T.SMALLINT: pa.int16(),
            T.INT: pa.int32(),
            T.BIGINT: pa.int64(),
            T.UTINYINT: pa.uint8(),
            T.USMALLINT: pa.uint16(),
            T.UINT: pa.uint32(),
            T.UBIGINT: pa.uint64(),
            T.DATE: pa.date32(),
        }
        if kind in simple:
            return simple[kind]
        if kind in (T.TIMESTAMP, T.DATETIME):
            if not params:
                return pa.timestamp("us")
            units = {0: "s", 3: "ms", 6: "us", 9: "ns"}
            precision = int_param(0)
            if precision not in units:
                raise FilterError(
                    f"unsupported timestamp precision {precision} in {self.role} {self.source!r} (use 0, 3, 6 or 9)"
                )
            return pa.timestamp(units[precision])
        if kind == T.DECIMAL:
            if len(params) != 2:
                raise FilterError(f"decimal needs a precision and a scale in {self.role} {self.source!r}: {node.sql()!r}")
            precision, scale = int_param(0), int_param(1)
            try:
                return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            except (ValueError, pa.ArrowInvalid) as e:
                raise FilterError(f"invalid decimal type in {self.role} {self.source!r}: {e}") from None
        if kind in (T.TIMESTAMPTZ, T.TIMESTAMPLTZ):
            raise FilterError(f"time zones are not supported in timestamp types ({self.role} {self.source!r})")
        raise FilterError(
            f"unsupported data type {dt.sql()!r} in {self.role} {self.source!r}; supported: {_SUPPORTED_TYPES_TEXT}"
        )


# --------------------------------------------------------------------------------------
# Lance's literal resolution (lance-datafusion logical_expr.rs resolve_expr / coerce_expr)
# --------------------------------------------------------------------------------------


def _safe_coerce_scalar(value: pa.Scalar, target: pa.DataType) -> pa.Scalar | None:
    """lance's ``safe_coerce_scalar`` for the literal types the SQL planner produces."""
    src = value.type
    if pa.types.is_null(src):
        return value
    if pa.types.is_integer(src):
        v = value.as_py()
        if pa.types.is_integer(target):
            if v is None:
                return pa.scalar(None, target)
            lo, hi = _int_range(target)
            return pa.scalar(v, target) if lo <= v <= hi else None
        if pa.types.is_floating(target):
            return pa.scalar(None if v is None else float(v), target)
        if pa.types.is_decimal(target) and pa.types.is_signed_integer(src):
            try:  # through a 38-digit decimal: the target's precision is checked, not int64's
                return pc.cast(pc.cast(value, _wide_decimal(target)), target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        return None
    if pa.types.is_floating(src):
        if pa.types.is_floating(target) and not pa.types.is_float16(target):
            return pa.scalar(value.as_py(), target)
        return None
    if pa.types.is_string(src) or pa.types.is_large_string(src):
        if pa.types.is_string(target) or pa.types.is_large_string(target):
            return pa.scalar(value.as_py(), target)
        return None
    if pa.types.is_binary(src) or pa.types.is_large_binary(src):
        if pa.types.is_binary(target) or pa.types.is_large_binary(target):
            return pa.scalar(value.as_py(), target)  # X'...' against large_binary, as pylance
        return None
    if pa.types.is_boolean(src):
        return value if pa.types.is_boolean(target) else None
    return value if src == target else None


def _column_type(node: _Node) -> pa.DataType | None:
    if not isinstance(node, _Col):
        return None
    return node.type.value_type if pa.types.is_dictionary(node.type) else node.type


def _literal_only(node: _Node) -> bool:
    if isinstance(node, _Lit):
        return True
    return (
        isinstance(node, _Bin)
        and node.op in _ARITHMETIC | {"concat"}
        and _literal_only(node.left)
        and _literal_only(node.right)
    )


def _coerce_expr(node: _Node, target: pa.DataType, col: _Node, source: str) -> _Node:
    if isinstance(node, _Bin):
        left = _coerce_expr(node.left, target, col, source)
        return _Bin(node.op, left, _coerce_expr(node.right, target, col, source))
    if isinstance(node, _Lit):
        coerced = _safe_coerce_scalar(node.value, target)
        if coerced is None:
            name = ".".join(col.path) if isinstance(col, _Col) else "?"
            raise FilterError(
                f"error resolving {source}: literal {_show(node.value)} ({node.value.type}) "
                f"cannot be converted to the type of column {name!r} ({target})"
            )
        return _Lit(coerced)
    return node


def _show(value: pa.Scalar) -> str:
    py = value.as_py()
    return repr(py) if py is not None else "NULL"


def _resolve(node: _Node, source: str) -> _Node:
    """Top-level literal coercion, applied through AND/OR only (like lance); ``source``
    names the expression in errors (``"filter 'x > 1'"``)."""
    if isinstance(node, _Between):
        t = _column_type(node.operand)
        if t is not None:
            return _Between(
                node.operand,
                _coerce_expr(node.low, t, node.operand, source),
                _coerce_expr(node.high, t, node.operand, source),
                node.negated,
            )
        return node
    if isinstance(node, _Bin):
        if node.op in ("and", "or"):
            return _Bin(node.op, _resolve(node.left, source), _resolve(node.right, source))
        lt = _column_type(node.left)
        if lt is not None:
            right = node.right
            if isinstance(right, (_Lit, _Cast)) or (isinstance(right, _Bin) and _literal_only(right)):
                return _Bin(node.op, node.left, _coerce_expr(right, lt, node.left, source))
            return node
        rt = _column_type(node.right)
        if rt is not None and isinstance(node.left, (_Lit, _Cast)):
            return _Bin(node.op, _coerce_expr(node.left, rt, node.right, source), node.right)
        return node
    if isinstance(node, _InList):
        col = node.operand
        if isinstance(col, _Col) and len(col.path) == 1:
            t = _column_type(col)
            return _InList(col, [_coerce_expr(i, t, col, source) for i in node.items], node.negated)
        return node
    return node


def _walk_columns(n: Any, seen: set[str], virtual_only: bool) -> None:
    """Add the top-level names of the columns ``n`` refers to (only the virtual ones when
    ``virtual_only``) to ``seen``: a module-level recursion (a recursive closure would leave a
    reference cycle per filter)."""
    if isinstance(n, _Col):
        if not virtual_only or (len(n.path) == 1 and n.path[0] in VIRTUAL_COLUMNS):
            seen.add(n.path[0])
    elif isinstance(n, _Node):
        for name in n.__dataclass_fields__:  # type: ignore[attr-defined]
            _walk_columns(getattr(n, name), seen, virtual_only)
    elif isinstance(n, list):
        for item in n:
            _walk_columns(item, seen, virtual_only)


def _collect_columns(node: _Node, schema: pa.Schema) -> list[str]:
    seen: set[str] = set()
    _walk_columns(node, seen, False)
    return [name for name in schema.names if name in seen]


def _collect_virtual(node: _Node) -> list[str]:
    seen: set[str] = set()
    _walk_columns(node, seen, True)
    return [name for name in VIRTUAL_COLUMNS if name in seen]


# --------------------------------------------------------------------------------------
# Type coercion (DataFusion's rules)
# --------------------------------------------------------------------------------------


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_signed_integer(t):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _decimal_for_int(t: pa.DataType) -> pa.DataType:
    digits = {8: 3, 16: 5, 32: 10, 64: 20}[t.bit_width]
    return pa.decimal128(digits, 0)


def _decimal_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    scale = max(a.scale, b.scale)
    precision = min(max(a.precision - a.scale, b.precision - b.scale) + scale, 38)
    return pa.decimal128(precision, scale)


_DECIMAL128_MAX_PRECISION = 38


def _operand_decimal(t: pa.DataType) -> pa.Decimal128Type:
    """The decimal an arithmetic operand is cast to (DataFusion's ``coerce_numeric_type_to_decimal``)."""
    if pa.types.is_decimal128(t):
        return t
    return _decimal_for_int(t)


def _decimal_result_type(op: str, a: pa.Decimal128Type, b: pa.Decimal128Type) -> pa.Decimal128Type:
    """The type of ``a <op> b`` for decimals, as arrow-rs's decimal kernels compute it.

    ``+``/``-``: scale max(s1, s2), precision max(p1 - s1, p2 - s2) + scale + 1;
    ``*``: precision p1 + p2 + 1, scale s1 + s2 (an error above 38);
    ``/``: scale s1 + 4, precision p1 - s1 + s2 + scale;
    ``%``: scale max(s1, s2), precision min(p1 - s1, p2 - s2) + scale.
    Precisions are capped at 38 (values beyond the precision are kept, as arrow-rs does)."""
    p1, s1, p2, s2 = a.precision, a.scale, b.precision, b.scale
    if op in ("add", "sub"):
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    elif op == "mul":
        precision, scale = p1 + p2 + 1, s1 + s2
        if scale > _DECIMAL128_MAX_PRECISION:
            raise ValueError(f"decimal multiplication result scale {scale} is above 38")
    elif op == "div":
        scale = min(s1 + 4, _DECIMAL128_MAX_PRECISION)
        precision = scale - s1 + s2 + p1
    else:  # mod
        scale = max(s1, s2)
        precision = min(p1 - s1, p2 - s2) + scale
    return pa.decimal128(max(1, min(precision, _DECIMAL128_MAX_PRECISION)), scale)


def _numeric_coercion(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """DataFusion's ``binary_numeric_coercion`` (used for comparisons and arithmetic)."""
    if not (_is_numeric(a) and _is_numeric(b)):
        return None
    if a == b:
        return a
    if pa.types.is_decimal(a) or pa.types.is_decimal(b):
        if pa.types.is_floating(a) or pa.types.is_floating(b):
            return pa.float64()
        da = a if pa.types.is_decimal(a) else _decimal_for_int(a)
        db = b if pa.types.is_decimal(b) else _decimal_for_int(b)
        return _decimal_common(da, db)
    for f in (pa.float64(), pa.float32(), pa.float16()):
        if a == f or b == f:
            return f
    pair = {a, b}
    signed = {pa.int8(), pa.int16(), pa.int32(), pa.int64()}
    if pa.uint64() in pair:
        return pa.decimal128(20, 0) if pair & signed else pa.uint64()
    if pa.int64() in pair or (pa.uint32() in pair and pair & {pa.int8(), pa.int16(), pa.int32()}):
        return pa.int64()
    if pa.uint32() in pair:
        return pa.uint32()
    if pa.int32() in pair or (pa.uint16() in pair and pair & {pa.int8(), pa.int16()}):
        return pa.int32()
    if pa.uint16() in pair:
        return pa.uint16()
    if pa.int16() in pair or pair == {pa.int8(), pa.uint8()}:
        return pa.int16()
    if pa.int8() in pair:
        return pa.int8()
    return pa.uint8()


_UNIT_ORDER = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _temporal_coercion(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        unit = min(a.unit, b.unit, key=_UNIT_ORDER.__getitem__)  # DataFusion: the coarser unit
        tz = a.tz or b.tz
        return pa.timestamp(unit, tz)
    if pa.types.is_timestamp(a) and pa.types.is_date(b):
        return a
    if pa.types.is_date(a) and pa.types.is_timestamp(b):
        return b
    if pa.types.is_date(a) and pa.types.is_date(b):
        return pa.date64() if pa.date64() in (a, b) else pa.date32()
    return None


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _comparison_coercion(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if _is_list(a) and _is_list(b):  # compared element by element (:meth:`_Compiler.list_compare`)
        item = _comparison_coercion(a.value_type, b.value_type)
        if item is None and (_is_string(a.value_type) or _is_string(b.value_type)):
            item = pa.string()  # a constant list converts to the column's items
        return None if item is None else pa.list_(item)
    t = _numeric_coercion(a, b)
    if t is not None:
        return t
    if _is_string(a) and _is_string(b):
        return pa.large_string() if pa.large_string() in (a, b) else pa.string()
    binary = (pa.types.is_binary, pa.types.is_large_binary)
    if any(f(a) for f in binary) and any(f(b) for f in binary):  # json_get's JSONB vs X'..'
        return pa.large_binary()
    t = _temporal_coercion(a, b)
    if t is not None:
        return t
    if _is_string(a) and (_is_numeric(b) or _is_temporal(b)):
        return b
    if _is_string(b) and (_is_numeric(a) or _is_temporal(a)):
        return a
    return None


# --------------------------------------------------------------------------------------
# Literal parsing for CAST('...' AS date/timestamp)
# --------------------------------------------------------------------------------------

def _cast_scalar(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    """CAST of a constant with DataFusion's semantics; raises on failure."""
    src = value.type
    if src == target:
        return value
    if not value.is_valid:
        return pa.scalar(None, target)
    if _is_string(src) and pa.types.is_timestamp(target):
        return parse_timestamp(value.as_py(), target)
    if _is_string(src) and pa.types.is_date(target):
        return parse_date(value.as_py(), target)
    if pa.types.is_floating(src) and pa.types.is_integer(target):
        return pc.cast(pc.trunc(value), target)
    if pa.types.is_integer(src) and pa.types.is_decimal(target):
        return pc.cast(pc.cast(value, _wide_decimal(target)), target)
    if _lossy_cast_allowed(src, target):
        return pc.cast(value, target, safe=False)
    return pc.cast(value, target)


def _wide_decimal(target: pa.DataType) -> pa.DataType:
    return pa.decimal128(38, target.scale) if target.scale <= 18 else pa.decimal256(76, target.scale)


def _lossy_cast_allowed(src: pa.DataType, target: pa.DataType) -> bool:
    """Casts DataFusion performs without a range/precision error: to floats (rounding),
    float to decimal (rounding) and timestamp unit changes (truncation)."""
    return (
        pa.types.is_floating(target)
        or (pa.types.is_floating(src) and pa.types.is_decimal(target))
        or (pa.types.is_timestamp(src) and pa.types.is_timestamp(target))
    )


def _cast_expr(expr: pc.Expression, src: pa.DataType, target: pa.DataType) -> pc.Expression:
    """CAST of a column expression with DataFusion's semantics (errors on overflow)."""
    if pa.types.is_floating(src) and pa.types.is_integer(target):
        return pc.trunc(expr).cast(target)  # truncates; NaN/inf/out of range raise
    if pa.types.is_integer(src) and pa.types.is_decimal(target):
        return expr.cast(_wide_decimal(target)).cast(target)
    return expr.cast(target, safe=not _lossy_cast_allowed(src, target))


# --------------------------------------------------------------------------------------
# Compilation to pyarrow expressions
# --------------------------------------------------------------------------------------


@dataclass
class _C:
    """A compiled operand: its expression, its Arrow type, and its value when constant."""

    expr: pc.Expression
    type: pa.DataType
    const: pa.Scalar | None = None
    uncast: _C | None = None  # for CAST(int AS int): the operand before the cast
    truth: pc.Expression | None = None  # its truth value where SQL coerces it to boolean
    direct: DirectTree | None = None  # the same value as compute calls (:data:`DirectTree`)


def _const(value: pa.Scalar) -> _C:
    return _C(pc.scalar(value), value.type, value, direct=("scalar", value))


def _with_direct(c: _C, tree: DirectTree) -> _C:
    """``c`` computed per row (not folded to a constant) with ``tree`` as its direct form."""
    if c.const is None:
        c.direct = tree
    return c


_NULL_BOOL = pa.nulls(1, pa.bool_())[0]  # not pa.scalar(None, ...): that imports pandas (~0.5 s at the first read)
_REGEX_FLAGS = "imsxU"  # the inline flags both Rust's regex (pylance) and ours accept

_COMPARE_FN = {
    "eq": pc.equal,
    "neq": pc.not_equal,
    "lt": pc.less,
    "lte": pc.less_equal,
    "gt": pc.greater,
    "gte": pc.greater_equal,
}
_FLIP = {"eq": "eq", "neq": "neq", "lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte"}
_COMPARE_NAME = {"eq": "equal", "neq": "not_equal", "lt": "less", "lte": "less_equal", "gt": "greater",
                 "gte": "greater_equal"}
def _remainder(a, b, floating: bool | None = None):
    """SQL ``%``: the truncated remainder (its sign is the dividend's), as DataFusion.

    ``pyarrow.compute.remainder`` where pyarrow has it (26 and later); before that
    ``a - b * trunc(a / b)`` (Arrow's integer ``divide`` already truncates toward zero).
    ``floating`` says whether the operands are floating point (needed for expressions, which
    carry no type; arrays and scalars tell it themselves)."""
    if _PC_REMAINDER is not None:
        return _PC_REMAINDER(a, b)
    if floating is None:
        floating = pa.types.is_floating(a.type)
    quotient = pc.divide(a, b)
    if floating:
        quotient = pc.trunc(quotient)
    return pc.subtract(a, pc.multiply(b, quotient))


_PC_REMAINDER = getattr(pc, "remainder", None)
_ARITH_FN = {
    "add": pc.add,  # wrapping, like DataFusion
    "sub": pc.subtract,
    "mul": pc.multiply,
    "div": pc.divide,  # integer division truncates; raises on a zero integer divisor
    "mod": _remainder,  # truncated remainder (sign of the dividend)
}
#: The compute function of each operator of :data:`_ARITH_FN` but ``%`` (a direct form's name).
_ARITH_NAME = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}
_OP_SQL = {
    "eq": "=", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">=",
    "add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "concat": "||",
    "distinct": "IS DISTINCT FROM", "not_distinct": "IS NOT DISTINCT FROM",
    "and": "AND", "or": "OR",
}


# date_trunc granularities (pylance's names) → pyarrow floor_temporal units
_TRUNC_UNITS = {
    "microsecond": "microsecond", "millisecond": "millisecond", "second": "second",
    "minute": "minute", "hour": "hour", "day": "day", "week": "week", "month": "month",
    "quarter": "quarter", "year": "year",
}


class _Compiler:
    def __init__(self, source: str, role: str = "filter") -> None:
        self.source = source
        #: What the user wrote, as errors call it ("filter", "add_columns expression 'x' =").
        self.role = role
        self.udfs: list[UdfSpec] = []

    def fail(self, message: str) -> FilterError:
        return FilterError(f"{message} ({self.role} {self.source!r})")

    # -- helpers ------------------------------------------------------------------------

    def cast(self, c: _C, target: pa.DataType) -> _C:
        if c.type == target:
            return c
        if pa.types.is_floating(c.type) and _is_string(target):
            return self.float_text(c, target)
        if c.const is not None:
            try:
                return _const(_cast_scalar(c.const, target))
            except (pa.ArrowException, ValueError, OverflowError) as e:
                raise self.fail(f"cannot convert {_show(c.const)} ({c.type}) to {target}: {_first_line(e)}") from None
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, target))
        if _is_string(c.type) and (pa.types.is_timestamp(target) or pa.types.is_date(target)):
            # text read as DataFusion reads it (RFC 3339 offsets, a date's text may carry a time)
            return self.udf("cast_text_time", [self.cast(c, pa.string())], target)
        return _C(_cast_expr(c.expr, c.type, target), target)

    def to_bool(self, c: _C, what: str) -> _C:
        if c.truth is not None:
            return _C(c.truth, pa.bool_())
        if pa.types.is_boolean(c.type):
            return c
        if pa.types.is_null(c.type):
            return _const(_NULL_BOOL)
        raise self.fail(f"{what} needs a boolean operand, got {c.type}")

    def fold(self, expr: pc.Expression, fn: Any, args: list[_C], out_type: pa.DataType, **kwargs: Any) -> _C:
        """Evaluate ``fn`` now when every argument is constant (DataFusion's simplifier),
        leaving errors such as division by zero to execution time like pylance."""
        if all(a.const is not None for a in args):
            try:
                value = fn(*[a.const for a in args], **kwargs)
            except (pa.ArrowException, ValueError):
                return _C(expr, out_type)
            if isinstance(value, pa.Scalar):
                if value.type != out_type:
                    value = value.cast(out_type)
                return _C(expr, out_type, value)
        return _C(expr, out_type)

    # -- nodes --------------------------------------------------------------------------

    def compile(self, node: _Node) -> _C:
        if isinstance(node, _Col):
            expr = pc.field(*node.path)
            if pa.types.is_dictionary(node.type):  # compare/match the decoded values
                return _C(expr.cast(node.type.value_type), node.type.value_type)
            return _C(expr, node.type, direct=("column", node.path[0]) if len(node.path) == 1 else None)
        if isinstance(node, _Lit):
            return _const(node.value)
        if isinstance(node, _Bin):
            if node.op in ("and", "or"):
                left = self.to_bool(self.compile(node.left), node.op.upper())
                right = self.to_bool(self.compile(node.right), node.op.upper())
                fn = pc.and_kleene if node.op == "and" else pc.or_kleene
                out = self.fold(fn(left.expr, right.expr), fn, [left, right], pa.bool_())
                if _direct(left, right):
                    _with_direct(out, ("call", fn.__name__, (left.direct, right.direct)))
                return out
            if node.op in _COMPARISONS:
                return self.compare(node.op, self.compile(node.left), self.compile(node.right))
            if node.op in ("distinct", "not_distinct"):
                return self.distinct(node.op == "distinct", self.compile(node.left), self.compile(node.right))
            if node.op == "concat":
                return self.concat(self.compile(node.left), self.compile(node.right))
            return self.arithmetic(node.op, self.compile(node.left), self.compile(node.right))
        if isinstance(node, _Unary):
            return self.unary(node.op, self.compile(node.operand))
        if isinstance(node, _Between):
            if node.negated:  # DataFusion: x < low OR x > high
                tree: _Node = _Bin("or", _Bin("lt", node.operand, node.low), _Bin("gt", node.operand, node.high))
            else:  # x >= low AND x <= high
                tree = _Bin("and", _Bin("gte", node.operand, node.low), _Bin("lte", node.operand, node.high))
            return self.compile(tree)
        if isinstance(node, _InList):
            return self.in_list(node)
        if isinstance(node, _Like):
            return self.like(node)
        if isinstance(node, _Cast):
            return self.cast_node(node)
        if isinstance(node, _Func):
            return self.function(node)
        if isinstance(node, _ArrayLit):
            return self.array_literal(node)
        if isinstance(node, _Index):
            return self.list_element(self.compile(node.base), self.compile(node.index))
        if isinstance(node, _Field):
            return self.struct_field(self.compile(node.base), node.name)
        raise self.fail(f"internal error: unknown node {node!r}")  # pragma: no cover

    def array_literal(self, node: _ArrayLit) -> _C:
        """``[1, 2]`` / ``make_array(...)``: a constant list. As in pylance the items are
        constants of one type, set by the first item (later ones must convert to it
        exactly: ``[1.0, 2]`` is ``list<double>``, ``[1, 2.5]`` an error); items may not be
        arrays. NULL items are kept (pylance fails on them at execution)."""
        items = [self.compile(item) for item in node.items]
        if any(c.const is None for c in items):
            if node.brackets:
                position = next(i for i, c in enumerate(items) if c.const is None)
                raise self.fail(f"an array literal [..] holds constants (item {position} is not one); "
                                "make_array(..) takes columns")
            return self.row_list(items)
        values: list[pa.Scalar] = []
        item_type: pa.DataType = pa.null()
        for position, c in enumerate(items):
            if _is_list(c.type):
                raise self.fail("nested array literals are not supported (pylance refuses them too)")
            if pa.types.is_null(item_type) and not pa.types.is_null(c.type):
                item_type = c.type
                values = [pa.scalar(None, item_type) for _ in values]
            value = c.const
            if not pa.types.is_null(item_type):
                coerced = _safe_coerce_scalar(value, item_type)
                if coerced is None:
                    raise self.fail(
                        f"array literal items must have one type: expected {item_type}, got {c.type} at position {position}"
                    )
                value = coerced
            values.append(value)
        return _const(pa.scalar([v.as_py() for v in values], pa.list_(item_type)))

    def row_list(self, items: list[_C]) -> _C:
        """``make_array(i, 1)`` with a column among the items: a list per row, the items as
        their common type (``int32`` and a literal ``1`` make ``int64``), as pylance (which
        refuses the bracket form ``[i, 1]`` with a column; we take both)."""
        item_type: pa.DataType = pa.null()
        for c in items:
            if _is_list(c.type):
                raise self.fail("nested array literals are not supported (pylance refuses them too)")
            common = _comparison_coercion(item_type, c.type)
            if common is None or (not pa.types.is_null(item_type) and _is_string(common) != _is_string(c.type)):
                raise self.fail(f"make_array(): cannot combine {item_type} and {c.type}")
            item_type = common
        if pa.types.is_null(item_type):
            item_type = pa.int64()
        return self.udf("make_list", [self.cast(c, item_type) for c in items], pa.list_(item_type))

    def list_element(self, base: _C, index: _C) -> _C:
        """``base[index]`` of a list (see :class:`_Index`)."""
        if pa.types.is_null(base.type):
            return _const(pa.scalar(None, pa.null()))
        if not _is_list(base.type):
            raise self.fail(f"cannot index {base.type} with [..]: it is not a list")
        if pa.types.is_null(index.type):
            return _const(pa.scalar(None, base.type.value_type))
        if not pa.types.is_integer(index.type):
            raise self.fail(f"a list index must be an integer, got {index.type}")
        return self.udf("list_element", [base, self.cast(index, pa.int64())], base.type.value_type)

    def struct_field(self, base: _C, name: str) -> _C:
        if not pa.types.is_struct(base.type):
            raise self.fail(f"cannot access field {name!r} of a {base.type} value: it is not a struct")
        index = base.type.get_field_index(name)
        if index < 0:
            names = [base.type.field(i).name for i in range(base.type.num_fields)]
            raise self.fail(f"the struct has no field {name!r}; fields are {names}")
        out = base.type.field(index).type

        def fn(v: Any) -> Any:
            return pc.struct_field(v, [index])

        return self.fold(fn(base.expr), fn, [base], out)

    def unwrap_cast(self, a: _C, b: _C) -> tuple[_C, _C]:
        """DataFusion's unwrap-cast-in-comparison: ``CAST(x AS int) op lit`` → ``x op lit'``."""
        for first, second, swap in ((a, b, False), (b, a, True)):
            inner = first.uncast
            if inner is None or second.const is None or not second.const.is_valid:
                continue
            if not pa.types.is_integer(second.const.type):
                continue
            lo, hi = _int_range(inner.type)
            v = second.const.as_py()
            if lo <= v <= hi:
                lit = _const(pa.scalar(v, inner.type))
                return (lit, inner) if swap else (inner, lit)
        return a, b

    def compare(self, op: str, left: _C, right: _C) -> _C:
        if left.uncast is not None or right.uncast is not None:
            left, right = self.unwrap_cast(left, right)
        t = _comparison_coercion(left.type, right.type)
        if t is None:
            raise self.fail(f"cannot compare {left.type} with {right.type} using {_OP_SQL[op]}")
        if pa.types.is_null(t):
            return _const(_NULL_BOOL)
        if _is_list(t):
            return self.list_compare(op, left, right)
        if pa.types.is_struct(t):
            raise self.fail(f"comparing {t} values is not supported")
        left, right = self.cast(left, t), self.cast(right, t)
        fn = _COMPARE_FN[op]
        if not pa.types.is_floating(t):
            out = self.fold(fn(left.expr, right.expr), fn, [left, right], pa.bool_())
            if _direct(left, right):  # (a column cast to ``t`` has none: only like types)
                _with_direct(out, ("call", _COMPARE_NAME[op], (left.direct, right.direct)))
            return out
        return self.float_compare(op, left, right)

    def distinct(self, distinct: bool, left: _C, right: _C) -> _C:
        """``a IS [NOT] DISTINCT FROM b``: ``=`` where both are valid, NULL equal to NULL and
        different from any value; never NULL."""
        eq = self.compare("eq", left, right)
        left_null, right_null = pc.is_null(left.expr), pc.is_null(right.expr)
        same = pc.if_else(
            pc.and_kleene(left_null, right_null), pc.scalar(True),
            pc.if_else(pc.or_kleene(left_null, right_null), pc.scalar(False), eq.expr),
        )
        return _C(pc.invert(same) if distinct else same, pa.bool_())

    def list_compare(self, op: str, left: _C, right: _C) -> _C:
        """Lists compare as DataFusion compares them: element by element, a shorter prefix
        first, NULL elements below every value, floats in Arrow's total order; NULL where
        either list is NULL. A constant list is converted to the other side's element type
        (``tags = [1]`` compares ``['1']``, ``f = ['nan']`` a NaN), as lance resolves literals."""
        if pa.types.is_null(left.type) or pa.types.is_null(right.type):
            return _const(_NULL_BOOL)
        if left.const is not None and right.const is None:
            left = self.list_const_as(left, right.type)
        elif right.const is not None and left.const is None:
            right = self.list_const_as(right, left.type)
        else:  # both per row: the items as their common type
            item = _comparison_coercion(left.type.value_type, right.type.value_type)
            if item is None:
                raise self.fail(f"cannot compare {left.type} with {right.type} using {_OP_SQL[op]}")
            left, right = (c if c.type.value_type == item else self.cast(c, pa.list_(item)) for c in (left, right))
        return self.udf(f"list_{op}", [left, right], pa.bool_())

    def list_const_as(self, c: _C, like: pa.DataType) -> _C:
        """The constant list ``c`` with its items converted to the element type of ``like``."""
        target = like.value_type
        if c.const is None or not c.const.is_valid or c.type.value_type == target:
            return c
        try:
            items = [_cast_scalar(v, target).as_py() for v in c.const.values]
        except (pa.ArrowException, ValueError, OverflowError) as e:
            raise self.fail(f"cannot convert {c.const} to a list of {target}: {_first_line(e)}") from None
        return _const(pa.scalar(items, pa.list_(target)))

    def float_compare(self, op: str, a: _C, b: _C) -> _C:
        """Lance's float order: NaN == NaN, NaN above +inf, -0.0 == 0.0 (IEEE otherwise)."""
        # Literal on the right, so one rewrite handles both sides.
        if a.const is not None and b.const is None:
            op, a, b = _FLIP[op], b, a
        fn = _COMPARE_FN[op]
        base = fn(a.expr, b.expr)
        if a.const is not None and b.const is not None:
            va, vb = a.const.as_py(), b.const.as_py()
            if va is None or vb is None:
                return _const(_NULL_BOOL)
            return _const(pa.scalar(_total_compare(op, va, vb), pa.bool_()))
        nan_a = pc.is_nan(a.expr)
        if b.const is not None:
            vb = b.const.as_py()
            if vb is None:
                return _const(_NULL_BOOL)
            if math.isnan(vb):  # comparing with NaN
                result = {
                    "eq": nan_a, "neq": pc.invert(nan_a), "lt": pc.invert(nan_a), "lte": pc.is_valid(a.expr),
                    "gt": pc.scalar(False), "gte": nan_a,
                }[op]
                return _C(pc.if_else(pc.is_valid(a.expr), result, pc.scalar(_NULL_BOOL)), pa.bool_())
            plain = ("call", _COMPARE_NAME[op], (a.direct, b.direct)) if _direct(a, b) else None
            if op in ("gt", "gte"):
                out = _C(pc.or_kleene(base, nan_a), pa.bool_())
                if plain is not None:
                    _with_direct(out, ("call", "or_kleene", (plain, ("call", "is_nan", (a.direct,)))))
                return out
            return _C(base, pa.bool_(), direct=plain)
        # Neither side constant: Arrow's total order, as pylance evaluates it. On top of the
        # NaN rules, -0.0 sorts strictly below +0.0 (the sign of a zero is read from 1/x).
        nan_b = pc.is_nan(b.expr)
        both_nan = pc.and_kleene(nan_a, nan_b)
        one = pc.scalar(pa.scalar(1.0, a.type))
        zero = pc.scalar(pa.scalar(0.0, a.type))
        both_zero = pc.and_kleene(pc.equal(a.expr, zero), pc.equal(b.expr, zero))
        neg_a = pc.less(pc.divide(one, a.expr), zero)
        neg_b = pc.less(pc.divide(one, b.expr), zero)
        a_below = pc.and_kleene(both_zero, pc.and_kleene(neg_a, pc.invert(neg_b)))  # -0.0 vs +0.0
        b_below = pc.and_kleene(both_zero, pc.and_kleene(neg_b, pc.invert(neg_a)))  # +0.0 vs -0.0
        if op in ("eq", "neq"):
            equal = pc.equal(a.expr, b.expr)
            expr = pc.or_kleene(
                pc.and_kleene(equal, pc.invert(pc.or_kleene(a_below, b_below))), both_nan
            )
            if op == "neq":
                expr = pc.invert(expr)
        elif op == "lt":
            expr = pc.or_kleene(pc.or_kleene(base, a_below), pc.and_kleene(pc.invert(nan_a), nan_b))
        elif op == "gt":
            expr = pc.or_kleene(pc.or_kleene(base, b_below), pc.and_kleene(nan_a, pc.invert(nan_b)))
        elif op == "lte":
            expr = pc.or_kleene(pc.and_kleene(base, pc.invert(b_below)), nan_b)
        else:  # gte
            expr = pc.or_kleene(pc.and_kleene(base, pc.invert(a_below)), nan_a)
        both_valid = pc.and_kleene(pc.is_valid(a.expr), pc.is_valid(b.expr))
        return _C(pc.if_else(both_valid, expr, pc.scalar(_NULL_BOOL)), pa.bool_())

    def arithmetic(self, op: str, left: _C, right: _C) -> _C:
        lt, rt = left.type, right.type
        if op == "sub" and _is_temporal(lt) and _is_temporal(rt):
            return self.temporal_difference(left, right)
        if pa.types.is_null(lt) and pa.types.is_null(rt):
            t = pa.int64()
        elif pa.types.is_null(lt) and _is_numeric(rt):
            t = rt
        elif pa.types.is_null(rt) and _is_numeric(lt):
            t = lt
        else:
            t = _numeric_coercion(lt, rt)
        if t is None:
            raise self.fail(f"cannot apply {_OP_SQL[op]} to {lt} and {rt}")
        if pa.types.is_decimal(t):
            return self.decimal_arithmetic(op, left, right)
        left, right = self.cast(left, t), self.cast(right, t)
        fn = _ARITH_FN[op]
        if op == "mod":
            fn = functools.partial(_remainder, floating=pa.types.is_floating(t))
        out = self.fold(fn(left.expr, right.expr), fn, [left, right], t)
        if op in _ARITH_NAME and _direct(left, right):
            _with_direct(out, ("call", _ARITH_NAME[op], (left.direct, right.direct)))
        return out

    def temporal_difference(self, left: _C, right: _C) -> _C:
        """``ts - ts`` (a ``duration`` of their unit) and ``date - date`` (int64 days), as
        pylance; other date/time arithmetic is refused (pylance refuses INTERVAL literals)."""
        lt, rt = left.type, right.type
        if pa.types.is_date32(lt) and pa.types.is_date32(rt):
            def days(c: _C) -> _C:
                return self.cast(_C(c.expr.cast(pa.int32()), pa.int32(), None if c.const is None else c.const.cast(pa.int32())), pa.int64())

            a, b = days(left), days(right)
            return self.fold(pc.subtract(a.expr, b.expr), pc.subtract, [a, b], pa.int64())
        if pa.types.is_timestamp(lt) and pa.types.is_timestamp(rt) and (lt.tz is None) == (rt.tz is None):
            common = _temporal_coercion(lt, rt)  # the coarser unit, as DataFusion
            assert common is not None
            left, right = self.cast(left, common), self.cast(right, common)
            out = pa.duration(common.unit)
            return self.fold(pc.subtract(left.expr, right.expr), pc.subtract, [left, right], out)
        raise self.fail(f"cannot subtract {rt} from {lt} (date/time arithmetic other than ts - ts and date - date "
                        "is not supported)")

    def decimal_arithmetic(self, op: str, left: _C, right: _C) -> _C:
        """Arithmetic DataFusion evaluates in decimal: a decimal operand, or uint64 with a
        signed integer. With a decimal, each integer operand is the decimal of its digits
        (int32 is Decimal128(10, 0), int64 Decimal128(20, 0)); uint64 with a signed integer
        are both Decimal128(20, 0) (``binary_numeric_coercion``). The result type follows arrow-rs (:func:`_decimal_result_type`) and
        the values are computed exactly by a :mod:`lance_gpu.filter_udfs` kernel."""
        lt, rt = left.type, right.type
        if pa.types.is_decimal256(lt) or pa.types.is_decimal256(rt):
            raise self.fail(f"decimal256 arithmetic is not supported ({lt} {_OP_SQL[op]} {rt})")
        if pa.types.is_decimal(lt) or pa.types.is_decimal(rt):  # each integer as its own decimal
            left_decimal = None if pa.types.is_null(lt) else _operand_decimal(lt)
            right_decimal = None if pa.types.is_null(rt) else _operand_decimal(rt)
        else:  # uint64 with a signed integer: both Decimal128(20, 0), the common type
            left_decimal = right_decimal = pa.decimal128(20, 0)
        try:
            out = _decimal_result_type(op, left_decimal or right_decimal, right_decimal or left_decimal)
        except ValueError as e:
            raise self.fail(str(e)) from None
        if left_decimal is None or right_decimal is None:  # NULL with a decimal
            return _const(pa.nulls(1, out)[0])
        return self.udf(f"decimal_{op}", [left, right], out)

    def concat(self, left: _C, right: _C) -> _C:
        def as_string(c: _C) -> _C:
            if _is_string(c.type):
                return c
            if pa.types.is_null(c.type) or pa.types.is_integer(c.type) or pa.types.is_boolean(c.type):
                return self.cast(c, pa.string())
            raise self.fail(f"cannot concatenate {c.type} with ||")

        left, right = as_string(left), as_string(right)
        t = pa.large_string() if pa.large_string() in (left.type, right.type) else pa.string()
        left, right = self.cast(left, t), self.cast(right, t)

        separator = pa.scalar("", t)

        def fn(a: Any, b: Any) -> Any:
            return pc.binary_join_element_wise(a, b, separator)

        return self.fold(fn(left.expr, right.expr), fn, [left, right], t)

    def unary(self, op: str, c: _C) -> _C:
        if op == "not":
            c = self.to_bool(c, "NOT")
            out = self.fold(pc.invert(c.expr), pc.invert, [c], pa.bool_())
            return _with_direct(out, ("call", "invert", (c.direct,))) if _direct(c) else out
        if op == "neg":
            if pa.types.is_null(c.type):
                return c
            if not (pa.types.is_signed_integer(c.type) or pa.types.is_floating(c.type) or pa.types.is_decimal(c.type)):
                raise self.fail(f"negation is not supported for {c.type}")
            return self.fold(pc.negate(c.expr), pc.negate, [c], c.type)
        if op in ("is_null", "is_not_null"):
            name = "is_null" if op == "is_null" else "is_valid"
            direct = ("call", name, (c.direct,)) if _direct(c) and c.const is None else None
            return _C(getattr(pc, name)(c.expr), pa.bool_(), direct=direct)
        c = self.to_bool(c, op.upper().replace("_", " "))
        false = pc.scalar(False)
        if op == "is_true":
            expr = pc.coalesce(c.expr, false)
        elif op == "is_not_true":
            expr = pc.invert(pc.coalesce(c.expr, false))
        elif op == "is_false":
            expr = pc.coalesce(pc.invert(c.expr), false)
        else:  # is_not_false
            expr = pc.invert(pc.coalesce(pc.invert(c.expr), false))
        return _C(expr, pa.bool_())

    def in_list(self, node: _InList) -> _C:
        x = self.compile(node.operand)
        items = [self.compile(i) for i in node.items]
        if x.uncast is not None and all(i.const is not None for i in items):
            inner = x.uncast
            lo, hi = _int_range(inner.type)
            values = [i.const.as_py() for i in items if i.const is not None]
            if all(pa.types.is_integer(i.type) or pa.types.is_null(i.type) for i in items) and all(
                v is None or lo <= v <= hi for v in values
            ):
                x = inner
                items = [_const(pa.scalar(v, inner.type)) for v in values]
        t = x.type
        for item in items:
            nt = _comparison_coercion(t, item.type)
            if nt is None:
                raise self.fail(f"cannot compare {x.type} with {item.type} in IN list")
            t = nt
        if pa.types.is_null(t):
            return _const(_NULL_BOOL)
        if not _is_list(t):  # lists are compared one by one below, each converted as in '='
            x = self.cast(x, t)
            items = [self.cast(i, t) for i in items]
        if all(i.const is not None for i in items) and not _is_list(t):
            values = [i.const for i in items if i.const is not None and i.const.is_valid]
            has_null = len(values) != len(items)
            py = [v.as_py() for v in values]
            if pa.types.is_floating(t) and any(v == 0 for v in py):  # both signs of zero match a zero
                py += [0.0, -0.0]
            value_set = pa.array(py, t)
            expr = pc.is_in(x.expr, value_set=value_set, skip_nulls=True)
            expr = pc.if_else(pc.is_valid(x.expr), expr, pc.scalar(_NULL_BOOL))
            if has_null:
                expr = pc.or_kleene(expr, pc.scalar(_NULL_BOOL))
            result = _C(expr, pa.bool_())
        else:
            found: _C | None = None
            for item in items:
                eq = self.compare("eq", x, item)
                found = eq if found is None else _C(pc.or_kleene(found.expr, eq.expr), pa.bool_())
            if found is None:  # pragma: no cover - an IN list is never empty
                raise self.fail("IN needs at least one value")
            result = found
        if node.negated:
            return _C(pc.invert(result.expr), pa.bool_())
        return result

    def like(self, node: _Like) -> _C:
        x = self.compile(node.operand)
        pattern = self.compile(node.pattern)
        if not (_is_string(x.type) or pa.types.is_null(x.type)):
            raise self.fail(f"LIKE needs a string operand, got {x.type}")
        if not (_is_string(pattern.type) or pa.types.is_null(pattern.type)):
            raise self.fail(f"LIKE needs a string pattern, got {pattern.type}")
        if pattern.const is None:  # a pattern per row
            if pa.types.is_null(x.type):
                return _const(_NULL_BOOL)
            strings, patterns = self.cast(x, pa.string()), self.cast(pattern, pa.string())
            c = self.udf("ilike_rows" if node.ignore_case else "like_rows", [strings, patterns], pa.bool_())
            return _C(pc.invert(c.expr), pa.bool_()) if node.negated else c
        if not pattern.const.is_valid or pa.types.is_null(x.type):
            return _const(_NULL_BOOL)
        expr = pc.match_like(x.expr, pattern=pattern.const.as_py(), ignore_case=node.ignore_case)
        if node.negated:
            expr = pc.invert(expr)
        return _C(expr, pa.bool_())

    def cast_node(self, node: _Cast) -> _C:
        c = self.compile(node.operand)
        target = node.to
        if c.type == target:
            return c
        if node.safe:
            return self.try_cast(c, target)
        if (
            pa.types.is_null(c.type)
            or _is_numeric(c.type)
            or _is_string(c.type)
            or pa.types.is_boolean(c.type)
            or _is_temporal(c.type)
            or pa.types.is_binary(c.type)
        ):
            out = self.cast(c, target)
        else:
            raise self.fail(f"cannot cast {c.type} to {target}")
        if c.const is None and pa.types.is_integer(c.type) and pa.types.is_integer(target):
            out = _C(out.expr, out.type, None, c.uncast or c)
        return out

    def try_cast(self, c: _C, target: pa.DataType) -> _C:
        """``TRY_CAST(x AS t)``: ``CAST``, with NULL for the values that cannot be cast."""
        if c.const is not None:
            try:
                return self.cast(c, target)
            except FilterError:
                return _const(pa.nulls(1, target)[0])
        if pa.types.is_null(c.type):
            return _const(pa.nulls(1, target)[0])
        try:
            pa.nulls(0, c.type).cast(target)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            raise self.fail(f"cannot cast {c.type} to {target}") from None
        return self.udf("try_cast", [c], target)

    def function(self, node: _Func) -> _C:
        handler = getattr(self, "fn_" + node.name, None)
        if handler is None:  # pragma: no cover - SUPPORTED_FUNCTIONS and the handlers agree
            raise self.fail(f"unknown SQL function {node.name!r}")
        return handler(node.name, node.args)

    # -- function helpers ------------------------------------------------------------------

    def arity(self, name: str, args: list[_Node], low: int, high: int | None = None) -> None:
        high = low if high is None else high
        if not low <= len(args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise self.fail(f"{name}() takes {want} argument{'s' if high != 1 else ''}, got {len(args)}")

    def literal_text(self, name: str, node: _Node, what: str) -> str | None:
        """A string constant argument (None for NULL); anything else is refused."""
        c = self.compile(node)
        if c.const is None or not (_is_string(c.type) or pa.types.is_null(c.type)):
            raise self.fail(f"{name}() needs a constant string as its {what}")
        return c.const.as_py()

    def string_arg(self, name: str, c: _C) -> _C:
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.string()))
        if not _is_string(c.type):
            raise self.fail(f"{name}() needs a string argument, got {c.type}")
        return c

    def float_text(self, c: _C, target: pa.DataType) -> _C:
        """A float as DataFusion prints it (:func:`filter_udfs.float_text`), typed ``target``."""
        if pa.types.is_float16(c.type):
            raise self.fail("casting float16 to a string is not supported")
        single = pa.types.is_float32(c.type)
        if c.const is not None:
            value = c.const.as_py()
            return _const(pa.scalar(None if value is None else filter_udfs.float_text(value, single), target))
        return self.cast(self.udf("float_text", [c], pa.string()), target)

    def text_arg(self, name: str, c: _C) -> _C:
        """A string argument of a function pylance coerces into a string (``length``,
        ``reverse``, ``left`` / ``right``, ``lpad`` / ``rpad``, ``regexp_match``, ``concat``):
        integers, booleans and dates become their text, floats as DataFusion prints them."""
        t = c.type
        if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_floating(t):
            return self.cast(c, pa.string())
        return self.string_arg(name, c)

    def udf(self, kind: str, args: list[_C], out_type: pa.DataType) -> _C:
        expr, spec = filter_udfs.call(kind, [a.expr for a in args], [a.type for a in args], out_type)
        self.udfs.append(spec)
        if all(a.const is not None for a in args):  # a UDF needs an array argument: fold it now
            value = filter_udfs.evaluate(spec, [a.const for a in args])
            return _C(pc.scalar(value), out_type, value)
        return _C(expr, out_type)

    def int_arg(self, name: str, node: _Node, what: str) -> _C:
        """An integer argument (a column or a constant; NULL allowed), as int64."""
        c = self.compile(node)
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.int64()))
        if not pa.types.is_integer(c.type):
            raise self.fail(f"{name}() needs an integer {what}, got {c.type}")
        return self.cast(c, pa.int64())

    # -- functions (fn_<name>, in pylance's spelling) ----------------------------------------

    def fn_is_valid(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        return _C(pc.is_valid(self.compile(args[0]).expr), pa.bool_())

    def fn_lower(self, name: str, args: list[_Node]) -> _C:
        """``lower`` / ``upper`` / ``initcap`` (Unicode's full case mappings, as Rust's)."""
        self.arity(name, args, 1)
        arg = self.string_arg(name, self.compile(args[0]))
        if arg.const is not None and not arg.const.is_valid:
            return _const(pa.scalar(None, arg.type))
        return self.udf(name, [arg], arg.type)

    def fn_length(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        arg = self.text_arg(name, self.compile(args[0]))
        out = pa.int64() if pa.types.is_large_string(arg.type) else pa.int32()
        return self.fold(pc.utf8_length(arg.expr), pc.utf8_length, [arg], out)

    fn_char_length = fn_character_length = fn_length

    def fn_starts_with(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        arg = self.string_arg(name, self.compile(args[0]))
        column_pattern = self.compile(args[1])
        if column_pattern.const is None:  # a pattern per row
            column_pattern = self.string_arg(name, column_pattern)
            return self.udf(f"{name}_rows", [arg, column_pattern], pa.bool_())
        pattern = self.literal_text(name, args[1], "second argument")
        if pattern is None or (arg.const is not None and not arg.const.is_valid):
            return _const(_NULL_BOOL)
        fn = {"starts_with": pc.starts_with, "ends_with": pc.ends_with, "contains": pc.match_substring}[name]
        return self.fold(fn(arg.expr, pattern=pattern), lambda v: fn(v, pattern=pattern), [arg], pa.bool_())

    fn_ends_with = fn_contains = fn_starts_with

    def regex_flags(self, name: str, node: _Node) -> _C:
        """The flags argument: a string column, or a constant checked now (NULL when empty or
        NULL: no flags)."""
        c = self.compile(node)
        if c.const is None:
            return self.string_arg(name, c)
        flags = self.literal_text(name, node, "flags") or ""
        bad = set(flags) - set(_REGEX_FLAGS)
        if bad:
            raise self.fail(
                f"{name}(): unsupported regular expression flag {''.join(sorted(bad))!r} (use {', '.join(_REGEX_FLAGS)})"
            )
        return _const(pa.scalar(flags or None, pa.string()))

    def regex(self, name: str, args: list[_Node]) -> tuple[_C, _C, str | None, _C]:
        """``(string, pattern, constant pattern text or None, flags)``; ``regexp_match``
        coerces a non-string first argument to text, ``regexp_like`` refuses it."""
        self.arity(name, args, 2, 3)
        first = self.compile(args[0])
        arg = self.text_arg(name, first) if name == "regexp_match" else self.string_arg(name, first)
        pattern = self.compile(args[1])
        text = None
        if pattern.const is not None:
            text = self.literal_text(name, args[1], "pattern")
            if text is not None:
                try:
                    re.compile(text)
                except re.error as e:
                    raise self.fail(f"{name}(): invalid regular expression {text!r}: {e}") from None
        else:
            pattern = self.string_arg(name, pattern)
        flags = self.regex_flags(name, args[2]) if len(args) == 3 else _const(pa.scalar(None, pa.string()))
        return arg, pattern, text, flags

    def fn_regexp_like(self, name: str, args: list[_Node]) -> _C:
        arg, pattern, text, flags = self.regex(name, args)
        if pattern.const is None or flags.const is None or "x" in (flags.const.as_py() or ""):
            # a pattern or flags per row, or verbose mode (Arrow's RE2 lacks it): Python's re row by row
            return self.udf("regexp_like_rows", [arg, pattern, flags], pa.bool_())
        if text is None:
            return _const(_NULL_BOOL)
        flag_text = flags.const.as_py()
        full = f"(?{flag_text}){text}" if flag_text else text
        return _C(pc.match_substring_regex(arg.expr, pattern=full), pa.bool_())

    def const_regex(self, name: str, node: _Node, flags_node: _Node | None, allowed: str) -> tuple[str | None, str]:
        """A constant pattern with its inline flags (``(?ims)``), and the flags outside
        ``ims`` (``g`` for ``regexp_replace``); None for a NULL pattern."""
        text = self.literal_text(name, node, "pattern")
        flags = "" if flags_node is None else self.literal_text(name, flags_node, "flags") or ""
        bad = [f for f in flags if f not in allowed]
        if bad:
            raise self.fail(f"{name}(): flag {bad[0]!r} is not supported (use {', '.join(allowed)})")
        if text is None:
            return None, flags
        try:
            re.compile(text)
        except re.error as e:
            raise self.fail(f"{name}(): invalid regular expression {text!r}: {e}") from None
        inline = "".join(f for f in flags if f in "ims")
        return (f"(?{inline}){text}" if inline else text), flags

    def fn_regexp_count(self, name: str, args: list[_Node]) -> _C:
        """``regexp_count(s, pattern[, start[, flags]])``: non-overlapping matches from the
        1-based character ``start`` (0 for a NULL string, as pylance); the pattern, start and
        flags are constants."""
        self.arity(name, args, 2, 4)
        arg = self.string_arg(name, self.compile(args[0]))
        start = 1
        if len(args) >= 3:
            st = self.compile(args[2])
            if st.const is None or not pa.types.is_integer(st.type):
                raise self.fail("regexp_count() needs a constant integer start in lance-gpu")
            start = st.const.as_py()
            if start is None or start < 1:
                raise self.fail("regexp_count(): start must be a positive integer")
        pattern, _flags = self.const_regex(name, args[1], args[3] if len(args) == 4 else None, "ims")
        if pattern is None:
            return _const(pa.scalar(None, pa.int64()))

        def fn(v: Any) -> Any:
            if start > 1:
                v = pc.utf8_slice_codeunits(v, start=start - 1)
            count = pc.count_substring_regex(v, pattern=pattern).cast(pa.int64())
            return pc.coalesce(count, self._lit(0, pa.int64(), v))  # a NULL string counts 0, as in pylance

        return self.fold(fn(arg.expr), fn, [arg], pa.int64())

    def fn_regexp_replace(self, name: str, args: list[_Node]) -> _C:
        """``regexp_replace(s, pattern, replacement[, flags])``: the first match replaced, every
        match with ``g``; ``$1`` / ``${1}`` / ``\\1`` name groups.  Constant pattern,
        replacement and flags; as pylance, a ``large_string`` gives ``string_view``."""
        self.arity(name, args, 3, 4)
        arg = self.string_arg(name, self.compile(args[0]))
        pattern, flags = self.const_regex(name, args[1], args[3] if len(args) == 4 else None, "imsg")
        replacement = self.literal_text(name, args[2], "replacement")
        out = pa.string_view() if pa.types.is_large_string(arg.type) else arg.type
        if pattern is None or replacement is None:
            return _const(pa.scalar(None, out))
        re2 = re.sub(r"\$\{(\d+)\}|\$(\d+)", lambda m: "\\" + (m.group(1) or m.group(2)), replacement)
        limit = None if "g" in flags else 1

        def fn(v: Any) -> Any:
            r = pc.replace_substring_regex(v, pattern=pattern, replacement=re2, max_replacements=limit)
            return r.cast(out) if out != arg.type else r

        return self.fold(fn(arg.expr), fn, [arg], out)

    def fn_arrow_cast(self, name: str, args: list[_Node]) -> _C:
        """``arrow_cast(x, 'FixedSizeList(32, Float32)')``: a cast to the type DataFusion
        names (:func:`lance_gpu.filter_types.parse_type_name`)."""
        self.arity(name, args, 2)
        target = self.literal_text(name, args[1], "type name")
        if target is None:
            raise self.fail("arrow_cast() needs a type name, got NULL")
        try:
            t = parse_type_name(target)
        except ValueError as e:
            raise self.fail(f"arrow_cast(): {e}") from None
        c = self.compile(args[0])
        if c.type == t:
            return c
        if c.const is not None and not c.const.is_valid:
            return _const(pa.nulls(1, t)[0])
        if pa.types.is_dictionary(t) and not pa.types.is_dictionary(c.type):
            c = self.cast(c, t.value_type)  # Arrow encodes a dictionary from its values' type
        if c.const is None and not pa.types.is_null(c.type):
            try:  # pylance refuses a cast Arrow has no kernel for when it plans the query
                pa.nulls(0, c.type).cast(t)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                raise self.fail(f"arrow_cast(): cannot cast {c.type} to {target}") from None
        return self.cast(c, t)

    def fn_arrow_typeof(self, name: str, args: list[_Node]) -> _C:
        """``arrow_typeof(x)``: DataFusion's name of ``x``'s type."""
        self.arity(name, args, 1)
        t = self.compile(args[0]).type
        try:
            return _const(pa.scalar(type_name(t), pa.string()))
        except ValueError:
            raise self.fail(f"arrow_typeof(): lance-gpu does not name type {t}") from None

    def fn_regexp_match(self, name: str, args: list[_Node]) -> _C:
        out = pa.list_(pa.string())
        arg, pattern, text, flags = self.regex(name, args)
        if pattern.const is None or flags.const is None or "x" in (flags.const.as_py() or ""):
            # a pattern or flags per row, or verbose mode (Arrow's RE2 lacks it): Python's re row by row
            c = self.udf("regexp_match_rows", [arg, pattern, flags], out)
            return _C(c.expr, out, truth=pc.if_else(pc.is_valid(c.expr), pc.scalar(True), pc.scalar(_NULL_BOOL)))
        if text is None:
            return _const(pa.scalar(None, out))
        flag_text = flags.const.as_py()
        full = f"(?{flag_text}){text}" if flag_text else text
        truth = pc.if_else(pc.match_substring_regex(arg.expr, pattern=full), pc.scalar(True), pc.scalar(_NULL_BOOL))
        if arg.const is not None:  # a UDF needs one array argument: fold it here
            value = filter_udfs._regexp_match(1, arg.const, pa.scalar(text), flags.const)[0]
            return _C(pc.scalar(value), out, value, truth=truth)
        c = self.udf("regexp_match_flags", [arg, _const(pa.scalar(text)), flags], out)
        return _C(c.expr, out, truth=truth)

    def list_arg(self, name: str, node: _Node) -> _C:
        c = self.compile(node)
        if not _is_list(c.type):
            raise self.fail(f"{name}() needs a list (a list column or an array literal such as [1, 2]), got {c.type}")
        return c

    def fn_array_length(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1, 2)
        c = self.list_arg(name, args[0])
        if len(args) == 2:
            dim = self.compile(args[1])
            if dim.const is None or not pa.types.is_integer(dim.type) or dim.const.as_py() != 1:
                raise self.fail(f"{name}(): only dimension 1 is supported")
        return _C(pc.list_value_length(c.expr).cast(pa.uint64()), pa.uint64())

    fn_list_length = fn_array_length

    def fn_array_has(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        lst = self.list_arg(name, args[0])
        item_type = lst.type.value_type
        value = self.compile(args[1])
        if pa.types.is_null(value.type):
            return _const(_NULL_BOOL)
        if _comparison_coercion(item_type, value.type) is None or (_is_string(value.type) != _is_string(item_type)):
            raise self.fail(f"{name}() cannot look for a {value.type} in a list of {item_type}")
        value = self.cast(value, item_type)
        return self.udf("array_has", [lst, value], pa.bool_())

    fn_array_contains = fn_list_has = fn_array_has

    def fn_array_has_any(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        lst = self.list_arg(name, args[0])
        item_type = lst.type.value_type
        second = args[1]
        if not (isinstance(second, _ArrayLit) and all(self.compile(i).const is not None for i in second.items)):
            # a list per row
            other = self.list_arg(name, args[1])
            common = _comparison_coercion(item_type, other.type.value_type)
            if common is None or _is_string(item_type) != _is_string(other.type.value_type):
                raise self.fail(f"{name}() cannot compare {lst.type} with {other.type}")
            kind = "list_has_any_rows" if name in ("array_has_any", "list_has_any") else "list_has_all_rows"
            return self.udf(kind, [self.cast(lst, pa.list_(common)), self.cast(other, pa.list_(common))], pa.bool_())
        name = name.replace("list_", "array_")
        values = []
        for item in second.items:
            c = self.compile(item)
            if not pa.types.is_null(c.type) and (
                _comparison_coercion(item_type, c.type) is None or _is_string(c.type) != _is_string(item_type)
            ):
                raise self.fail(f"{name}() cannot look for a {c.type} in a list of {item_type}")
            values.append(self.cast(c, item_type).const)
        literal = pa.scalar([v.as_py() for v in values if v is not None], pa.list_(item_type))
        return self.udf(name, [lst, _const(literal)], pa.bool_())

    fn_array_has_all = fn_list_has_any = fn_list_has_all = fn_array_has_any

    def fn_abs(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        c = self.compile(args[0])
        if pa.types.is_null(c.type):
            return c
        if not _is_numeric(c.type):
            raise self.fail(f"abs() needs a number, got {c.type}")
        return self.fold(pc.abs_checked(c.expr), pc.abs_checked, [c], c.type)

    def fn_coalesce(self, name: str, args: list[_Node]) -> _C:
        if not args:
            raise self.fail("coalesce() needs at least one argument")
        items = [self.compile(a) for a in args]
        t = items[0].type
        for item in items[1:]:
            nt = _comparison_coercion(t, item.type)
            if nt is None:
                raise self.fail(f"coalesce() cannot combine {t} and {item.type}")
            t = nt
        if pa.types.is_null(t):
            return _const(pa.scalar(None, pa.null()))
        items = [self.cast(i, t) for i in items]
        return self.fold(pc.coalesce(*[i.expr for i in items]), pc.coalesce, items, t)

    def fn_round(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1, 2)
        c = self.compile(args[0])
        digits = 0
        if len(args) == 2 and self.compile(args[1]).const is None:  # digits per row
            d = self.int_arg(name, args[1], "number of decimal places")
            if not _is_numeric(c.type) or pa.types.is_decimal(c.type):
                raise self.fail(f"round() needs an integer or floating-point number, got {c.type}")
            return self.udf("round_rows", [c, d], pa.float32() if pa.types.is_float32(c.type) else pa.float64())
        if len(args) == 2:
            d = self.compile(args[1])
            if d.const is None or not pa.types.is_integer(d.type):
                raise self.fail("round() needs a constant integer number of decimal places")
            digits = d.const.as_py()
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.float64()))
        if not _is_numeric(c.type) or pa.types.is_decimal(c.type):
            raise self.fail(f"round() needs an integer or floating-point number, got {c.type}")
        out = pa.float32() if pa.types.is_float32(c.type) else pa.float64()
        c = self.cast(c, out)

        def fn(v: Any) -> Any:
            return pc.round(v, ndigits=digits, round_mode="half_towards_infinity")

        return self.fold(fn(c.expr), fn, [c], out)

    def fn_date_trunc(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        unit = self.literal_text(name, args[0], "granularity")
        if unit is None or unit.lower() not in _TRUNC_UNITS:
            raise self.fail(
                f"unsupported date_trunc granularity {unit if unit is None else unit.lower()!r}; supported: {', '.join(_TRUNC_UNITS)}"
            )
        c = self.compile(args[1])
        if pa.types.is_date(c.type):
            c = self.cast(c, pa.timestamp("ns"))
        if not pa.types.is_timestamp(c.type):
            raise self.fail(f"date_trunc() needs a date or a timestamp, got {c.type}")
        u = _TRUNC_UNITS[unit.lower()]

        def fn(v: Any) -> Any:
            return pc.floor_temporal(v, unit=u, week_starts_monday=True)

        return self.fold(fn(c.expr), fn, [c], c.type)

    def fn_date_bin(self, name: str, args: list[_Node]) -> _C:
        """``date_bin(INTERVAL '15 minutes', ts[, origin])``: the start of the ``interval``-wide
        bin holding ``ts``, bins counted from ``origin`` (1970-01-01 by default); a date is a
        ``timestamp[ns]``. By months or years: the first of the bin's month, counted from
        1970-01 (another origin is refused)."""
        self.arity(name, args, 2, 3)
        stride = self.compile(args[0])
        if stride.const is None or not pa.types.is_interval(stride.type):
            raise self.fail("date_bin() needs an INTERVAL as its first argument")
        months, days, nanos = stride.const.as_py() if stride.const.is_valid else (0, 0, 0)
        c = self.compile(args[1])
        if pa.types.is_date(c.type):
            c = self.cast(c, pa.timestamp("ns"))
        if not pa.types.is_timestamp(c.type):
            raise self.fail(f"date_bin() needs a timestamp or a date, got {c.type}")
        if months:
            if days or nanos or len(args) == 3 or months < 0:
                raise self.fail("date_bin() by months or years takes a whole number of them and the default origin")
            return self.udf("date_bin_months", [c, _const(pa.scalar(months, pa.int64()))], c.type)
        t = c.type
        per = UNIT_PER_SECOND[t.unit]
        total = days * 86400 * 10**9 + nanos
        if total <= 0 or total % (10**9 // per):
            raise self.fail(f"date_bin(): the interval must be a positive whole number of {t.unit} for {t}")
        step = total // (10**9 // per)
        origin = 0
        if len(args) == 3:
            o = self.compile(args[2])
            if o.const is None or not _is_temporal(o.type):
                raise self.fail("date_bin() needs a constant timestamp as its origin")
            origin = self.cast(o, t).const.cast(pa.int64()).as_py()  # type: ignore[union-attr]
        ticks = c.expr.cast(pa.int64())
        step_c, origin_c = pc.scalar(pa.scalar(step, pa.int64())), pc.scalar(pa.scalar(origin, pa.int64()))
        rest = _remainder(pc.subtract(ticks, origin_c), step_c, floating=False)  # truncated: below zero before origin
        floor_rest = pc.if_else(pc.less(rest, pc.scalar(0)), pc.add(rest, step_c), rest)
        return _C(pc.subtract(ticks, floor_rest).cast(t), t)

    def fn_datetrunc(self, name: str, args: list[_Node]) -> _C:
        return self.fn_date_trunc(name, args)

    def fn_current_date(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 0)
        return _const(pa.scalar(_dt.datetime.now(_dt.UTC).date(), pa.date32()))

    def fn_now(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 0)
        now = _dt.datetime.now(_dt.UTC).replace(tzinfo=None)
        return _const(pa.scalar(now, pa.timestamp("us")).cast(pa.timestamp("ns")))

    fn_current_timestamp = fn_now
    fn_today = fn_current_date

    # -- math (float results) and more string functions ---------------------------------

    def float_arg(self, name: str, node: _Node) -> _C:
        c = self.compile(node)
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.float64()))
        if not (pa.types.is_integer(c.type) or pa.types.is_floating(c.type)):
            raise self.fail(f"{name}() needs a number, got {c.type}")
        return self.cast(c, pa.float32() if pa.types.is_float32(c.type) else pa.float64())

    def fn_sqrt(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        c = self.float_arg(name, args[0])
        fn = {
            "sqrt": pc.sqrt, "exp": pc.exp, "ln": pc.ln, "log10": pc.log10, "log2": pc.log2,
            "signum": pc.sign, "trunc": pc.trunc,
        }[name]
        return self.fold(fn(c.expr), fn, [c], c.type)

    fn_exp = fn_ln = fn_log10 = fn_log2 = fn_signum = fn_sqrt

    def fn_trunc(self, name: str, args: list[_Node]) -> _C:
        """``trunc(x[, digits])``: toward zero, at ``digits`` decimal places as DataFusion computes
        it (``trunc(x * 10^d) / 10^d`` in the float precision of ``x``); ``digits`` a constant."""
        self.arity(name, args, 1, 2)
        c = self.float_arg(name, args[0])
        if len(args) == 1:
            return self.fold(pc.trunc(c.expr), pc.trunc, [c], c.type)
        d = self.compile(args[1])
        if d.const is None or not (pa.types.is_integer(d.type) or pa.types.is_null(d.type)):
            raise self.fail("trunc() needs a constant integer number of decimal places")
        if not d.const.is_valid:
            return _const(pa.scalar(None, c.type))
        t, scale = c.type, 10.0 ** d.const.as_py()

        def fn(v: Any) -> Any:
            factor = self._lit(scale, t, v)
            return pc.divide(pc.trunc(pc.multiply(v, factor)), factor)

        return self.fold(fn(c.expr), fn, [c], t)

    @staticmethod
    def _lit(value: Any, t: pa.DataType, like: Any) -> Any:
        """``value`` as a ``t`` literal that combines with ``like`` (an expression or an array)."""
        scalar = pa.scalar(value, t)
        return pc.scalar(scalar) if isinstance(like, pc.Expression) else scalar

    def fn_sin(self, name: str, args: list[_Node]) -> _C:
        """Trigonometry and angle conversions, as DataFusion computes them (``cot`` is
        ``1 / tan``, ``degrees`` / ``radians`` multiply by ``180 / pi`` / ``pi / 180``)."""
        self.arity(name, args, 1)
        c = self.float_arg(name, args[0])
        t = c.type
        unary = {"sin": pc.sin, "cos": pc.cos, "tan": pc.tan, "asin": pc.asin, "acos": pc.acos, "atan": pc.atan}
        if name in unary:
            fn = unary[name]
        else:
            factor = {"degrees": 180.0 / math.pi, "radians": math.pi / 180.0}.get(name)

            def fn(v: Any) -> Any:
                if factor is not None:
                    return pc.multiply(v, self._lit(factor, t, v))
                return pc.divide(self._lit(1.0, t, v), pc.tan(v))  # cot

        return self.fold(fn(c.expr), fn, [c], t)

    fn_cos = fn_tan = fn_asin = fn_acos = fn_atan = fn_cot = fn_degrees = fn_radians = fn_sin

    def fn_atan2(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        y, x = (self.float_arg(name, a) for a in args)
        t = pa.float32() if pa.types.is_float32(y.type) and pa.types.is_float32(x.type) else pa.float64()
        y, x = self.cast(y, t), self.cast(x, t)
        return self.fold(pc.atan2(y.expr, x.expr), pc.atan2, [y, x], t)

    def fn_log(self, name: str, args: list[_Node]) -> _C:
        """``log(base, x)``: ``ln(x) / ln(base)`` (DataFusion's two-argument log), in the
        precision of ``x`` (float32 stays float32)."""
        self.arity(name, args, 2)
        base, x = (self.float_arg(name, a) for a in args)
        t = x.type
        base = self.cast(base, t)

        def fn(b: Any, v: Any) -> Any:
            return pc.divide(pc.ln(v), pc.ln(b))

        return self.fold(fn(base.expr, x.expr), fn, [base, x], t)

    def fn_isnan(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        c = self.float_arg(name, args[0])

        def fn(v: Any) -> Any:
            return pc.is_nan(v) if name == "isnan" else pc.equal(v, self._lit(0.0, c.type, v))

        return self.fold(fn(c.expr), fn, [c], pa.bool_())

    fn_iszero = fn_isnan

    def fn_nanvl(self, name: str, args: list[_Node]) -> _C:
        """``nanvl(x, y)``: ``y`` where ``x`` is NaN, else ``x``."""
        self.arity(name, args, 2)
        x, y = (self.float_arg(name, a) for a in args)
        t = pa.float32() if pa.types.is_float32(x.type) and pa.types.is_float32(y.type) else pa.float64()
        x, y = self.cast(x, t), self.cast(y, t)

        def fn(a: Any, b: Any) -> Any:
            return pc.if_else(pc.is_nan(a), b, a)

        return self.fold(fn(x.expr, y.expr), fn, [x, y], t)

    def _common(self, name: str, items: list[_C]) -> tuple[list[_C], pa.DataType]:
        t = items[0].type
        for item in items[1:]:
            nt = _comparison_coercion(t, item.type)
            if nt is None:
                raise self.fail(f"{name}() cannot combine {t} and {item.type}")
            t = nt
        return [self.cast(i, t) for i in items], t

    def fn_nullif(self, name: str, args: list[_Node]) -> _C:
        """``nullif(a, b)``: NULL where ``a = b``, else ``a`` (both as their common type)."""
        self.arity(name, args, 2)
        (a, b), t = self._common(name, [self.compile(x) for x in args])
        if pa.types.is_null(t):
            return _const(pa.scalar(None, pa.null()))

        def fn(x: Any, y: Any) -> Any:
            return pc.if_else(pc.coalesce(pc.equal(x, y), self._lit(False, pa.bool_(), x)), self._lit(None, t, x), x)

        return self.fold(fn(a.expr, b.expr), fn, [a, b], t)

    def fn_nvl2(self, name: str, args: list[_Node]) -> _C:
        """``nvl2(a, b, c)``: ``b`` where ``a`` is not NULL, else ``c``."""
        self.arity(name, args, 3)
        a = self.compile(args[0])
        (b, c), t = self._common(name, [self.compile(x) for x in args[1:]])
        if _is_text(a.type) and not _is_text(t) and not pa.types.is_null(t):
            # DataFusion coerces all three arguments: a string first one makes the values text
            b, c, t = self.cast(b, pa.string()), self.cast(c, pa.string()), pa.string()

        def fn(x: Any, y: Any, z: Any) -> Any:
            return pc.if_else(pc.is_valid(x), y, z)

        return self.fold(fn(a.expr, b.expr, c.expr), fn, [a, b, c], t)

    def fn_greatest(self, name: str, args: list[_Node]) -> _C:
        """``greatest`` / ``least``: of the non-NULL arguments (NULL only where all are)."""
        if not args:
            raise self.fail(f"{name}() needs at least one argument")
        items, t = self._common(name, [self.compile(x) for x in args])
        if pa.types.is_null(t):
            return _const(pa.scalar(None, pa.null()))
        fn0 = pc.max_element_wise if name == "greatest" else pc.min_element_wise

        def fn(*vs: Any) -> Any:
            return fn0(*vs, skip_nulls=True)

        return self.fold(fn(*[i.expr for i in items]), fn, items, t)

    fn_least = fn_greatest

    def fn_power(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        base, exponent = (self.cast(self.float_arg(name, a), pa.float64()) for a in args)
        return self.fold(pc.power(base.expr, exponent.expr), pc.power, [base, exponent], pa.float64())

    fn_pow = fn_power

    def fn_replace(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 3)
        arg = self.string_arg(name, self.compile(args[0]))
        old = self.literal_text(name, args[1], "second argument")
        new = self.literal_text(name, args[2], "third argument")
        if old is None or new is None:
            return _const(pa.scalar(None, arg.type))
        if old == "":
            return arg

        def fn(v: Any) -> Any:
            return pc.replace_substring(v, pattern=old, replacement=new)

        return self.fold(fn(arg.expr), fn, [arg], arg.type)

    def fn_btrim(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1, 2)
        arg = self.string_arg(name, self.compile(args[0]))
        chars = self.literal_text(name, args[1], "second argument") if len(args) == 2 else " "
        if chars is None:
            return _const(pa.scalar(None, arg.type))
        fn0 = {"btrim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[name]

        def fn(v: Any) -> Any:
            return fn0(v, characters=chars)

        return self.fold(fn(arg.expr), fn, [arg], arg.type)

    fn_ltrim = fn_rtrim = fn_btrim

    def fn_concat(self, name: str, args: list[_Node]) -> _C:
        if not args:
            raise self.fail("concat() needs at least one argument")
        parts = []
        for a in args:
            c = self.compile(a)
            if pa.types.is_null(c.type):
                continue  # NULL arguments are skipped
            parts.append(self.cast(self.text_arg(name, c), pa.string()))
        if not parts:
            return _const(pa.scalar("", pa.string()))
        exprs = [pc.coalesce(p.expr, pc.scalar("")) for p in parts]
        return _C(pc.binary_join_element_wise(*exprs, pc.scalar("")), pa.string())

    def fn_strpos(self, name: str, args: list[_Node]) -> _C:
        """``strpos(s, sub)``: the 1-based character position of ``sub`` in ``s`` (0: absent);
        ``sub`` may be a column."""
        self.arity(name, args, 2)
        arg = self.string_arg(name, self.compile(args[0]))
        sub = self.string_arg(name, self.compile(args[1]))
        out = pa.int64() if pa.types.is_large_string(arg.type) else pa.int32()
        if sub.const is not None and not sub.const.is_valid:
            return _const(pa.scalar(None, out))
        return self.udf("strpos", [arg, sub], out)

    def fn_reverse(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        arg = self.text_arg(name, self.compile(args[0]))
        return self.fold(pc.utf8_reverse(arg.expr), pc.utf8_reverse, [arg], arg.type)

    fn_upper = fn_initcap = fn_lower

    def fn_ascii(self, name: str, args: list[_Node]) -> _C:
        """Row-by-row string functions (Python kernels in :mod:`lance_gpu.filter_udfs`):
        ``ascii``, ``md5`` (hex, ``string_view``), ``sha224`` / ``sha256`` / ``sha384`` /
        ``sha512`` (binary digests), ``translate``, ``levenshtein``, ``find_in_set``,
        ``substr_index``, ``encode(s, 'hex' | 'base64')``; typed as pylance types them."""
        arity = {"translate": 3, "levenshtein": 2, "find_in_set": 2, "substr_index": 3, "encode": 2}.get(name, 1)
        self.arity(name, args, arity)
        items = [self.string_arg(name, self.compile(a)) for a in args[:2]] if name != "substr_index" else [
            self.string_arg(name, self.compile(args[0])), self.string_arg(name, self.compile(args[1]))]
        if name == "translate":
            items.append(self.string_arg(name, self.compile(args[2])))
        if name == "substr_index":
            items.append(self.int_arg(name, args[2], "count"))
        if name == "encode":
            how = self.literal_text(name, args[1], "encoding")
            if how not in ("hex", "base64", None):
                raise self.fail(f"encode(): encoding {how!r} is not supported (hex, base64)")
        large = pa.types.is_large_string(items[0].type)
        # the result types pylance gives (a large_string first argument changes some)
        out = {
            "ascii": pa.int32(), "md5": pa.string_view(), "find_in_set": pa.int32(),
            "levenshtein": pa.int64() if large else pa.int32(),
            "translate": pa.large_string() if large else pa.string(), "encode": pa.large_string() if large else pa.string(),
            "substr_index": pa.string_view() if large else pa.string(),
        }.get(name, pa.binary())
        items = [self.cast(i, pa.string()) if pa.types.is_large_string(i.type) or pa.types.is_string_view(i.type) else i for i in items]
        if any(i.const is not None and not i.const.is_valid for i in items):
            return _const(pa.scalar(None, out))
        return self.udf(name, items, out)

    fn_md5 = fn_sha224 = fn_sha256 = fn_sha384 = fn_sha512 = fn_translate = fn_ascii
    fn_levenshtein = fn_find_in_set = fn_substr_index = fn_encode = fn_ascii

    def fn_to_hex(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        c = self.compile(args[0])
        if not (pa.types.is_integer(c.type) or pa.types.is_null(c.type)):
            raise self.fail(f"to_hex() needs an integer, got {c.type}")
        c = self.cast(c, pa.int64())
        if c.const is not None and not c.const.is_valid:
            return _const(pa.scalar(None, pa.string()))
        return self.udf("to_hex", [c], pa.string())

    def fn_bit_length(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        arg = self.string_arg(name, self.compile(args[0]))
        out = pa.int64() if pa.types.is_large_string(arg.type) else pa.int32()

        def fn(v: Any) -> Any:
            return pc.multiply(pc.binary_length(v), pa.scalar(8, out))

        return self.fold(fn(arg.expr), fn, [arg], out)

    def fn_split_part(self, name: str, args: list[_Node]) -> _C:
        """``split_part(s, delimiter, n)``: the ``n``-th piece of ``s`` cut at ``delimiter``
        (1-based; negative counts from the end; '' past the last; the whole string for an
        empty delimiter and ``n`` of 1 or -1).  The delimiter and ``n`` are constants."""
        self.arity(name, args, 3)
        arg = self.string_arg(name, self.compile(args[0]))
        delim = self.literal_text(name, args[1], "delimiter")
        n_c = self.compile(args[2])
        if n_c.const is None:
            raise self.fail("split_part() needs a constant part number in lance-gpu")
        if not (pa.types.is_integer(n_c.type) or pa.types.is_null(n_c.type)):
            raise self.fail(f"split_part() needs an integer part number, got {n_c.type}")
        n = n_c.const.as_py()
        if delim is None or n is None:
            return _const(pa.scalar(None, arg.type))
        if n == 0:
            raise self.fail("split_part(): field position must not be zero")

        def fn(v: Any) -> Any:
            if delim == "":
                return v if n in (1, -1) else pc.if_else(pc.is_valid(v), self._lit("", arg.type, v), self._lit(None, arg.type, v))
            if n > 0:
                parts = pc.split_pattern(v, pattern=delim)
                return pc.binary_join(pc.list_slice(parts, n - 1, n), self._lit("", arg.type, v))
            # from the end: split the reversed string at the reversed delimiter
            parts = pc.split_pattern(pc.utf8_reverse(v), pattern=delim[::-1])
            return pc.utf8_reverse(pc.binary_join(pc.list_slice(parts, -n - 1, -n), self._lit("", arg.type, v)))

        return self.fold(fn(arg.expr), fn, [arg], arg.type)

    def fn_octet_length(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        arg = self.string_arg(name, self.compile(args[0]))
        out = pa.int64() if pa.types.is_large_string(arg.type) else pa.int32()
        return self.fold(pc.binary_length(arg.expr), pc.binary_length, [arg], out)

    def fn_repeat(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 2)
        arg = self.string_arg(name, self.compile(args[0]))
        times = self.int_arg(name, args[1], "count")
        if times.const is None:  # a count per row
            return self.udf("repeat_rows", [arg, times], arg.type)
        if not times.const.is_valid:
            return _const(pa.scalar(None, arg.type))
        n = max(0, times.const.as_py())

        def fn(v: Any) -> Any:
            return pc.binary_repeat(v, n)

        return self.fold(fn(arg.expr), fn, [arg], arg.type)

    def fn_left(self, name: str, args: list[_Node]) -> _C:
        """``left(s, n)`` / ``right(s, n)``: the first / last ``n`` characters (``n < 0``: all
        but the last / first ``-n``), as pylance's ``string_view``."""
        self.arity(name, args, 2)
        arg = self.text_arg(name, self.compile(args[0]))
        n = self.int_arg(name, args[1], "length")
        return self.udf(name, [arg, n], pa.string_view())

    fn_right = fn_left

    def fn_lpad(self, name: str, args: list[_Node]) -> _C:
        """``lpad(s, n[, fill])`` / ``rpad``: ``s`` padded with ``fill`` (default a space) on
        the left / right to ``n`` characters, or cut to its first ``n``; typed as ``s``."""
        self.arity(name, args, 2, 3)
        arg = self.text_arg(name, self.compile(args[0]))
        n = self.int_arg(name, args[1], "length")
        rest = [self.text_arg(name, self.compile(args[2]))] if len(args) == 3 else []
        return self.udf(name, [arg, n, *rest], arg.type)

    fn_rpad = fn_lpad

    # -- more of DataFusion's functions (issue 26 item 5) ---------------------------------

    def fn_array_element(self, name: str, args: list[_Node]) -> _C:
        """``array_element(list, i)`` (also ``list_element``, ``array_extract``, ``list_extract``):
        ``list[i]``."""
        self.arity(name, args, 2)
        return self.list_element(self.compile(args[0]), self.compile(args[1]))

    fn_list_element = fn_array_extract = fn_list_extract = fn_array_element

    def fn_cardinality(self, name: str, args: list[_Node]) -> _C:
        """``cardinality(list)``: the product of the list's dimensions (each the length of the
        first element one level down, as DataFusion's ``array_dims``), uint64."""
        self.arity(name, args, 1)
        c = self.list_arg(name, args[0])
        return self.udf("cardinality", [c], pa.uint64())

    def fn_empty(self, name: str, args: list[_Node]) -> _C:
        """``empty(list)`` / ``array_empty``: whether the list has no elements."""
        self.arity(name, args, 1)
        c = self.list_arg(name, args[0])
        return _C(pc.equal(pc.list_value_length(c.expr), pc.scalar(0)), pa.bool_())

    fn_array_empty = fn_empty

    def fn_array_position(self, name: str, args: list[_Node]) -> _C:
        """``array_position(list, x[, start])``: the 1-based position of the first element equal
        to ``x`` at or after ``start``, NULL when absent (uint64)."""
        self.arity(name, args, 2, 3)
        lst = self.list_arg(name, args[0])
        value = self.list_item_arg(name, lst, args[1])
        start = self.int_arg(name, args[2], "start") if len(args) == 3 else _const(pa.scalar(1, pa.int64()))
        return self.udf("array_position", [lst, value, start], pa.uint64())

    fn_list_position = fn_array_indexof = fn_list_indexof = fn_array_position

    def list_item_arg(self, name: str, lst: _C, node: _Node) -> _C:
        item_type = lst.type.value_type
        value = self.compile(node)
        if pa.types.is_null(value.type):
            return _const(pa.scalar(None, item_type))
        if _comparison_coercion(item_type, value.type) is None or (_is_string(value.type) != _is_string(item_type)):
            raise self.fail(f"{name}() cannot look for a {value.type} in a list of {item_type}")
        return self.cast(value, item_type)

    def fn_decode(self, name: str, args: list[_Node]) -> _C:
        """``decode(text, 'hex' | 'base64')``: the bytes the text encodes (binary)."""
        self.arity(name, args, 2)
        arg = self.cast(self.string_arg(name, self.compile(args[0])), pa.string())
        how = self.literal_text(name, args[1], "encoding")
        if how not in ("hex", "base64", None):
            raise self.fail(f"decode(): encoding {how!r} is not supported (hex, base64)")
        if how is None:
            return _const(pa.scalar(None, pa.binary()))
        return self.udf(f"decode_{how}", [arg], pa.binary())

    _DIGESTS: ClassVar[frozenset[str]] = frozenset(["md5", "sha224", "sha256", "sha384", "sha512", "blake2s", "blake2b"])

    def fn_digest(self, name: str, args: list[_Node]) -> _C:
        """``digest(text, algorithm)``: the binary digest (md5, sha224 ... sha512, blake2s, blake2b)."""
        self.arity(name, args, 2)
        arg = self.cast(self.string_arg(name, self.compile(args[0])), pa.string())
        how = self.literal_text(name, args[1], "algorithm")
        if how is None:
            return _const(pa.scalar(None, pa.binary()))
        if how.lower() not in self._DIGESTS:
            raise self.fail(f"digest(): algorithm {how!r} is not supported ({', '.join(sorted(self._DIGESTS))})")
        return self.udf(f"digest_{how.lower()}", [arg], pa.binary())

    def fn_range(self, name: str, args: list[_Node]) -> _C:
        """``range([start,] stop[, step])`` (``stop`` excluded) / ``generate_series(start, stop[,
        step])`` (``stop`` included): a list of int64; NULL where an argument is NULL."""
        self.arity(name, args, 1 if name == "range" else 2, 3)
        bounds = [self.int_arg(name, a, "bound") for a in args]
        if name == "range" and len(bounds) == 1:
            bounds = [_const(pa.scalar(0, pa.int64())), bounds[0]]
        if len(bounds) == 2:
            bounds.append(_const(pa.scalar(1, pa.int64())))
        kind = "range" if name == "range" else "generate_series"
        return self.udf(kind, bounds, pa.list_(pa.int64()))

    fn_generate_series = fn_range

    def fn_array_distance(self, name: str, args: list[_Node]) -> _C:
        """``array_distance(a, b)``: the Euclidean distance of two number lists (float64); lists
        of different lengths fail the query."""
        self.arity(name, args, 2)
        lists = [self.list_arg(name, a) for a in args]
        for c in lists:
            if not _is_numeric(c.type.value_type) or pa.types.is_decimal(c.type.value_type):
                raise self.fail(f"{name}() needs lists of numbers, got {c.type}")
        return self.udf("array_distance", [self.cast(c, pa.list_(pa.float64())) for c in lists], pa.float64())

    fn_list_distance = fn_array_distance

    def fn_string_to_array(self, name: str, args: list[_Node]) -> _C:
        """``string_to_array(s, delimiter[, null_string])``: ``s`` cut at ``delimiter`` (a NULL
        delimiter: every character; an empty one: ``[s]``; an empty ``s``: ``[]``), pieces equal
        to ``null_string`` NULL; a list of ``s``'s string type."""
        self.arity(name, args, 2, 3)
        arg = self.string_arg(name, self.compile(args[0]))
        delim = self.literal_text(name, args[1], "delimiter")
        null = self.literal_text(name, args[2], "null string") if len(args) == 3 else None
        item = pa.large_string() if pa.types.is_large_string(arg.type) else pa.string()
        arg = self.cast(arg, pa.string())
        return self.udf("string_to_array", [arg, _const(pa.scalar(delim, pa.string())),
                                            _const(pa.scalar(null, pa.string()))], pa.list_(item))

    def fn_array_to_string(self, name: str, args: list[_Node]) -> _C:
        """``array_to_string(list, delimiter[, null_string])``: the elements as text joined by
        ``delimiter``; NULL elements left out, or written as ``null_string``."""
        self.arity(name, args, 2, 3)
        lst = self.list_arg(name, args[0])
        item = lst.type.value_type
        if not (_is_string(item) or pa.types.is_integer(item) or pa.types.is_boolean(item) or pa.types.is_floating(item)):
            raise self.fail(f"{name}() takes a list of strings, numbers or booleans, got {lst.type}")
        delim = self.literal_text(name, args[1], "delimiter")
        null = self.literal_text(name, args[2], "null string") if len(args) == 3 else None
        if delim is None:
            return _const(pa.scalar(None, pa.string()))
        return self.udf("array_to_string", [lst, _const(pa.scalar(delim, pa.string())),
                                            _const(pa.scalar(null, pa.string()))], pa.string())

    fn_string_to_list = fn_string_to_array
    fn_list_to_string = fn_array_join = fn_list_join = fn_array_to_string

    def fn_ceil(self, name: str, args: list[_Node]) -> _C:
        """``ceil(x)`` / ``floor(x)``: float32 stays float32, other numbers become float64."""
        self.arity(name, args, 1)
        c = self.float_arg(name, args[0])
        fn = pc.ceil if name == "ceil" else pc.floor
        return self.fold(fn(c.expr), fn, [c], c.type)

    fn_floor = fn_ceil

    def fn_substr(self, name: str, args: list[_Node]) -> _C:
        """``substr(s, start[, count])`` / ``substring`` (also ``SUBSTRING(s FROM a FOR b)``):
        ``count`` characters from the 1-based ``start``; positions before 1 count toward
        ``count`` (``substr('abc', 0, 2)`` is ``'a'``); a negative count fails the query; a
        ``string_view`` as pylance's."""
        self.arity(name, args, 2, 3)
        arg = self.cast(self.string_arg(name, self.compile(args[0])), pa.string())
        rest = [self.int_arg(name, a, "position" if i == 0 else "count") for i, a in enumerate(args[1:])]
        if any(r.const is not None and not r.const.is_valid for r in rest):
            return _const(pa.scalar(None, pa.string_view()))
        consts: list[int] = [r.const.as_py() for r in rest if r.const is not None]
        if len(consts) == len(rest) and (len(consts) == 1 or consts[1] >= 0):
            # constant bounds: Arrow's character slice (a negative count fails per row, below)
            begin = consts[0] - 1
            first = max(begin, 0)
            stop = None if len(consts) == 1 else max(begin + consts[1], first)

            def fn(v: Any) -> Any:
                return pc.utf8_slice_codeunits(v, start=first, stop=stop).cast(pa.string_view())

            return self.fold(fn(arg.expr), fn, [arg], pa.string_view())
        return self.udf("substr", [arg, *rest], pa.string_view())

    fn_substring = fn_substr

    def fn_cbrt(self, name: str, args: list[_Node]) -> _C:
        """``cbrt`` and the hyperbolic functions, in the argument's float precision."""
        self.arity(name, args, 1)
        c = self.float_arg(name, args[0])
        if name == "cbrt":
            return self.udf("cbrt", [c], c.type)
        t = c.type

        def rust_atanh(v: Any) -> Any:  # Rust's formula, to the last bit: 0.5 * ln_1p(2x / (1 - x))
            one, two, half = (self._lit(k, t, v) for k in (1.0, 2.0, 0.5))
            return pc.multiply(half, pc.log1p(pc.divide(pc.multiply(two, v), pc.subtract(one, v))))

        fn = {"sinh": pc.sinh, "cosh": pc.cosh, "tanh": pc.tanh, "asinh": pc.asinh, "acosh": pc.acosh,
              "atanh": rust_atanh}[name]
        return self.fold(fn(c.expr), fn, [c], t)

    fn_sinh = fn_cosh = fn_tanh = fn_asinh = fn_acosh = fn_atanh = fn_cbrt

    def fn_random(self, name: str, args: list[_Node]) -> _C:
        """``random()``: a float64 in [0, 1) drawn per row (Arrow's nullary ``random``); never
        folded into a constant."""
        self.arity(name, args, 0)
        return _C(pc.Expression._call("random", [], pc.RandomOptions()), pa.float64())

    def fn_uuid(self, name: str, args: list[_Node]) -> _C:
        """``uuid()``: a random (version 4) UUID per row, as text."""
        self.arity(name, args, 0)
        draws = self.fn_random("random", [])
        return self.udf("uuid", [draws], pa.string())

    def fn_pi(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 0)
        return _const(pa.scalar(math.pi, pa.float64()))

    def fn_gcd(self, name: str, args: list[_Node]) -> _C:
        """``gcd(a, b)`` / ``lcm(a, b)`` of integers, as int64 (``gcd`` never negative)."""
        self.arity(name, args, 2)
        a, b = (self.int_arg(name, x, "argument") for x in args)
        return self.udf(name, [a, b], pa.int64())

    fn_lcm = fn_gcd

    def fn_factorial(self, name: str, args: list[_Node]) -> _C:
        self.arity(name, args, 1)
        return self.udf("factorial", [self.int_arg(name, args[0], "argument")], pa.int64())

    def fn_chr(self, name: str, args: list[_Node]) -> _C:
        """``chr(code)``: the character of a Unicode code point (invalid codes fail the query)."""
        self.arity(name, args, 1)
        return self.udf("chr", [self.int_arg(name, args[0], "code point")], pa.string())

    def fn_concat_ws(self, name: str, args: list[_Node]) -> _C:
        """``concat_ws(separator, a, ...)``: the non-NULL arguments as text joined by the
        separator ('' when all are NULL; NULL for a NULL separator). ``string_view`` when every
        argument is a string, as pylance; numbers are written as ``concat`` writes them."""
        if len(args) < 2:
            raise self.fail("concat_ws() needs a separator and at least one value")
        sep = self.compile(args[0])
        if not (_is_string(sep.type) or pa.types.is_null(sep.type)):
            raise self.fail(f"concat_ws() needs a string separator, got {sep.type}")
        parts = [self.compile(a) for a in args[1:]]
        out = pa.string_view() if all(_is_string(p.type) or pa.types.is_null(p.type) for p in parts) else pa.string()
        if pa.types.is_null(sep.type) or (sep.const is not None and not sep.const.is_valid):
            return _const(pa.scalar(None, out))
        texts = [self.cast(self.text_arg(name, p), pa.string()) for p in parts if not pa.types.is_null(p.type)]
        return self.udf("concat_ws", [self.cast(sep, pa.string()), *texts], out)

    _TIMESTAMP_UNITS: ClassVar[dict[str, str]] = {
        "to_timestamp": "ns", "to_timestamp_seconds": "s", "to_timestamp_millis": "ms",
        "to_timestamp_micros": "us", "to_timestamp_nanos": "ns",
    }

    def fn_to_timestamp(self, name: str, args: list[_Node]) -> _C:
        """``to_timestamp(x[, format, ...])`` and ``to_timestamp_seconds`` / ``_millis`` /
        ``_micros`` / ``_nanos``: text (RFC 3339 or ``YYYY-MM-DD[ HH:MM:SS[.f]]``, or the first
        chrono ``format`` that matches), integers (seconds for ``to_timestamp``, else the
        function's unit), floats (seconds) or timestamps, as a timestamp of the function's unit."""
        if not args:
            raise self.fail(f"{name}() needs an argument")
        unit = self._TIMESTAMP_UNITS[name]
        out = pa.timestamp(unit)
        c = self.compile(args[0])
        formats = [self.literal_text(name, a, "format") for a in args[1:]]
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, out))
        if _is_string(c.type):
            fmt = [f for f in formats if f is not None]
            return self.udf(f"to_timestamp_{unit}", [self.cast(c, pa.string()), *(_const(pa.scalar(f)) for f in fmt)], out)
        if formats:
            raise self.fail(f"{name}() takes formats only with a string argument")
        if pa.types.is_integer(c.type):
            source = "s" if name == "to_timestamp" else unit
            return self.cast(_C(self.cast(c, pa.int64()).expr.cast(pa.timestamp(source)), pa.timestamp(source)), out)
        if pa.types.is_floating(c.type) and name == "to_timestamp":
            nanos = pc.multiply(self.cast(c, pa.float64()).expr, pc.scalar(1e9))
            return _C(pc.trunc(nanos).cast(pa.int64()).cast(out), out)
        if pa.types.is_timestamp(c.type):
            return self.cast(c, out) if c.type.tz is None else _C(c.expr.cast(pa.timestamp(unit, c.type.tz), safe=False), pa.timestamp(unit, c.type.tz))
        raise self.fail(f"{name}() does not take {c.type}")

    fn_to_timestamp_seconds = fn_to_timestamp_millis = fn_to_timestamp_micros = fn_to_timestamp_nanos = fn_to_timestamp

    def fn_to_date(self, name: str, args: list[_Node]) -> _C:
        """``to_date(x)``: a date from text (the date part of a timestamp's text), an integer
        (days since 1970-01-01) or a timestamp."""
        self.arity(name, args, 1)
        c = self.compile(args[0])
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.date32()))
        if _is_string(c.type):
            ts = self.udf("to_timestamp_s", [self.cast(c, pa.string())], pa.timestamp("s"))
            return _C(ts.expr.cast(pa.date32()), pa.date32())
        if pa.types.is_integer(c.type):
            return _C(self.cast(c, pa.int32()).expr.cast(pa.date32()), pa.date32())
        if pa.types.is_timestamp(c.type) or pa.types.is_date(c.type):
            return _C(c.expr.cast(pa.date32()), pa.date32())
        raise self.fail(f"to_date() does not take {c.type}")

    def fn_to_unixtime(self, name: str, args: list[_Node]) -> _C:
        """``to_unixtime(x)``: seconds since 1970-01-01 (int64) of a timestamp, date or text."""
        self.arity(name, args, 1)
        c = self.compile(args[0])
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.int64()))
        if _is_string(c.type):
            c = self.udf("to_timestamp_s", [self.cast(c, pa.string())], pa.timestamp("s"))
        if pa.types.is_date(c.type):
            c = _C(c.expr.cast(pa.timestamp("s")), pa.timestamp("s"))
        if not pa.types.is_timestamp(c.type):
            raise self.fail(f"to_unixtime() does not take {c.type}")
        return _C(c.expr.cast(pa.timestamp("s", c.type.tz), safe=False).cast(pa.int64()), pa.int64())

    def fn_from_unixtime(self, name: str, args: list[_Node]) -> _C:
        """``from_unixtime(seconds)``: a ``timestamp[s]``."""
        self.arity(name, args, 1)
        c = self.int_arg(name, args[0], "number of seconds")
        return _C(c.expr.cast(pa.timestamp("s")), pa.timestamp("s"))

    def fn_make_date(self, name: str, args: list[_Node]) -> _C:
        """``make_date(year, month, day)``; an impossible date fails the query."""
        self.arity(name, args, 3)
        parts = [self.cast(self.int_arg(name, a, what), pa.int64()) for a, what in zip(args, ("year", "month", "day"), strict=True)]
        return self.udf("make_date", parts, pa.date32())

    _DATE_PARTS: ClassVar[frozenset[str]] = frozenset([
        "year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond", "microsecond",
        "nanosecond", "dow", "doy", "epoch",
    ])

    def fn_date_part(self, name: str, args: list[_Node]) -> _C:
        """``date_part(part, x)`` / ``datepart`` / ``EXTRACT(part FROM x)`` of a date or timestamp:
        ``year quarter month week`` (ISO) ``day hour minute second dow`` (Sunday 0) ``doy`` as
        int32; ``millisecond`` / ``microsecond`` count the seconds too (``30.123456`` s is 30123
        ms), ``nanosecond`` int64, ``epoch`` float64 seconds."""
        self.arity(name, args, 2)
        part = (self.literal_text(name, args[0], "part") or "").lower()
        part = {"years": "year", "months": "month", "days": "day", "hours": "hour", "minutes": "minute",
                "seconds": "second", "weeks": "week", "quarters": "quarter"}.get(part, part)
        if part not in self._DATE_PARTS:
            raise self.fail(f"{name}(): unsupported part {part!r} (use {', '.join(sorted(self._DATE_PARTS))})")
        c = self.compile(args[1])
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, pa.float64() if part == "epoch" else pa.int32()))
        if pa.types.is_date(c.type):
            c = _C(c.expr.cast(pa.timestamp("s")), pa.timestamp("s"))
        if not pa.types.is_timestamp(c.type):
            raise self.fail(f"{name}() needs a date or a timestamp, got {c.type}")
        x = c.expr
        if part == "epoch":
            per_second = UNIT_PER_SECOND[c.type.unit]
            return _C(pc.divide(x.cast(pa.int64()).cast(pa.float64()), pc.scalar(float(per_second))), pa.float64())
        if part in ("millisecond", "microsecond", "nanosecond"):
            micros = pc.add(pc.multiply(pc.millisecond(x), pc.scalar(1000)), pc.microsecond(x)).cast(pa.int64())
            total = pc.add(pc.multiply(pc.second(x).cast(pa.int64()), pc.scalar(1_000_000)), micros)
            if part == "millisecond":
                return _C(pc.divide(total, pc.scalar(1000)).cast(pa.int32()), pa.int32())
            if part == "microsecond":
                return _C(total.cast(pa.int32()), pa.int32())
            return _C(pc.add(pc.multiply(total, pc.scalar(1000)), pc.nanosecond(x).cast(pa.int64())), pa.int64())
        if part == "dow":
            value = pc.day_of_week(x, count_from_zero=True, week_start=7)
        else:
            value = {"year": pc.year, "quarter": pc.quarter, "month": pc.month, "week": pc.iso_week, "day": pc.day,
                     "hour": pc.hour, "minute": pc.minute, "second": pc.second, "doy": pc.day_of_year}[part](x)
        return _C(value.cast(pa.int32()), pa.int32())

    fn_datepart = fn_extract = fn_date_part

    # -- list functions, row by row (:mod:`lance_gpu.filter_udfs`) -----------------------------

    def list_with_item(self, name: str, lst: _C, value: _C) -> tuple[_C, _C, pa.DataType]:
        """A list and a value as DataFusion coerces them for ``array_append`` and the like: the
        list's items and the value take their common type (a literal ``9`` makes an ``int32``
        list ``int64``; NULL keeps the list's type)."""
        item = lst.type.value_type
        if pa.types.is_null(value.type):
            return lst, _const(pa.scalar(None, item)), item
        common = _comparison_coercion(item, value.type)
        if common is None or _is_string(item) != _is_string(value.type):
            raise self.fail(f"{name}() cannot combine a list of {item} with {value.type}")
        return self.cast(lst, pa.list_(common)), self.cast(value, common), common

    def fn_array_sort(self, name: str, args: list[_Node]) -> _C:
        """``array_sort(list[, 'ASC' | 'DESC'[, 'NULLS FIRST' | 'NULLS LAST']])``: NULLs first
        unless asked otherwise (in either direction), floats in total order."""
        self.arity(name, args, 1, 3)
        lst = self.list_arg(name, args[0])
        order = (self.literal_text(name, args[1], "order") or "ASC").upper() if len(args) > 1 else "ASC"
        nulls = (self.literal_text(name, args[2], "null order") or "NULLS FIRST").upper() if len(args) > 2 else "NULLS FIRST"
        if order not in ("ASC", "DESC") or nulls not in ("NULLS FIRST", "NULLS LAST"):
            raise self.fail(f"{name}(): the order is 'ASC' or 'DESC', the null order 'NULLS FIRST' or 'NULLS LAST'")
        flags = _const(pa.scalar(f"{order} {nulls}"))
        return self.udf("list_sort", [lst, flags], pa.list_(lst.type.value_type))

    fn_list_sort = fn_array_sort

    def fn_array_distinct(self, name: str, args: list[_Node]) -> _C:
        """``array_distinct`` / ``array_reverse`` / ``flatten`` / ``array_pop_back`` /
        ``array_pop_front`` (a list) and ``array_max`` / ``array_min`` / ``array_any_value``
        (an item; NULL for an empty list)."""
        self.arity(name, args, 1)
        lst = self.list_arg(name, args[0])
        kind = name.replace("list_", "array_")
        item = lst.type.value_type
        if kind == "flatten":
            if not _is_list(item):
                return self.cast(lst, pa.list_(item))
            return self.udf("list_flatten", [lst], pa.list_(item.value_type))
        if kind in ("array_max", "array_min", "array_any_value"):
            return self.udf(f"list_{kind[6:]}", [lst], item)
        return self.udf(f"list_{kind[6:]}", [lst], pa.list_(item))

    fn_list_distinct = fn_array_reverse = fn_list_reverse = fn_flatten = fn_array_distinct
    fn_array_max = fn_list_max = fn_array_min = fn_list_min = fn_array_any_value = fn_array_distinct
    fn_list_any_value = fn_array_pop_back = fn_list_pop_back = fn_array_pop_front = fn_list_pop_front = fn_array_distinct

    def fn_array_slice(self, name: str, args: list[_Node]) -> _C:
        """``array_slice(list, begin, end[, stride])``: 1-based and inclusive; negative
        positions count from the end; 0 is the first element."""
        self.arity(name, args, 3, 4)
        lst = self.list_arg(name, args[0])
        bounds = [self.int_arg(name, a, what) for a, what in zip(args[1:], ("begin", "end", "stride"), strict=False)]
        return self.udf("list_slice", [lst, *bounds], pa.list_(lst.type.value_type))

    fn_list_slice = fn_array_slice

    def fn_array_append(self, name: str, args: list[_Node]) -> _C:
        """``array_append(list, x)`` / ``array_prepend(x, list)``: a NULL list becomes ``[x]``."""
        self.arity(name, args, 2)
        prepend = name in ("array_prepend", "list_prepend", "array_push_front")
        lst_node, value_node = (args[1], args[0]) if prepend else (args[0], args[1])
        lst, value, item = self.list_with_item(name, self.list_arg(name, lst_node), self.compile(value_node))
        return self.udf("list_prepend" if prepend else "list_append", [lst, value], pa.list_(item))

    fn_list_append = fn_array_push_back = fn_array_prepend = fn_list_prepend = fn_array_push_front = fn_array_append

    def fn_array_concat(self, name: str, args: list[_Node]) -> _C:
        """``array_concat(a, b, ...)``: NULL lists left out (NULL only where all are)."""
        if not args:
            raise self.fail(f"{name}() needs at least one list")
        lists = [self.list_arg(name, a) for a in args]
        item = lists[0].type.value_type
        for other in lists[1:]:
            common = _comparison_coercion(item, other.type.value_type)
            if common is None or _is_string(item) != _is_string(other.type.value_type):
                raise self.fail(f"{name}() cannot concatenate lists of {item} and {other.type.value_type}")
            item = common
        return self.udf("list_concat", [self.cast(c, pa.list_(item)) for c in lists], pa.list_(item))

    fn_array_cat = fn_list_concat = fn_list_cat = fn_array_concat

    def fn_array_remove(self, name: str, args: list[_Node]) -> _C:
        """``array_remove(list, x)`` (the first ``x``), ``array_remove_all`` (every one),
        ``array_positions(list, x)`` (the 1-based positions of ``x``, uint64)."""
        self.arity(name, args, 2)
        kind = name.replace("list_", "array_")
        lst = self.list_arg(name, args[0])
        if kind == "array_positions":
            value = self.list_item_arg(name, lst, args[1])
            return self.udf("list_positions", [lst, value], pa.list_(pa.uint64()))
        lst, value, item = self.list_with_item(name, lst, self.compile(args[1]))
        return self.udf("list_" + kind[6:], [lst, value], pa.list_(item))

    fn_list_remove = fn_array_remove_all = fn_list_remove_all = fn_array_positions = fn_list_positions = fn_array_remove

    def fn_array_union(self, name: str, args: list[_Node]) -> _C:
        """``array_union(a, b)`` (the distinct elements of both, in order), ``array_intersect``
        (those of ``a`` also in ``b``), ``array_except`` (those of ``a`` not in ``b``); NULL
        where either list is."""
        self.arity(name, args, 2)
        lists = [self.list_arg(name, a) for a in args]
        kind = name.replace("list_", "array_")
        item = lists[0].type.value_type
        common = _comparison_coercion(item, lists[1].type.value_type)
        if common is None or _is_string(item) != _is_string(lists[1].type.value_type):
            raise self.fail(f"{name}() cannot combine lists of {item} and {lists[1].type.value_type}")
        return self.udf("list_" + kind[6:], [self.cast(c, pa.list_(common)) for c in lists], pa.list_(common))

    fn_list_union = fn_array_intersect = fn_list_intersect = fn_array_except = fn_list_except = fn_array_union

    def fn_array_replace(self, name: str, args: list[_Node]) -> _C:
        """``array_replace(list, from, to)`` (the first ``from``), ``array_replace_all``,
        ``array_replace_n(list, from, to, n)``, ``array_remove_n(list, x, n)``."""
        kind = name.replace("list_", "array_")
        self.arity(name, args, 4 if kind == "array_replace_n" else 3)
        lst, old, item = self.list_with_item(name, self.list_arg(name, args[0]), self.compile(args[1]))
        if kind == "array_remove_n":
            return self.udf("list_remove_n", [lst, old, self.int_arg(name, args[2], "count")], pa.list_(item))
        lst, new, item = self.list_with_item(name, lst, self.compile(args[2]))
        count = {"array_replace": _const(pa.scalar(1, pa.int64())), "array_replace_all": _const(pa.scalar(-1, pa.int64()))}
        limit = count[kind] if kind in count else self.int_arg(name, args[3], "count")
        return self.udf("list_replace_n", [lst, self.cast(old, item), new, limit], pa.list_(item))

    fn_list_replace = fn_array_replace_all = fn_list_replace_all = fn_array_replace_n = fn_array_replace
    fn_list_replace_n = fn_array_remove_n = fn_list_remove_n = fn_array_replace

    def fn_array_ndims(self, name: str, args: list[_Node]) -> _C:
        """``array_ndims(list)``: the list's nesting depth (uint64); ``array_dims``: the length
        at each depth (through the first element), NULL for an empty list."""
        self.arity(name, args, 1)
        lst = self.list_arg(name, args[0])
        if name in ("array_dims", "list_dims"):
            return self.udf("list_dims", [lst], pa.list_(pa.uint64()))  # depth from the type
        depth, t = 0, lst.type
        while _is_list(t):
            depth, t = depth + 1, t.value_type
        return _C(pc.if_else(pc.is_valid(lst.expr), pc.scalar(pa.scalar(depth, pa.uint64())),
                             pc.scalar(pa.scalar(None, pa.uint64()))), pa.uint64())

    fn_list_ndims = fn_array_dims = fn_list_dims = fn_array_ndims

    def fn_array_repeat(self, name: str, args: list[_Node]) -> _C:
        """``array_repeat(x, n)``: a list of ``n`` copies of ``x`` (NULL ``x`` repeats NULL)."""
        self.arity(name, args, 2)
        value = self.compile(args[0])
        count = self.int_arg(name, args[1], "count")
        return self.udf("list_repeat", [value, count], pa.list_(value.type))

    fn_list_repeat = fn_array_repeat

    def fn_array_resize(self, name: str, args: list[_Node]) -> _C:
        """``array_resize(list, n[, fill])``: cut to ``n`` elements or padded with ``fill``
        (NULL by default)."""
        self.arity(name, args, 2, 3)
        lst = self.list_arg(name, args[0])
        count = self.int_arg(name, args[1], "size")
        fill_node = args[2] if len(args) == 3 else _Lit(pa.scalar(None, pa.null()))
        lst, fill, item = self.list_with_item(name, lst, self.compile(fill_node))
        return self.udf("list_resize", [lst, count, fill], pa.list_(item))

    fn_list_resize = fn_array_resize

    def fn_regexp_instr(self, name: str, args: list[_Node]) -> _C:
        """``regexp_instr(s, pattern[, start[, n[, flags[, group]]]])``: the 1-based character
        position of the ``n``-th match at or after ``start`` (of its ``group``-th group), 0 when
        there is none; the pattern, flags and numbers are constants."""
        self.arity(name, args, 2, 6)
        arg = self.cast(self.string_arg(name, self.compile(args[0])), pa.string())
        pattern, _flags = self.const_regex(name, args[1], args[4] if len(args) > 4 else None, "ims")
        numbers = {"start": 1, "occurrence": 1, "group": 0}
        for node, what in zip(args[2:], ("start", "occurrence", "flags", "group"), strict=False):
            if what == "flags":
                continue
            c = self.compile(node)
            if c.const is None or not (pa.types.is_integer(c.type) or pa.types.is_null(c.type)):
                raise self.fail(f"{name}() needs a constant integer {what}")
            if c.const.is_valid:
                numbers[what] = c.const.as_py()
        start, occurrence, group = numbers["start"], numbers["occurrence"], numbers["group"]
        if pattern is None:
            return _const(pa.scalar(None, pa.int64()))
        if start < 1 or occurrence < 1:
            raise self.fail(f"{name}(): start and occurrence must be positive")
        spec = _const(pa.scalar(f"{start},{occurrence},{group},{pattern}"))
        return self.udf("regexp_instr", [arg, spec], pa.int64())

    # -- structs, text of times, overlay -----------------------------------------------------

    def fn_named_struct(self, name: str, args: list[_Node]) -> _C:
        """``named_struct('a', x, 'b', y)`` / ``struct(x, y)`` (fields ``c0``, ``c1``, ...)."""
        if name == "named_struct":
            if not args or len(args) % 2:
                raise self.fail("named_struct() takes pairs of a field name and a value")
            names = [self.literal_text(name, n, "field name") for n in args[0::2]]
            if any(n is None for n in names):
                raise self.fail("named_struct(): a field name cannot be NULL")
            values = [self.compile(v) for v in args[1::2]]
        else:
            if not args:
                raise self.fail("struct() needs at least one value")
            names = [f"c{i}" for i in range(len(args))]
            values = [self.compile(v) for v in args]
        values = [self.cast(v, pa.int64()) if pa.types.is_null(v.type) else v for v in values]
        out = pa.struct([pa.field(n, v.type) for n, v in zip(names, values, strict=True)])
        expr = pc.make_struct(*[v.expr for v in values], field_names=names)
        if all(v.const is not None for v in values):
            return _const(pa.scalar({n: v.const.as_py() for n, v in zip(names, values, strict=True)}, out))  # type: ignore[union-attr]
        return _C(expr, out)

    fn_struct = fn_named_struct

    def fn_get_field(self, name: str, args: list[_Node]) -> _C:
        """``get_field(struct, 'name')``."""
        self.arity(name, args, 2)
        field_name = self.literal_text(name, args[1], "field name")
        if field_name is None:
            raise self.fail("get_field() needs a field name")
        return self.struct_field(self.compile(args[0]), field_name)

    def fn_to_char(self, name: str, args: list[_Node]) -> _C:
        """``to_char(x, format)`` / ``date_format``: a date or timestamp as text in a chrono
        ``format`` (``%Y-%m-%d %H:%M:%S``...)."""
        self.arity(name, args, 2)
        c = self.compile(args[0])
        fmt = self.literal_text(name, args[1], "format")
        if pa.types.is_null(c.type) or fmt is None:
            return _const(pa.scalar(None, pa.string()))
        if not _is_temporal(c.type):
            raise self.fail(f"{name}() needs a date or a timestamp, got {c.type}")
        return self.udf("to_char", [c, _const(pa.scalar(fmt))], pa.string())

    fn_date_format = fn_to_char

    def fn_overlay(self, name: str, args: list[_Node]) -> _C:
        """``overlay(s, replacement, position[, count])`` (also ``OVERLAY(s PLACING r FROM p FOR
        n)``): ``count`` characters (default: the replacement's length) from ``position``
        replaced."""
        self.arity(name, args, 3, 4)
        arg = self.cast(self.string_arg(name, self.compile(args[0])), pa.string())
        replacement = self.cast(self.string_arg(name, self.compile(args[1])), pa.string())
        rest = [self.int_arg(name, a, "position" if i == 0 else "count") for i, a in enumerate(args[2:])]
        return self.udf("overlay", [arg, replacement, *rest], pa.string())

    # -- JSON ---------------------------------------------------------------------------

    def json_arg(self, name: str, node: _Node) -> _C:
        c = self.compile(node)
        t = c.type
        if getattr(t, "extension_name", None) in ("arrow.json", "lance.json"):
            storage = t.storage_type
            return _C(c.expr.cast(storage), storage)
        if pa.types.is_large_binary(t):
            # JSONB, as json_get returns it and pylance takes it (bytes that are not JSONB: NULL;
            # pylance refuses ``binary``)
            return c
        if pa.types.is_null(t):
            return _const(pa.scalar(None, pa.large_binary()))
        raise self.fail(f"{name}() needs a JSON column or JSONB (large_binary) as its first argument, got {t}")

    def json_steps(self, node: _Node) -> tuple[_Node, list[str]]:
        """``json_get(json_get(doc, 'a'), 'b')`` as ``(doc, ['a', 'b'])``: a chain of
        ``json_get`` calls with constant keys, which the JSON kernels walk in one pass instead
        of writing and reading back the JSONB in between (same results)."""
        keys: list[str] = []
        while isinstance(node, _Func) and node.name == "json_get" and len(node.args) == 2:
            key = self.compile(node.args[1])
            if key.const is None or not key.const.is_valid or not (_is_string(key.type) or pa.types.is_integer(key.type)):
                break
            keys.append(str(key.const.as_py()))
            node = node.args[0]
        return node, keys[::-1]

    def json_call(self, name: str, args: list[_Node], n_args: int, out: pa.DataType) -> _C:
        self.arity(name, args, n_args)
        root, steps = self.json_steps(args[0])
        doc = self.json_arg(name, root if steps else args[0])
        rest = []
        for i, a in enumerate(args[1:], start=2):  # paths, keys and values: text, per row or constant
            c = self.compile(a)
            if not (_is_string(c.type) or pa.types.is_integer(c.type) or pa.types.is_null(c.type)):
                raise self.fail(f"{name}() needs a string or an integer as argument {i}, got {c.type}")
            if c.const is None:
                rest.append(self.cast(c, pa.string()))
                continue
            text = c.const.as_py()
            rest.append(_const(pa.scalar(None if text is None else str(text), pa.string())))
        if name in ("json_extract", "json_exists", "json_array_length", "json_array_contains"):
            path = rest[0].const.as_py() if rest and rest[0].const is not None else None
            if path is not None:
                try:
                    filter_udfs._parse_path(path)
                except pa.ArrowInvalid as e:
                    raise self.fail(f"{name}(): {e}") from None
        if steps:
            return self.udf(f"{name}_via", [doc, _const(pa.scalar(json.dumps(steps))), *rest], out)
        return self.udf(name, [doc, *rest], out)

    def fn_json_get(self, name: str, args: list[_Node]) -> _C:
        """``json_get(doc, key)``: the member or array element as Lance's binary JSONB."""
        return self.json_call(name, args, 2, pa.large_binary())

    def fn_json_extract(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.string())

    def fn_json_exists(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.bool_())

    def fn_json_array_length(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.int64())

    def fn_json_array_contains(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 3, pa.bool_())

    def fn_json_get_string(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.string())

    def fn_json_get_int(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.int64())

    def fn_json_get_float(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.float64())

    def fn_json_get_bool(self, name: str, args: list[_Node]) -> _C:
        return self.json_call(name, args, 2, pa.bool_())


def _total_compare(op: str, a: float, b: float) -> bool:
    def key(v: float) -> tuple[int, float]:
        return (1, 0.0) if math.isnan(v) else (0, v + 0.0)

    ka, kb = key(a), key(b)
    return {
        "eq": ka == kb, "neq": ka != kb, "lt": ka < kb, "lte": ka <= kb, "gt": ka > kb, "gte": ka >= kb,
    }[op]


# --------------------------------------------------------------------------------------
# Validation and expression inputs
# --------------------------------------------------------------------------------------


def _empty_table(schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([], schema=schema)


def _validate(expr: pc.Expression, schema: pa.Schema, source: str | None, project: bool = False) -> None:
    """Bind ``expr`` to an empty table of ``schema`` so type errors surface at parse time."""
    try:
        if project:
            import pyarrow.dataset as pads

            pads.dataset(_empty_table(schema)).to_table(columns={"value": expr})
        else:
            _empty_table(schema).filter(expr)
    except (pa.ArrowException, TypeError, ValueError) as e:
        where = f"filter {source!r}" if source is not None else f"filter expression {expr}"
        raise FilterError(f"invalid {where}: {_first_line(e)}") from None


def _compile_expression_input(expr: pc.Expression, schema: pa.Schema) -> CompiledFilter:
    _validate(expr, schema, None)
    text = str(expr)
    candidates = [name for name in schema.names if name and name in text]
    columns = []
    for name in candidates:
        reduced = pa.schema([f for f in schema if f.name != name])
        try:
            _empty_table(reduced).filter(expr)
        except (pa.ArrowException, TypeError, ValueError):
            columns.append(name)
    return CompiledFilter(expr, columns, None)
