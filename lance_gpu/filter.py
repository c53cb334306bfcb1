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
   logic. Float comparisons follow lance: Arrow's total order (NaN equals NaN and sorts above
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
* pylance ignores text after a complete predicate (``x > 5 )``, ``x > 5 LIMIT 1``); we raise.
* sqlglot drops a unary plus (``x = +5``), which pylance rejects.

Not supported (raise :class:`~lance_gpu.errors.FilterError`): SQL functions other than
``is_valid``, ``lower`` and ``upper``; ``TRY_CAST``; ``LIKE`` with a non-literal pattern (pylance
accepts ``s LIKE other_col``) or an ``ESCAPE`` other than backslash (pylance rejects that too);
date/time arithmetic; decimal arithmetic; casting floats to strings (number formatting differs
from DataFusion's); subqueries, ``CASE``, ``IS [NOT] DISTINCT FROM``, array literals, hex literals,
list indexing, ``_rowid``-style virtual columns.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Tokenizer as _SqlglotTokenizer

from lance_gpu.errors import FilterError

__all__ = ["CompiledFilter", "LanceFilterDialect", "parse_filter"]


# --------------------------------------------------------------------------------------
# Dialect
# --------------------------------------------------------------------------------------


class LanceFilterDialect(Dialect):
    """sqlglot's default dialect with pylance's quoting rules (see the module docstring)."""

    class Tokenizer(_SqlglotTokenizer):
        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        # Only the doubled delimiter escapes ('it''s', "say ""hi"""); backslash is literal.
        STRING_ESCAPES = ["'", '"']


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledFilter:
    """A filter ready to apply to Arrow tables.

    ``expression``: the predicate as a pyarrow compute expression.
    ``columns``: the top-level columns it reads (schema order), which a reader must load.
    ``source``: the SQL text it was parsed from (``None`` for an expression input).
    """

    expression: pc.Expression
    columns: list[str] = field(default_factory=list)
    source: str | None = None

    def apply(self, table: pa.Table) -> pa.Table:
        """Keep the rows for which the predicate is true (false and NULL drop the row)."""
        return table.filter(self.expression)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"CompiledFilter({self.expression!s}, columns={self.columns!r})"


def parse_filter(filter: str | pc.Expression, schema: pa.Schema) -> CompiledFilter:  # noqa: A002
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

    tree = _parse_sql(filter)
    if tree.find(exp.Cast) is not None:
        _check_type_spellings(filter)
    ir = _Builder(schema, filter).build(tree)
    ir = _resolve(ir, filter)
    compiled = _Compiler(filter).compile(ir)
    if compiled.type == pa.null() or not pa.types.is_boolean(compiled.type):
        raise FilterError(f"the filter {filter!r} does not return a boolean (it is {compiled.type})")
    _validate(compiled.expr, schema, filter)
    columns = _collect_columns(ir, schema)
    return CompiledFilter(compiled.expr, columns, filter)


@dataclass(frozen=True)
class CompiledExpression:
    """A SQL value expression (a projection ``columns={"name": "sql"}``) ready to evaluate.

    ``expression``: the pyarrow compute expression; ``type``: its result type;
    ``columns``: the top-level columns it reads; ``source``: the SQL text.
    """

    expression: pc.Expression
    type: pa.DataType
    columns: list[str] = field(default_factory=list)
    source: str | None = None


def parse_expression(text: str, schema: pa.Schema) -> CompiledExpression:
    """Compile a pylance-style SQL value expression (``"a * 2"``, ``"st.p"``, ``"lower(s)"``)
    against ``schema``, with the same parser, name rules, literal typing and coercions as
    :func:`parse_filter`; the result need not be boolean.  Raises :class:`FilterError`."""
    if not isinstance(text, str):
        raise TypeError(f"a projection expression must be SQL text, got {type(text).__name__}")
    if not text.strip():
        raise FilterError("empty projection expression")
    tree = _parse_sql(text)
    if tree.find(exp.Cast) is not None:
        _check_type_spellings(text)
    ir = _Builder(schema, text).build(tree)
    ir = _resolve(ir, text)
    compiled = _Compiler(text).compile(ir)
    expr = compiled.expr
    if compiled.const is not None:
        expr = pc.scalar(compiled.const)
    return CompiledExpression(expr, compiled.type, _collect_columns(ir, schema), text)


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


def _parse_sql(text: str) -> exp.Expression:
    try:
        statements = sqlglot.parse(text, dialect=LanceFilterDialect)
    except sqlglot.errors.SqlglotError as e:
        raise FilterError(f"could not parse filter {text!r}: {_first_line(e)}") from None
    except (RecursionError, ValueError, TypeError) as e:
        raise FilterError(f"could not parse filter {text!r}: {e}") from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise FilterError(f"filter {text!r} must be a single predicate expression")
    tree = statements[0]
    if isinstance(tree, exp.Block):
        raise FilterError(f"filter {text!r} must be a single predicate expression")
    return tree


# The type names pylance's CAST accepts, as spelled. sqlglot maps aliases onto these (BOOL,
# REAL, TEXT, INT8, DOUBLE PRECISION, ...), which pylance rejects, so the spelling is checked.
_CAST_TYPE_NAMES = frozenset(
    "int integer tinyint smallint bigint float double string binary date timestamp datetime "
    "decimal boolean".split()
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
    for before, token in zip(tokens, tokens[1:]):
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
    "NullSafeNEQ": "IS DISTINCT FROM", "NullSafeEQ": "IS NOT DISTINCT FROM", "Select": "a SELECT statement",
    "Subquery": "a subquery", "Star": "'*'", "Array": "an array literal", "Interval": "an INTERVAL",
    "TryCast": "TRY_CAST", "Anonymous": "this function", "Window": "a window function",
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


@dataclass
class _Func(_Node):
    name: str
    args: list[_Node]


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


class _Builder:
    """sqlglot AST → logical tree, resolving column names against the schema."""

    def __init__(self, schema: pa.Schema, source: str) -> None:
        self.schema = schema
        self.source = source

    def unsupported(self, node: exp.Expression, what: str | None = None) -> FilterError:
        try:
            text = node.sql(dialect=LanceFilterDialect)
        except Exception:  # pragma: no cover - sqlglot could not print it
            text = type(node).__name__
        what = what or f"{_construct_name(node)} is"
        return FilterError(f"unsupported filter construct in {self.source!r}: {text!r} ({what} not supported)")

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
                    f"column name {name!r} in filter {self.source!r} is ambiguous "
                    f"(matches {folded}); quote it with backticks"
                )
        shown = names if len(names) <= 20 else names[:20] + ["..."]
        raise FilterError(
            f"no column named {name!r} in filter {self.source!r}; columns are {shown} "
            "(quote names with backticks; double quotes make a string literal, as in pylance)"
        )

    def child(self, col: _Col, name: str) -> _Col:
        if not pa.types.is_struct(col.type):
            raise FilterError(
                f"cannot access field {name!r} of {'.'.join(col.path)!r} in filter "
                f"{self.source!r}: it is {col.type}, not a struct"
            )
        index = col.type.get_field_index(name)
        if index < 0:
            names = [col.type.field(i).name for i in range(col.type.num_fields)]
            raise FilterError(
                f"struct column {'.'.join(col.path)!r} has no field {name!r} "
                f"(filter {self.source!r}); fields are {names}"
            )
        return _Col(col.path + (name,), col.type.field(index).type)

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

    def build(self, node: exp.Expression) -> _Node:  # noqa: C901 - a dispatch table
        b = self.build
        if isinstance(node, exp.Paren):
            return b(node.this)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self.unsupported(node, "'*' is")
            return self.column(node)
        if isinstance(node, exp.Dot):
            base = b(node.this)
            if not isinstance(base, _Col) or not isinstance(node.expression, exp.Identifier):
                raise self.unsupported(node, "this field access is")
            return self.child(base, node.expression.name)
        if isinstance(node, exp.Bracket):
            base = b(node.this)
            keys = node.expressions
            if (
                isinstance(base, _Col)
                and len(keys) == 1
                and isinstance(keys[0], exp.Literal)
                and keys[0].is_string
            ):
                return self.child(base, keys[0].this)
            raise self.unsupported(node, "only struct field access with a string key is")
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
            raise self.unsupported(node, "TRY_CAST is")
        if isinstance(node, exp.Cast):
            return _Cast(b(node.this), self.data_type(node.to, node))
        if isinstance(node, exp.Lower):
            return _Func("lower", [b(node.this)])
        if isinstance(node, exp.Upper):
            return _Func("upper", [b(node.this)])
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "is_valid":
            if len(node.expressions) != 1:
                raise self.unsupported(node, "is_valid takes one argument; this call is")
            return _Func("is_valid", [b(node.expressions[0])])
        if isinstance(node, exp.Case):
            raise self.unsupported(node, "CASE expressions are")
        if isinstance(node, (exp.Func, exp.Anonymous)):
            raise self.unsupported(node, "SQL functions other than is_valid, lower and upper are")
        raise self.unsupported(node)

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
            raise FilterError(f"could not parse filter {self.source!r}: IN needs at least one value")
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
                    f"unsupported timestamp precision {precision} in filter {self.source!r} (use 0, 3, 6 or 9)"
                )
            return pa.timestamp(units[precision])
        if kind == T.DECIMAL:
            if len(params) != 2:
                raise FilterError(f"decimal needs a precision and a scale in filter {self.source!r}: {node.sql()!r}")
            precision, scale = int_param(0), int_param(1)
            try:
                return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
            except (ValueError, pa.ArrowInvalid) as e:
                raise FilterError(f"invalid decimal type in filter {self.source!r}: {e}") from None
        if kind in (T.TIMESTAMPTZ, T.TIMESTAMPLTZ):
            raise FilterError(f"time zones are not supported in timestamp types (filter {self.source!r})")
        raise FilterError(
            f"unsupported data type {dt.sql()!r} in filter {self.source!r}; supported: {_SUPPORTED_TYPES_TEXT}"
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
            try:
                return value.cast(target)
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


def _coerce_expr(node: _Node, target: pa.DataType, col: _Col, source: str) -> _Node:
    if isinstance(node, _Bin):
        left = _coerce_expr(node.left, target, col, source)
        return _Bin(node.op, left, _coerce_expr(node.right, target, col, source))
    if isinstance(node, _Lit):
        coerced = _safe_coerce_scalar(node.value, target)
        if coerced is None:
            raise FilterError(
                f"error resolving filter {source!r}: literal {_show(node.value)} ({node.value.type}) "
                f"cannot be converted to the type of column {'.'.join(col.path)!r} ({target})"
            )
        return _Lit(coerced)
    return node


def _show(value: pa.Scalar) -> str:
    py = value.as_py()
    return repr(py) if py is not None else "NULL"


def _resolve(node: _Node, source: str) -> _Node:
    """Top-level literal coercion, applied through AND/OR only (like lance)."""
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


def _collect_columns(node: _Node, schema: pa.Schema) -> list[str]:
    seen: set[str] = set()

    def walk(n: Any) -> None:
        if isinstance(n, _Col):
            seen.add(n.path[0])
        elif isinstance(n, _Node):
            for name in n.__dataclass_fields__:  # type: ignore[attr-defined]
                walk(getattr(n, name))
        elif isinstance(n, list):
            for item in n:
                walk(item)

    walk(node)
    return [name for name in schema.names if name in seen]


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


def _comparison_coercion(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    t = _numeric_coercion(a, b)
    if t is not None:
        return t
    if _is_string(a) and _is_string(b):
        return pa.large_string() if pa.large_string() in (a, b) else pa.string()
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

_TS_RE = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*"
)
_DATE_RE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*")
_EPOCH = _dt.date(1970, 1, 1)
_UNIT_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _parse_timestamp(text: str, t: pa.DataType) -> pa.Scalar:
    m = _TS_RE.fullmatch(text)
    if not m:
        raise ValueError(f"error parsing timestamp from {text!r}")
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    hour, minute, second = (int(m[i]) if m[i] else 0 for i in (4, 5, 6))
    nanos = int((m[7] or "").ljust(9, "0"))
    days = (_dt.date(year, month, day) - _EPOCH).days
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"error parsing time in {text!r}")
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    offset = m[8]
    if offset and offset not in ("Z", "z"):
        digits = offset[1:].replace(":", "")
        off = int(digits[:2]) * 3600 + (int(digits[2:4]) * 60 if len(digits) > 2 else 0)
        seconds -= off if offset[0] == "+" else -off
    per = _UNIT_PER_SECOND[t.unit]
    ticks = seconds * per + nanos // (10**9 // per)
    return pa.scalar(ticks, t)


def _parse_date(text: str, t: pa.DataType) -> pa.Scalar:
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot cast string {text!r} to a date")
    day = _dt.date(int(m[1]), int(m[2]), int(m[3]))
    return pa.scalar(day, pa.date32()).cast(t)


def _cast_scalar(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    """CAST of a constant with DataFusion's semantics; raises on failure."""
    src = value.type
    if src == target:
        return value
    if not value.is_valid:
        return pa.scalar(None, target)
    if _is_string(src) and pa.types.is_timestamp(target):
        return _parse_timestamp(value.as_py(), target)
    if _is_string(src) and pa.types.is_date(target):
        return _parse_date(value.as_py(), target)
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


def _const(value: pa.Scalar) -> _C:
    return _C(pc.scalar(value), value.type, value)


_NULL_BOOL = pa.scalar(None, pa.bool_())

_COMPARE_FN = {
    "eq": pc.equal,
    "neq": pc.not_equal,
    "lt": pc.less,
    "lte": pc.less_equal,
    "gt": pc.greater,
    "gte": pc.greater_equal,
}
_FLIP = {"eq": "eq", "neq": "neq", "lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte"}
_ARITH_FN = {
    "add": pc.add,  # wrapping, like DataFusion
    "sub": pc.subtract,
    "mul": pc.multiply,
    "div": pc.divide,  # integer division truncates; raises on a zero integer divisor
    "mod": pc.remainder,  # truncated remainder (sign of the dividend)
}
_OP_SQL = {
    "eq": "=", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">=",
    "add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "concat": "||",
    "and": "AND", "or": "OR",
}


class _Compiler:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> FilterError:
        return FilterError(f"{message} (filter {self.source!r})")

    # -- helpers ------------------------------------------------------------------------

    def cast(self, c: _C, target: pa.DataType) -> _C:
        if c.type == target:
            return c
        if pa.types.is_floating(c.type) and _is_string(target):
            raise self.fail(f"casting {c.type} to a string is not supported (its formatting differs from pylance's)")
        if c.const is not None:
            try:
                return _const(_cast_scalar(c.const, target))
            except (pa.ArrowException, ValueError, OverflowError) as e:
                raise self.fail(f"cannot convert {_show(c.const)} ({c.type}) to {target}: {_first_line(e)}") from None
        if pa.types.is_null(c.type):
            return _const(pa.scalar(None, target))
        return _C(_cast_expr(c.expr, c.type, target), target)

    def to_bool(self, c: _C, what: str) -> _C:
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

    def compile(self, node: _Node) -> _C:  # noqa: C901 - a dispatch table
        if isinstance(node, _Col):
            expr = pc.field(*node.path)
            if pa.types.is_dictionary(node.type):  # compare/match the decoded values
                return _C(expr.cast(node.type.value_type), node.type.value_type)
            return _C(expr, node.type)
        if isinstance(node, _Lit):
            return _const(node.value)
        if isinstance(node, _Bin):
            if node.op in ("and", "or"):
                left = self.to_bool(self.compile(node.left), node.op.upper())
                right = self.to_bool(self.compile(node.right), node.op.upper())
                fn = pc.and_kleene if node.op == "and" else pc.or_kleene
                return self.fold(fn(left.expr, right.expr), fn, [left, right], pa.bool_())
            if node.op in _COMPARISONS:
                return self.compare(node.op, self.compile(node.left), self.compile(node.right))
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
        raise self.fail(f"internal error: unknown node {node!r}")  # pragma: no cover

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
        if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            raise self.fail(f"comparing {t} values is not supported")
        left, right = self.cast(left, t), self.cast(right, t)
        fn = _COMPARE_FN[op]
        if not pa.types.is_floating(t):
            return self.fold(fn(left.expr, right.expr), fn, [left, right], pa.bool_())
        return self.float_compare(op, left, right)

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
            if vb != vb:  # comparing with NaN
                result = {
                    "eq": nan_a, "neq": pc.invert(nan_a), "lt": pc.invert(nan_a), "lte": pc.is_valid(a.expr),
                    "gt": pc.scalar(False), "gte": nan_a,
                }[op]
                return _C(pc.if_else(pc.is_valid(a.expr), result, pc.scalar(_NULL_BOOL)), pa.bool_())
            if op in ("gt", "gte"):
                return _C(pc.or_kleene(base, nan_a), pa.bool_())
            return _C(base, pa.bool_())
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
            raise self.fail(f"decimal arithmetic is not supported ({lt} {_OP_SQL[op]} {rt})")
        left, right = self.cast(left, t), self.cast(right, t)
        fn = _ARITH_FN[op]
        return self.fold(fn(left.expr, right.expr), fn, [left, right], t)

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
            return self.fold(pc.invert(c.expr), pc.invert, [c], pa.bool_())
        if op == "neg":
            if pa.types.is_null(c.type):
                return c
            if not (pa.types.is_signed_integer(c.type) or pa.types.is_floating(c.type)):
                raise self.fail(f"negation is not supported for {c.type}")
            return self.fold(pc.negate(c.expr), pc.negate, [c], c.type)
        if op == "is_null":
            return _C(pc.is_null(c.expr), pa.bool_())
        if op == "is_not_null":
            return _C(pc.is_valid(c.expr), pa.bool_())
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
            values = [i.const.as_py() for i in items]
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
        x = self.cast(x, t)
        items = [self.cast(i, t) for i in items]
        if all(i.const is not None for i in items) and not pa.types.is_null(t):
            values = [i.const for i in items if i.const.is_valid]
            has_null = len(values) != len(items)
            py = [v.as_py() for v in values]
            if pa.types.is_floating(t):  # both signs of zero match a zero
                if any(v == 0 for v in py):
                    py += [0.0, -0.0]
            value_set = pa.array(py, t)
            expr = pc.is_in(x.expr, value_set=value_set, skip_nulls=True)
            expr = pc.if_else(pc.is_valid(x.expr), expr, pc.scalar(_NULL_BOOL))
            if has_null:
                expr = pc.or_kleene(expr, pc.scalar(_NULL_BOOL))
            result = _C(expr, pa.bool_())
        else:
            result = None
            for item in items:
                eq = self.compare("eq", x, item)
                result = eq if result is None else _C(pc.or_kleene(result.expr, eq.expr), pa.bool_())
            assert result is not None
        if node.negated:
            return _C(pc.invert(result.expr), pa.bool_())
        return result

    def like(self, node: _Like) -> _C:
        x = self.compile(node.operand)
        pattern = self.compile(node.pattern)
        if not (_is_string(x.type) or pa.types.is_null(x.type)):
            raise self.fail(f"LIKE needs a string operand, got {x.type}")
        if pattern.const is None:
            raise self.fail("LIKE with a non-literal pattern is not supported")
        if not (_is_string(pattern.type) or pa.types.is_null(pattern.type)):
            raise self.fail(f"LIKE needs a string pattern, got {pattern.type}")
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

    def function(self, node: _Func) -> _C:
        (arg,) = [self.compile(a) for a in node.args]
        if node.name == "is_valid":
            return _C(pc.is_valid(arg.expr), pa.bool_())
        if not (_is_string(arg.type) or pa.types.is_null(arg.type)):
            raise self.fail(f"{node.name}() needs a string argument, got {arg.type}")
        if pa.types.is_null(arg.type):
            return _const(pa.scalar(None, pa.string()))
        fn = pc.utf8_lower if node.name == "lower" else pc.utf8_upper
        return self.fold(fn(arg.expr), fn, [arg], arg.type)


def _total_compare(op: str, a: float, b: float) -> bool:
    def key(v: float) -> tuple[int, float]:
        return (1, 0.0) if v != v else (0, v + 0.0)

    ka, kb = key(a), key(b)
    return {
        "eq": ka == kb, "neq": ka != kb, "lt": ka < kb, "lte": ka <= kb, "gt": ka > kb, "gte": ka >= kb,
    }[op]


# --------------------------------------------------------------------------------------
# Validation and expression inputs
# --------------------------------------------------------------------------------------


def _empty_table(schema: pa.Schema) -> pa.Table:
    return pa.Table.from_batches([], schema=schema)


def _validate(expr: pc.Expression, schema: pa.Schema, source: str | None) -> None:
    """Bind ``expr`` to an empty table of ``schema`` so type errors surface at parse time."""
    try:
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
