# SPDX-License-Identifier: Apache-2.0
"""``ds.sql(query)``: pylance's ``SqlQueryBuilder`` / ``SqlQuery`` for the single-table
queries a scan can answer.

A query is ``SELECT <items> FROM <table> [WHERE <predicate>] [ORDER BY <columns>] [LIMIT n]
[OFFSET m]`` over the dataset, named ``dataset`` unless :meth:`SqlQueryBuilder.table_name`
says otherwise (a query may also leave out ``FROM``).  Items are ``*``, columns and
expressions (``UPPER(value) AS val``), as the scanner's ``columns={name: sql}`` takes them;
the predicate is the scanner's ``filter``; column names may be qualified by the table name.
It runs as one scan, so the results are what ``ds.scanner(...)`` gives.

Not supported (``UnsupportedFeatureError`` naming the construct; pylance runs them through
DataFusion): joins, ``GROUP BY`` / aggregates, ``HAVING``, ``DISTINCT``, window functions,
subqueries and common table expressions, ``ORDER BY`` an expression.  An unaliased
expression is named by its SQL text (``id + 1``), where DataFusion names it its own way
(``dataset.id + Int64(1)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lance_gpu.errors import InvalidArgumentError, UnsupportedFeatureError
from lance_gpu.ops.ordering import ColumnOrdering

__all__ = ["SqlQuery", "SqlQueryBuilder"]


class SqlQuery:
    """A planned query (pylance's ``SqlQuery``): run it with :meth:`to_batch_records` or
    :meth:`to_stream_reader`."""

    def __init__(self, scan: Callable[[], Any]) -> None:
        self._scan = scan

    def to_batch_records(self) -> list[pa.RecordBatch]:
        """The result as a list of record batches."""
        return list(self._scan().to_batches())

    def to_stream_reader(self) -> pa.RecordBatchReader:
        """The result as a ``pyarrow.RecordBatchReader`` (batches decode as it is read)."""
        return self._scan().to_reader()


class SqlQueryBuilder:
    """Options of one ``ds.sql(query)`` (pylance's ``SqlQueryBuilder``).

    Parameters
    ----------
    scanner : callable
        The dataset's ``scanner`` (keyword arguments as ``LanceDataset.scanner``).
    query : str
        The SQL text (see the module docstring).
    """

    def __init__(self, scanner: Callable[..., Any], query: str) -> None:
        if not isinstance(query, str):
            raise InvalidArgumentError(f"sql: the query must be a str, not {type(query).__name__}")
        self._scanner = scanner
        self._query = query
        self._table = "dataset"
        self._options: dict[str, Any] = {}

    def table_name(self, table_name: str) -> SqlQueryBuilder:
        """The name the query's ``FROM`` uses for the dataset (default ``dataset``)."""
        self._table = str(table_name)
        return self

    def with_row_id(self, with_row_id: bool = True) -> SqlQueryBuilder:
        """Add ``_rowid`` to the result."""
        self._options["with_row_id"] = bool(with_row_id)
        return self

    def with_row_addr(self, with_row_addr: bool = True) -> SqlQueryBuilder:
        """Add ``_rowaddr`` to the result."""
        self._options["with_row_address"] = bool(with_row_addr)
        return self

    def batch_size(self, batch_size: int) -> SqlQueryBuilder:
        """Rows per result batch."""
        self._options["batch_size"] = int(batch_size)
        return self

    def build(self) -> SqlQuery:
        """Parse the query and plan it as one scan.

        Raises
        ------
        ValueError
            (``InvalidArgumentError``) for a query that is not one ``SELECT`` or names
            another table.
        NotImplementedError
            (``UnsupportedFeatureError``) for the constructs in the module docstring.
        """
        args = dict(self._options, **_scan_arguments(self._query, self._table))
        return SqlQuery(lambda: self._scanner(**args))


def _scan_arguments(query: str, table: str) -> dict[str, Any]:
    import sqlglot
    from sqlglot import exp

    from lance_gpu.filter import LanceFilterDialect

    class SqlDialect(LanceFilterDialect):
        NULL_ORDERING = "nulls_are_large"  # DataFusion's: ASC puts nulls last, DESC first

    try:
        tree = sqlglot.parse_one(query, dialect=SqlDialect)
    except sqlglot.errors.ParseError as exc:
        raise InvalidArgumentError(f"sql: cannot parse {query!r}: {exc}") from None
    if not isinstance(tree, exp.Select):
        raise UnsupportedFeatureError(f"sql: only SELECT queries are supported, not {tree.key.upper()}")
    for key, what in (("joins", "joins"), ("group", "GROUP BY"), ("having", "HAVING"), ("distinct", "DISTINCT"),
                      ("with", "WITH"), ("windows", "WINDOW")):
        if tree.args.get(key):
            raise UnsupportedFeatureError(f"sql: {what} is not supported by lance-gpu's ds.sql")
    source = tree.args.get("from_") or tree.args.get("from")  # the key sqlglot versions use
    if source is not None:
        if not isinstance(source.this, exp.Table) or source.this.name != table:
            raise InvalidArgumentError(f"sql: table {source.this.sql()!r} not found (the dataset is {table!r})")
    if any(tree.find_all(exp.AggFunc, exp.Window, exp.Subquery)):
        raise UnsupportedFeatureError("sql: aggregates, window functions and subqueries are not supported by "
                                      "lance-gpu's ds.sql")

    def unqualified(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table:
            if node.table != table:
                raise InvalidArgumentError(f"sql: no table {node.table!r} in the query")
            return exp.column(node.name)
        return node

    def text(node: exp.Expression) -> str:
        return node.transform(unqualified).sql(dialect=LanceFilterDialect)

    out: dict[str, Any] = {}
    items = tree.expressions
    if not (len(items) == 1 and isinstance(items[0], exp.Star)):
        columns: dict[str, str] = {}
        for item in items:
            if isinstance(item, exp.Star):
                raise UnsupportedFeatureError("sql: '*' with other items is not supported by lance-gpu's ds.sql")
            if isinstance(item, exp.Alias):
                columns[item.alias] = text(item.this)
            elif isinstance(item, exp.Column):
                columns[item.name] = item.name
            else:
                columns[text(item)] = text(item)
        out["columns"] = columns
    where = tree.args.get("where")
    if where is not None:
        out["filter"] = text(where.this)
    order = tree.args.get("order")
    if order is not None:
        keys = []
        for ordered in order.expressions:
            if not isinstance(ordered.this, exp.Column):
                raise UnsupportedFeatureError(f"sql: ORDER BY {ordered.this.sql()} (an expression) is not supported")
            keys.append(ColumnOrdering(ordered.this.name, ascending=not ordered.args.get("desc"),
                                       nulls_first=bool(ordered.args.get("nulls_first"))))
        out["order_by"] = keys
    for key in ("limit", "offset"):
        node = tree.args.get(key)
        if node is not None:
            value = node.expression if node.expression is not None else node.this
            out[key] = int(value.sql())
    return out
