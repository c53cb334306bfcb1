# SPDX-License-Identifier: Apache-2.0
"""The scan plan: what one read of a dataset version returns, as plain picklable values.

A :class:`ScanPlan` is built once (by ``ds.scanner(...)``, ``ds.take``, a fragment's reads,
the Spark driver) from pylance's scanner arguments, after they are checked the way pylance
checks them (:func:`build_plan`).  It names the dataset (``uri`` + pinned ``version``), the
fragments in scan order and, per fragment, the physical rows to read (``None``: every live
row), the projection, the filter, what is left of ``limit`` / ``offset`` after they were
pushed into the row selections, the virtual columns and the batching options.  Executors
(:mod:`lance_gpu.scan.execute`) run it anywhere the dataset can be opened: in this process,
in a Spark task, in a worker process.

:func:`resolve` turns a plan into a :class:`ResolvedScan` against an open dataset: the
top-level fields to decode, the compiled filter and projection expressions and the result
schema.  Virtual columns: ``_rowid`` (stable row id, or the address), ``_rowaddr``
(``fragment_id << 32 | physical offset``) and ``_rowoffset`` (the row's position among the
live rows of the dataset version), all ``uint64``; the first two may appear in filters too.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu import index, scan
from lance_gpu.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    NegativeArgumentError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from lance_gpu.table.blob_descriptions import blob_kind, description_field
from lance_gpu.table.schema import LanceField

if TYPE_CHECKING:
    from lance_gpu.filter import CompiledExpression, CompiledFilter
    from lance_gpu.scan.nearest_query import NearestQuery
    from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
ROW_OFFSET = "_rowoffset"
VIRTUAL_COLUMNS = (ROW_ID, ROW_ADDR, ROW_OFFSET)
FILTERABLE_VIRTUAL = (ROW_ID, ROW_ADDR)  # pylance refuses _rowoffset in filters
DEFAULT_BATCH_SIZE = 8192
DEFAULT_BATCH_READAHEAD = 16
DEFAULT_FRAGMENT_READAHEAD = 4
_MAX_BATCH_SIZE = 2**32 - 1
# pylance scanner arguments that only tune its engine: accepted and ignored
ENGINE_OPTIONS = frozenset({"prefilter", "fast_search", "use_scalar_index", "batch_size_bytes",
                            "disable_scoring_autoprojection", "scan_stats_callback"})
# pylance scanner arguments for features we do not have: refused unless None
UNSUPPORTED_OPTIONS = frozenset({"full_text_query", "order_by", "blob_handling", "index_segments",
                                 "row_addr_allowlist", "row_addr_blocklist"})


def default_batch_size() -> int:
    """``LANCE_DEFAULT_BATCH_SIZE`` when set (as pylance), else 8192 rows."""
    text = os.environ.get("LANCE_DEFAULT_BATCH_SIZE")
    if text:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value > 0:
            return value
    return DEFAULT_BATCH_SIZE


@dataclass(frozen=True, eq=False)
class ScanPlan:
    """One read of a dataset version (see the module docstring).  Plain values only.

    ``selections[i]`` holds the sorted, unique physical row offsets to read of fragment
    ``fragment_ids[i]``; ``None`` means every live row (every physical row when
    ``include_deleted_rows``).  ``columns`` is ``None`` (every column) or ``(output name,
    SQL expression or None)`` pairs, ``None`` meaning the column (or dotted nested field)
    of that name.  ``limit`` / ``offset`` apply to the rows left after ``filter``; without a
    filter they are already folded into ``selections`` and are ``None`` / 0.
    """

    uri: str
    version: int
    fragment_ids: tuple[int, ...]
    selections: tuple[np.ndarray | None, ...]
    columns: tuple[tuple[str, str | None], ...] | None = None
    filter: str | pc.Expression | None = None
    limit: int | None = None
    offset: int = 0
    with_row_id: bool = False
    with_row_address: bool = False
    include_deleted_rows: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    strict_batch_size: bool = False
    batch_readahead: int = DEFAULT_BATCH_READAHEAD
    fragment_readahead: int = DEFAULT_FRAGMENT_READAHEAD
    scan_in_order: bool = True
    late_materialization: bool | tuple[str, ...] | None = None
    use_stats: bool = True
    io_buffer_size: int | None = None
    device: str = "auto"
    storage_options: tuple[tuple[str, str], ...] = ()  # how the executing process reopens ``uri``
    window_pushed: bool = False  # limit / offset were folded into the selections
    options: Mapping[str, Any] = field(default_factory=dict)
    nearest: NearestQuery | None = None  # exact nearest-neighbour search (lance_gpu.scan.nearest)
    index_queries: tuple[str, ...] = ()  # scalar index queries that narrowed the selections

    def describe(self) -> str:
        """A readable account of what the plan reads (``explain_plan``)."""
        cols = "*" if self.columns is None else ", ".join(n if e is None else f"{e} AS {n}" for n, e in self.columns)
        rows = sum(0 if s is None else int(s.size) for s in self.selections)
        whole = sum(1 for s in self.selections if s is None)
        lines = [
            f"LanceScan: uri={self.uri}, version={self.version}, device={self.device}",
            f"  projection=[{cols}], with_row_id={self.with_row_id}, with_row_address={self.with_row_address}",
            f"  fragments={list(self.fragment_ids)} ({whole} whole, {len(self.selections) - whole} with {rows} selected rows)",
            f"  filter={self.filter if self.filter is not None else 'None'}, limit={self.limit}, offset={self.offset}"
            + (" (limit/offset pushed into the row selections)" if self.window_pushed else ""),
            f"  batch_size={self.batch_size}, strict_batch_size={self.strict_batch_size}, "
            f"batch_readahead={self.batch_readahead}, fragment_readahead={self.fragment_readahead}",
        ]
        lines.extend(f"  ScalarIndexQuery: query={q}" for q in self.index_queries)
        if self.nearest is not None:
            lines.append(self.nearest.describe())
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Argument checks (pylance's refusals) and planning
# --------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        msg = f"argument {name!r}: {type(value).__name__!r} object cannot be interpreted as an integer"
        raise ArgumentTypeError(msg)
    if value < 0 and name == "batch_size":
        raise NegativeArgumentError(f"batch_size must be between 1 and {_MAX_BATCH_SIZE}, got {int(value)}")
    if value < 0 and name == "io_buffer_size":
        raise NegativeArgumentError(f"io_buffer_size must be non-negative, got {int(value)}")
    if value < minimum:
        if name in ("limit", "offset"):
            raise InvalidArgumentError(f"{name.capitalize()} must be non-negative, got {int(value)}")
        if name == "batch_size":
            raise InvalidArgumentError(f"batch_size must be between 1 and {_MAX_BATCH_SIZE}, got {int(value)}")
        if name == "batch_readahead":
            raise InvalidArgumentError(f"batch_readahead must be greater than 0, got {int(value)}")
        word = "non-negative" if minimum == 0 else f"at least {minimum}"
        msg = f"{name} must be {word}, got {int(value)}"
        raise InvalidArgumentError(msg)
    return int(value)


def normalize_columns(columns: Any) -> tuple[tuple[str, str | None], ...] | None:
    """pylance's ``columns``: None, a list of names, or a dict of output name -> SQL."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, (Mapping, Iterable)):
        msg = f"columns must be a list or dict[name, expression], got {type(columns)}"
        raise ArgumentTypeError(msg)
    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    items = list(columns.items()) if isinstance(columns, Mapping) else [(c, None) for c in columns]
    for name, expr in items:
        if not isinstance(name, str):
            msg = f"argument 'columns': {type(name).__name__!r} object is not an instance of 'str'"
            raise ArgumentTypeError(msg)
        if expr is not None and not isinstance(expr, str):
            msg = f"columns[{name!r}] must be a SQL expression string, got {type(expr).__name__}"
            raise ArgumentTypeError(msg)
        if name in seen:
            msg = f"Duplicate column name: {name}"
            raise SchemaMismatchError(msg)
        seen.add(name)
        out.append((name, expr))
    return tuple(out)


def build_plan(
    ds: TableSnapshot,
    *,
    columns: Any = None,
    filter: str | pc.Expression | None = None,  # noqa: A002
    limit: int | None = None,
    offset: int | None = None,
    with_row_id: bool | None = None,
    with_row_address: bool | None = None,
    batch_size: int | None = None,
    batch_readahead: int | None = None,
    fragment_readahead: int | None = None,
    fragments: Iterable[FragmentSnapshot] | None = None,
    scan_in_order: bool | None = None,
    late_materialization: bool | Sequence[str] | None = None,
    use_stats: bool | None = None,
    strict_batch_size: bool | None = None,
    include_deleted_rows: bool | None = None,
    io_buffer_size: int | None = None,
    selections: Mapping[int, np.ndarray | None] | None = None,
    device: str | None = None,
    **options: Any,
) -> ScanPlan:
    """Check pylance's scanner arguments and build the plan (``selections``: fixed physical
    rows per fragment id, for takes; the plan then reads those fragments only).

    Raises :class:`~lance_gpu.errors.InvalidArgumentError` (a ``ValueError``, or a
    ``TypeError`` for a wrongly typed argument) where pylance refuses the argument, and the
    projection / filter errors of :func:`resolve` (checked here, on the caller's side).
    """
    nearest_arg = options.pop("nearest", None)
    for key, value in options.items():
        if key in UNSUPPORTED_OPTIONS:
            if value is not None:
                raise UnsupportedFeatureError(f"scanner argument {key!r} is not supported by lance_gpu yet")
        elif key not in ENGINE_OPTIONS:
            raise ArgumentTypeError(f"scanner() got an unexpected keyword argument {key!r}")
    cols = normalize_columns(columns)
    lim = None if limit is None else _check_int("limit", limit, minimum=0)
    off = 0 if offset is None else _check_int("offset", offset, minimum=0)
    size = default_batch_size() if batch_size is None else _check_int("batch_size", batch_size, minimum=1)
    if size > _MAX_BATCH_SIZE:
        msg = f"batch_size must be between 1 and {_MAX_BATCH_SIZE}, got {size}"
        raise InvalidArgumentError(msg)
    b_ahead = DEFAULT_BATCH_READAHEAD if batch_readahead is None else _check_int("batch_readahead", batch_readahead, minimum=1)
    f_ahead = DEFAULT_FRAGMENT_READAHEAD if fragment_readahead is None else _check_int("fragment_readahead", fragment_readahead, minimum=0)
    if io_buffer_size is not None:
        _check_int("io_buffer_size", io_buffer_size, minimum=0)
    for flag_name, flag in (("with_row_id", with_row_id), ("with_row_address", with_row_address),
                            ("include_deleted_rows", include_deleted_rows), ("strict_batch_size", strict_batch_size),
                            ("scan_in_order", scan_in_order), ("use_stats", use_stats)):
        if flag is not None and not isinstance(flag, (bool, np.bool_)):
            raise ArgumentTypeError(f"argument {flag_name!r}: {type(flag).__name__!r} object is not an instance of 'bool'")
    if include_deleted_rows and not with_row_id:
        raise InvalidArgumentError("include_deleted_rows is set but with_row_id is false")
    if filter is not None and not isinstance(filter, (str, pc.Expression)):
        msg = f"filter must be a SQL string or a pyarrow.compute.Expression, got {type(filter).__name__}"
        raise ArgumentTypeError(msg)

    if selections is not None:
        frag_list = [ds.fragment(i) for i in selections]  # a KeyError for an id not in the version
    elif fragments is not None:
        frag_list = []
        for frag in fragments:
            fid = getattr(frag, "fragment_id", None)
            own = None if fid is None else ds.get_fragment(int(fid))
            if own is None:
                msg = f"fragment {frag!r} is not a fragment of version {ds.version} of {ds.uri}"
                raise InvalidArgumentError(msg)
            frag_list.append(own)
    else:
        frag_list = list(ds.fragments)
    sel: list[np.ndarray | None] = [
        None if selections is None or selections[f.fragment_id] is None else np.asarray(selections[f.fragment_id], np.int64)
        for f in frag_list
    ]

    plan = ScanPlan(
        uri=ds.uri,
        version=ds.version,
        fragment_ids=tuple(f.fragment_id for f in frag_list),
        selections=tuple(sel),
        columns=cols,
        filter=filter,
        limit=lim,
        offset=off,
        with_row_id=bool(with_row_id),
        with_row_address=bool(with_row_address),
        include_deleted_rows=bool(include_deleted_rows),
        batch_size=size,
        strict_batch_size=bool(strict_batch_size),
        batch_readahead=b_ahead,
        fragment_readahead=f_ahead,
        scan_in_order=True if scan_in_order is None else bool(scan_in_order),
        late_materialization=late_materialization if late_materialization is None or isinstance(late_materialization, bool)
        else tuple(late_materialization),
        use_stats=True if use_stats is None else bool(use_stats),
        io_buffer_size=io_buffer_size,
        device=device or "auto",
        storage_options=tuple(sorted(ds.storage_options.items())),
        options=dict(options),
    )
    if nearest_arg is not None:
        if fragments is not None:
            # as pylance: a search runs over the whole version, not over chosen fragments
            raise InvalidArgumentError("nearest: a search is not supported for a fragment scan (fragments=)")

        plan = _replace(plan, nearest=scan.nearest_query.parse_nearest(ds, nearest_arg, options.get("prefilter"), include_deleted_rows))
    resolve(plan, ds)  # projection and filter errors surface now, as in pylance
    # (a search's pre-filter narrows the rows searched; a post-filter must see every row)
    if isinstance(filter, str) and selections is None and (plan.nearest is None or plan.nearest.prefilter) \
            and not include_deleted_rows and options.get("use_scalar_index") is not False:
        plan = _use_scalar_indices(plan, ds, filter, frag_list)
    if filter is None and plan.nearest is None and (lim is not None or off):
        plan = _push_down_window(plan, frag_list)
    return plan


def _use_scalar_indices(plan: ScanPlan, ds: TableSnapshot, filter_text: str, frags: list[FragmentSnapshot]) -> ScanPlan:
    """Narrow the row selections to the rows the version's scalar indices select for the
    filter (:mod:`lance_gpu.index.query`); fragments an index covers and selects no row of
    are dropped, fragments no index covers are read whole."""

    mf = ds.manifest_file
    if mf.index_section is None or not mf.index_section.indices:
        return plan  # (no index: lance_gpu.index is not even loaded)
    found = index.query.index_selections(ds.store, ds.root, mf.manifest, mf.index_section, ds.lance_schema,
                                         virtual_schema(ds), filter_text, frags)
    if found is None:
        return plan
    ids: list[int] = []
    sel: list[np.ndarray | None] = []
    for fid, rows in zip(plan.fragment_ids, plan.selections, strict=True):
        if fid in found.selections:
            rows = found.selections[fid]
            if rows is not None and rows.size == 0:
                continue
        ids.append(fid)
        sel.append(rows)
    return _replace(plan, fragment_ids=tuple(ids), selections=tuple(sel), index_queries=tuple(found.used))


def _push_down_window(plan: ScanPlan, frags: list[FragmentSnapshot]) -> ScanPlan:
    """Fold ``offset`` / ``limit`` (no filter) into the row selections: fragments wholly
    before the offset or after the limit are dropped, edge fragments read a slice."""
    skip = plan.offset
    left = plan.limit
    ids: list[int] = []
    sel: list[np.ndarray | None] = []
    for frag, rows in zip(frags, plan.selections, strict=True):
        if left is not None and left <= 0:
            break
        if rows is None:
            n = frag.physical_rows if plan.include_deleted_rows else frag.live_count()
        else:
            n = int(rows.size)
        if skip >= n:
            skip -= n
            continue
        stop = n if left is None else min(n, skip + left)
        if skip == 0 and stop == n:
            ids.append(frag.fragment_id)
            sel.append(rows)
        else:
            if rows is None:
                live = None if plan.include_deleted_rows else frag.live_rows
                rows = np.arange(frag.physical_rows, dtype=np.int64) if live is None else live.astype(np.int64)
            ids.append(frag.fragment_id)
            sel.append(rows[skip:stop])
        if left is not None:
            left -= stop - skip
        skip = 0
    return _replace(plan, fragment_ids=tuple(ids), selections=tuple(sel), limit=None, offset=0, window_pushed=True)


def _replace(plan: ScanPlan, **changes: Any) -> ScanPlan:
    return replace(plan, **changes)


# --------------------------------------------------------------------------------------------
# Resolution against an open dataset
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class OutputColumn:
    """One result column: a top-level field (``path`` of one name), a nested field (the
    path from the top-level field down), a virtual column, or a SQL expression."""

    name: str
    field: pa.Field
    path: tuple[str, ...] = ()
    virtual: str | None = None
    expression: CompiledExpression | None = None


@dataclass(slots=True)
class ResolvedScan:
    """A plan resolved against a dataset: what to decode and how to shape the result."""

    read_fields: list[LanceField]  # top-level fields to decode, schema order of first use
    arrow_fields: dict[str, pa.Field]
    virtual: set[str]  # virtual columns the filter or the result needs
    filter: CompiledFilter | None
    outputs: list[OutputColumn]
    schema: pa.Schema  # the result schema
    late_materialization: bool | tuple[str, ...] | None = None

    def late_fields(self) -> list[LanceField]:
        """Fields decoded only for the rows that pass the filter (late materialization):
        those the filter does not read -- all of them by default or with True, the listed
        ones with a list, none with False or without a filter."""
        if self.filter is None or self.late_materialization is False:
            return []
        early = set(self.filter.columns)
        late = [f for f in self.read_fields if f.name not in early]
        if isinstance(self.late_materialization, tuple):
            late = [f for f in late if f.name in self.late_materialization]
        return late


#: :func:`read_schema` per dataset object, with the manifest it was built from (an object
#: moved to another version by a commit has another manifest).
_read_schemas: weakref.WeakKeyDictionary[TableSnapshot, tuple[Any, pa.Schema]] = weakref.WeakKeyDictionary()


def read_schema(ds: TableSnapshot) -> pa.Schema:
    """The schema scans read ``ds`` with: the dataset schema, with each blob field typed as
    its descriptors (:func:`~lance_gpu.table.blobs.description_field`), as pylance's
    scanner reports it.  Built once per dataset object and version (every plan resolves with it)."""
    found = _read_schemas.get(ds)
    if found is not None and found[0] is ds.manifest:
        return found[1]
    schema = ds.schema
    for i, (lf, af) in enumerate(zip(ds.lance_schema.fields, schema, strict=True)):
        if blob_kind(lf):
            schema = schema.set(i, description_field(lf, af))
    _read_schemas[ds] = (ds.manifest, schema)
    return schema


def virtual_schema(ds: TableSnapshot, names: Iterable[str] = FILTERABLE_VIRTUAL) -> pa.Schema:
    """The read schema (:func:`read_schema`) plus the given virtual columns (uint64)."""
    schema = read_schema(ds)
    for name in names:
        if name not in schema.names:
            schema = schema.append(pa.field(name, pa.uint64()))
    return schema


def nested_path(ds: TableSnapshot, name: str) -> tuple[str, ...]:
    """The field names from the top-level field down to the one a dotted ``name`` points at."""
    schema = ds.lance_schema
    try:
        path = schema.field(name).path
        chain = [schema.field(path[: i + 1]) for i in range(len(path))]
    except SchemaMismatchError:
        msg = f"No field named {name}. Valid fields are {', '.join(ds.schema.names)}"
        raise SchemaMismatchError(msg) from None
    if any(f.logical_type != "struct" for f in chain[:-1]):
        msg = f"column {name!r}: only fields of structs can be projected by a dotted name"
        raise SchemaMismatchError(msg)
    return tuple(f.name for f in chain)


def resolve(plan: ScanPlan, ds: TableSnapshot) -> ResolvedScan:
    """Resolve ``plan``'s projection and filter against ``ds`` (the plan's version)."""
    # lance_gpu.filter (sqlglot) is imported only by scans with SQL: not on a plain first read
    schema = read_schema(ds)
    top = {f.name: f for f in ds.lance_schema.fields}
    arrow_top = {f.name: f for f in schema}
    needed: list[str] = []
    virtual: set[str] = set()

    def need(name: str) -> None:
        if name in VIRTUAL_COLUMNS:
            virtual.add(name)
        elif name not in needed:
            needed.append(name)

    outputs: list[OutputColumn] = []
    spec = plan.columns if plan.columns is not None else tuple((n, None) for n in schema.names)
    expr_schema = virtual_schema(ds, VIRTUAL_COLUMNS)
    nearest = plan.nearest
    search_columns = () if nearest is None else ("_distance", "query_index")
    for name, sql in spec:
        if sql is None and name in search_columns and name not in top:
            outputs.append(_search_output(name))
        elif sql is not None:
            from lance_gpu.filter import parse_expression

            compiled = parse_expression(sql, expr_schema)
            for c in compiled.columns:
                need(c)
            outputs.append(OutputColumn(name, pa.field(name, compiled.type), expression=compiled))
        elif name in VIRTUAL_COLUMNS:
            need(name)
            outputs.append(OutputColumn(name, pa.field(name, pa.uint64()), virtual=name))
        elif name in top:
            need(name)
            outputs.append(OutputColumn(name, arrow_top[name], path=(name,)))
        else:
            path = nested_path(ds, name)
            af = arrow_top[path[0]]
            for child in path[1:]:
                af = af.type.field(child)
            need(path[0])
            outputs.append(OutputColumn(name, af.with_name(name).with_nullable(True), path=path))
    present = {o.name for o in outputs}
    if nearest is not None:
        # pylance adds _distance unless disable_scoring_autoprojection (then only where named)
        if "_distance" not in present and not plan.options.get("disable_scoring_autoprojection"):
            outputs.append(_search_output("_distance"))
        if not nearest.single and "query_index" not in present:
            outputs.insert(0, _search_output("query_index"))
    for flag, name in ((plan.with_row_id, ROW_ID), (plan.with_row_address, ROW_ADDR)):
        if flag and name not in present:
            need(name)
            outputs.append(OutputColumn(name, pa.field(name, pa.uint64()), virtual=name))
    compiled_filter = None
    if plan.filter is not None:
        from lance_gpu.filter import parse_filter

        filter_schema = virtual_schema(ds)
        if nearest is not None and not nearest.prefilter and "_distance" not in filter_schema.names:
            # a post-filter of a search may read the distance (pylance allows it there only)
            filter_schema = filter_schema.append(pa.field("_distance", pa.float32()))
        compiled_filter = parse_filter(plan.filter, filter_schema)
        for c in compiled_filter.columns:
            if not (nearest is not None and c == "_distance" and c not in top):
                need(c)
    read_fields = [top[n] for n in needed]
    result = pa.schema([o.field for o in outputs], metadata=schema.metadata)
    return ResolvedScan(read_fields, arrow_top, virtual, compiled_filter, outputs, result, plan.late_materialization)


def _search_output(name: str) -> OutputColumn:
    """``_distance`` (float32) or ``query_index`` (int32, not null) of a nearest search."""
    if name == "_distance":
        return OutputColumn(name, pa.field(name, pa.float32()), virtual=name)
    return OutputColumn(name, pa.field(name, pa.int32(), nullable=False), virtual=name)
