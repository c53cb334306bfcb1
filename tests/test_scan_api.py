# SPDX-License-Identifier: Apache-2.0
"""pylance's read API, differentially: the same scanner / dataset / fragment call on pylance
and on lance_gpu over the same pylance-written data (appends and deletes), results equal;
bad arguments refused by both, ours with typed errors subclassing pylance's builtin."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.errors import (  # noqa: E402
    ArgumentTypeError,
    FilterError,
    InvalidArgumentError,
    LanceGpuError,
    NegativeArgumentError,
    RowIndexError,
    SchemaMismatchError,
    UnknownDeviceError,
)
from lance_gpu.scan import CpuExecutor, ScanPlan, run_plan  # noqa: E402


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("scan_api") / "ds")
    n = 600
    rng = np.random.default_rng(7)
    table = pa.table({
        "a": pa.array(np.arange(n, dtype=np.int64)),
        "f": pa.array(rng.normal(size=n)),
        "s": pa.array([None if i % 11 == 0 else f"s{i % 37}" for i in range(n)]),
        "st": pa.array([{"p": i, "q": f"q{i}"} for i in range(n)]),
        "l": pa.array([[i, i + 1] if i % 5 else None for i in range(n)], pa.list_(pa.int32())),
    })
    lance.write_dataset(table, path, max_rows_per_file=150)
    extra = table.slice(0, 90)
    extra = extra.set_column(0, "a", pa.array(np.arange(n, n + 90, dtype=np.int64)))
    ds = lance.write_dataset(extra, path, mode="append")
    ds.delete("a % 7 = 3 OR (a >= 300 AND a < 450)")  # one fragment emptied, others holed
    return path


@pytest.fixture(scope="module")
def pair(uri: str):
    return lance.dataset(uri), lance_gpu.dataset(uri, device="cpu")


def _same(ours: pa.Table, ref: pa.Table) -> None:
    assert ours.schema.equals(ref.schema, check_metadata=False), (ours.schema, ref.schema)
    assert ours.num_rows == ref.num_rows
    assert ours.equals(ref), (ours.slice(0, 5), ref.slice(0, 5))


SCANS = [
    {},
    {"columns": ["a", "s"]},
    {"columns": ["st.p", "a"]},
    {"columns": {"b": "a * 2", "nested": "st.q", "up": "upper(s)", "addr": "_rowaddr"}},
    {"columns": ["a", "_rowid", "_rowaddr", "_rowoffset"]},
    {"columns": ["a"], "with_row_id": True},
    {"columns": ["a"], "with_row_address": True},
    {"columns": ["a"], "with_row_id": True, "with_row_address": True},
    {"columns": [], "with_row_id": True},
    {"filter": "a > 100 AND s IS NOT NULL"},
    {"filter": "st.p < 50", "columns": ["a"]},
    {"filter": "_rowaddr >= 4294967296", "columns": ["a"]},
    {"filter": "_rowid < 20", "columns": ["a", "_rowid"]},
    {"limit": 17},
    {"offset": 140, "limit": 30},
    {"offset": 1000},
    {"limit": 0},
    {"filter": "a % 2 = 0", "limit": 25, "offset": 40},
    {"columns": ["a"], "with_row_id": True, "include_deleted_rows": True},
    {"batch_size": 7, "batch_readahead": 2, "fragment_readahead": 1, "scan_in_order": True,
     "late_materialization": True, "use_stats": False, "io_buffer_size": 1 << 20, "columns": ["a", "l"]},
    {"strict_batch_size": True, "batch_size": 33, "columns": ["a"]},
]


@pytest.mark.parametrize("kwargs", SCANS, ids=[str(i) for i in range(len(SCANS))])
def test_scanner_matches_pylance(pair, kwargs) -> None:
    ref, ours = pair
    _same(ours.scanner(**kwargs).to_table(), ref.scanner(**kwargs).to_table())
    table_kwargs = {k: v for k, v in kwargs.items() if k != "strict_batch_size"}  # a scanner/to_batches argument
    _same(ours.to_table(**table_kwargs), ref.to_table(**table_kwargs))
    ours_b = list(ours.to_batches(**kwargs))
    ref_b = list(ref.to_batches(**kwargs))
    if (ours_b or ref_b) and not kwargs.get("include_deleted_rows"):  # pylance's to_batches drops them
        _same(pa.Table.from_batches(ours_b), pa.Table.from_batches(ref_b))


def test_scanner_properties(pair) -> None:
    ref, ours = pair
    args = {"columns": {"x": "a + 1", "s": "s"}, "filter": "a > 10"}
    assert ours.scanner(**args).projected_schema == ref.scanner(**args).projected_schema
    assert ours.scanner().dataset_schema == ref.scanner().dataset_schema
    assert ours.scanner(filter="a > 10").count_rows() == ref.scanner(filter="a > 10").count_rows()
    assert ours.count_rows() == ref.count_rows()
    assert ours.count_rows("s = 's3'") == ref.count_rows("s = 's3'")
    _same(ours.scanner(columns=["a"], filter="a > 50").head(9), ref.scanner(columns=["a"], filter="a > 50").head(9))
    _same(ours.head(12, columns=["a", "st"]), ref.head(12, columns=["a", "st"]))
    _same(ours.scanner(columns=["a"]).to_reader().read_all(), ref.scanner(columns=["a"]).to_reader().read_all())
    text = ours.scanner(columns=["a"], filter="a > 5", limit=3).explain_plan(verbose=True)
    assert "a > 5" in text and "limit=3" in text and "LanceRead: projection=[a]" in text
    with pytest.raises(ValueError):
        ref.scanner(filter="a > 1", limit=3).count_rows()
    with pytest.raises(InvalidArgumentError):
        ours.scanner(filter="a > 1", limit=3).count_rows()


def test_take(pair) -> None:
    ref, ours = pair
    idx = [5, 0, 200, 5, 333, 1]
    _same(ours.take(idx), ref.take(idx))
    _same(ours.take(pa.array(idx), columns=["st.q", "a"]), ref.take(pa.array(idx), columns=["st.q", "a"]))
    _same(ours.take(idx, columns={"twice": "a * 2"}), ref.take(idx, columns={"twice": "a * 2"}))
    _same(ours.take([]), ref.take([]))


def test_default_batch_size_env(pair, monkeypatch) -> None:
    ref, ours = pair
    monkeypatch.setenv("LANCE_DEFAULT_BATCH_SIZE", "40")
    ours_sizes = [b.num_rows for b in ours.to_batches(columns=["a"])]
    ref_sizes = [b.num_rows for b in lance.dataset(ref.uri).to_batches(columns=["a"])]
    assert max(ours_sizes) == max(ref_sizes) == 40
    assert sum(ours_sizes) == sum(ref_sizes)


def test_strict_batches_exact(pair) -> None:
    _ref, ours = pair
    sizes = [b.num_rows for b in ours.to_batches(columns=["a"], batch_size=64, strict_batch_size=True)]
    assert all(s == 64 for s in sizes[:-1]) and 0 < sizes[-1] <= 64
    assert sum(sizes) == ours.count_rows()


def test_streaming_is_ordered_and_lazy(pair) -> None:
    _ref, ours = pair
    it = ours.to_batches(columns=["a"], batch_size=10, batch_readahead=1)
    first = next(it)
    assert first.num_rows == 10
    rest = pa.Table.from_batches([first, *it])
    assert rest.column("a").equals(ours.to_table(columns=["a"]).column("a"))


# -- fragments ----------------------------------------------------------------------------------


def test_fragments(pair) -> None:
    ref, ours = pair
    assert [f.fragment_id for f in ours.get_fragments()] == [f.fragment_id for f in ref.get_fragments()]
    assert ours.get_fragment(999) is None and ref.get_fragment(999) is None
    for rf in ref.get_fragments():
        of = ours.get_fragment(rf.fragment_id)
        assert of.physical_rows == rf.physical_rows
        assert of.num_deletions == rf.num_deletions
        assert of.count_rows() == rf.count_rows()
        assert of.count_rows("a > 200") == rf.count_rows("a > 200")
        assert of.schema == rf.schema
        assert [d.path for d in of.data_files()] == [d.path for d in rf.data_files()]
        assert [d.fields for d in of.data_files()] == [d.fields for d in rf.data_files()]
        rd = rf.deletion_file()
        od = of.deletion_file()
        assert (od is None) == (rd is None)
        if od is not None:
            assert od.path(of.fragment_id) == rd
        _same(of.to_table(), rf.to_table())
        _same(of.to_table(columns=["a"], filter="a % 3 = 0", with_row_id=True),
              rf.to_table(columns=["a"], filter="a % 3 = 0", with_row_id=True))
        _same(of.to_table(columns=["a", "_rowoffset"], offset=3, limit=5),
              rf.to_table(columns=["a", "_rowoffset"], offset=3, limit=5))
        _same(of.head(4), rf.head(4))
        _same(pa.Table.from_batches(list(of.to_batches(batch_size=16)), schema=of.schema),
              pa.Table.from_batches(list(rf.to_batches(batch_size=16)), schema=rf.schema))
        _same(of.scanner(columns=["s"]).to_table(), rf.scanner(columns=["s"]).to_table())
        n = of.count_rows()
        if n:
            idx = [0, n // 2, n - 1]
            _same(of.take(idx), rf.take(idx))
            with pytest.raises(OSError):
                rf.take([n + 3])
            with pytest.raises(RowIndexError, match=str(n + 3)):
                of.take([n + 3])


def test_scanner_over_chosen_fragments(pair) -> None:
    ref, ours = pair
    ids = [f.fragment_id for f in ref.get_fragments()][::-1][:3]
    got = ours.scanner(columns=["a", "_rowoffset"], fragments=[ours.get_fragment(i) for i in ids]).to_table()
    exp = ref.scanner(columns=["a", "_rowoffset"], fragments=[ref.get_fragment(i) for i in ids]).to_table()
    _same(got, exp)


def test_get_fragments_filter_refused(pair) -> None:
    ref, ours = pair
    with pytest.raises(ValueError):
        ref.get_fragments(filter="a > 1")
    with pytest.raises(InvalidArgumentError):
        ours.get_fragments(filter="a > 1")


# -- pickling -----------------------------------------------------------------------------------


def test_pickling(pair) -> None:
    _ref, ours = pair
    ds2 = pickle.loads(pickle.dumps(ours))
    assert ds2.version == ours.version and ds2.device == "cpu"
    frag = ours.get_fragments()[1]
    frag2 = pickle.loads(pickle.dumps(frag))
    _same(frag2.to_table(), frag.to_table())
    sc = ours.scanner(columns={"b": "a - 1"}, filter="a > 20", limit=9, with_row_address=True)
    sc2 = pickle.loads(pickle.dumps(sc))
    _same(sc2.to_table(), sc.to_table())
    plan = pickle.loads(pickle.dumps(sc.plan))
    assert isinstance(plan, ScanPlan)
    _same(pa.concat_tables(run_plan(plan, CpuExecutor())), sc.to_table())


# -- bad arguments: both refuse, ours with a typed error naming the problem --------------------

BAD = [
    ({"limit": -1}, InvalidArgumentError, ValueError, "Limit"),
    ({"offset": -1}, InvalidArgumentError, ValueError, "Offset"),
    ({"batch_size": 0}, InvalidArgumentError, ValueError, "batch_size"),
    ({"batch_size": -2}, NegativeArgumentError, OverflowError, "batch_size"),
    ({"columns": "a"}, ArgumentTypeError, TypeError, "columns"),
    ({"columns": [1]}, ArgumentTypeError, TypeError, "columns"),
    ({"columns": ["a", "a"]}, SchemaMismatchError, ValueError, "Duplicate"),
    ({"columns": ["nope"]}, SchemaMismatchError, ValueError, "nope"),
    ({"columns": {"x": "a +"}}, FilterError, ValueError, "a +"),
    ({"filter": "nope > 1"}, FilterError, ValueError, "nope"),
    ({"filter": "_rowoffset > 1"}, FilterError, ValueError, "_rowoffset"),
    ({"limit": 1.5}, ArgumentTypeError, TypeError, "limit"),
    ({"include_deleted_rows": True}, InvalidArgumentError, ValueError, "with_row_id"),
    ({"batch_readahead": -1}, InvalidArgumentError, ValueError, "batch_readahead"),
    ({"batch_readahead": 0}, InvalidArgumentError, ValueError, "batch_readahead"),
    ({"fragment_readahead": -1}, InvalidArgumentError, ValueError, "fragment_readahead"),
    ({"io_buffer_size": -1}, NegativeArgumentError, OverflowError, "io_buffer_size"),
    ({"with_row_id": "x"}, ArgumentTypeError, TypeError, "with_row_id"),
]


@pytest.mark.parametrize(("kwargs", "ours_type", "builtin", "word"), BAD, ids=[str(b[0]) for b in BAD])
def test_bad_scan_arguments(pair, kwargs, ours_type, builtin, word) -> None:
    ref, ours = pair
    with pytest.raises(builtin):
        ref.to_table(**kwargs)
    with pytest.raises(ours_type, match=word) as info:
        ours.to_table(**kwargs)
    assert isinstance(info.value, builtin) and isinstance(info.value, LanceGpuError)


@pytest.mark.parametrize(("indices", "ours_type", "builtin"), [
    ([1.5], ArgumentTypeError, TypeError),
    (["a"], ArgumentTypeError, TypeError),
    ([-1], NegativeArgumentError, OverflowError),
    ([10_000], RowIndexError, OSError),
])
def test_bad_take_indices(pair, indices, ours_type, builtin) -> None:
    ref, ours = pair
    with pytest.raises(builtin):
        ref.take(indices)
    with pytest.raises(ours_type) as info:
        ours.take(indices)
    assert isinstance(info.value, builtin)
    if ours_type is RowIndexError:
        assert "10000" in str(info.value)


def test_unknown_device_refused_at_open(uri: str) -> None:
    with pytest.raises(UnknownDeviceError, match="tpu"):
        lance_gpu.dataset(uri, device="tpu")
    assert issubclass(UnknownDeviceError, ValueError)


def test_no_private_reaches() -> None:
    """Readers go through the scan package: no gpu/, spark/ or write/ module reaches into
    a dataset's or fragment's private members."""
    import re

    root = Path(lance_gpu.__file__).parent
    pattern = re.compile(r"\b(ds|dataset|frag|fragment|self\._ds|lance_schema)\._[a-z]\w*")
    for pkg in ("gpu", "spark", "write", "scan"):
        for path in (root / pkg).rglob("*.py"):
            hits = [m.group(0) for m in pattern.finditer(path.read_text()) if not m.group(0).startswith("ds._ds")]
            assert not hits, (path, hits)


def test_engine_options_accepted_unknown_refused(pair) -> None:
    ref, ours = pair
    kw = {"prefilter": True, "use_scalar_index": False, "fast_search": False, "columns": ["a"]}
    _same(ours.to_table(**kw), ref.to_table(**kw))
    with pytest.raises(TypeError):
        ref.to_table(no_such_option=1)
    with pytest.raises(ArgumentTypeError, match="no_such_option"):
        ours.to_table(no_such_option=1)


@pytest.mark.parametrize("pooled", [True, False])
def test_streaming_decodes_a_bounded_window_ahead(pair, monkeypatch, pooled) -> None:
    """to_batches decodes ahead of the consumer but only ``batch_readahead`` batches' worth
    (at least one window): after the first batch, most fragments are still untouched.
    Units too small for the pool (``POOL_MIN_ROWS``) are decoded in the consumer's thread
    as it reaches them, a span of small fragments at a time (here spans of two fragments):
    nothing beyond the first span is touched."""
    from lance_gpu.scan import execute

    monkeypatch.setattr(execute, "SPANS", True)  # (the default; pinned here)
    from lance_gpu.table.snapshot import FragmentSnapshot

    if pooled:
        monkeypatch.setattr(execute, "POOL_MIN_ROWS", 0)
    else:
        monkeypatch.setattr(execute, "SPAN_ROWS", 300)  # fragments of 150 rows: two a span
    _ref, ours = pair
    touched: list[int] = []
    real = FragmentSnapshot.read_field
    real_span = execute.read_field_span

    def spy(self, *args, **kwargs):
        touched.append(self.fragment_id)
        return real(self, *args, **kwargs)

    def spy_span(parts, *args, **kwargs):
        touched.extend(f.fragment_id for f, rows in parts if rows is None or rows.size)
        return real_span(parts, *args, **kwargs)

    monkeypatch.setattr(FragmentSnapshot, "read_field", spy)
    monkeypatch.setattr(execute, "read_field_span", spy_span)
    def touched_after_readahead(lowest: int) -> int:
        # Readahead runs in pool threads: wait (bounded) until it has reached ``lowest``
        # fragments, then give it time to overrun its window if it were unbounded.
        deadline = time.monotonic() + 20
        while len(set(touched)) < lowest and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        return len(set(touched))

    it2 = ours.to_batches(columns=["a"], batch_size=10, batch_readahead=1, fragment_readahead=3)
    next(it2)
    if pooled:
        assert 3 <= touched_after_readahead(3) <= 4
    else:
        assert touched_after_readahead(1) == 2
    it2.close()
    touched.clear()
    it = ours.to_batches(columns=["a"], batch_size=10, batch_readahead=1, fragment_readahead=1)
    next(it)
    assert 1 <= touched_after_readahead(1) <= 2 < len(ours.get_fragments())
    rest = list(it)
    assert len(set(touched)) == sum(1 for f in ours.get_fragments() if f.count_rows())
    assert sum(b.num_rows for b in rest) + 10 == ours.count_rows()


@pytest.mark.parametrize(("text", "words", "pylance_refuses"), [
    ("a >", "'>' is missing its right-hand operand", True),
    ("a = 1 AND", "AND is missing", True),
    ("a > 1)", "unbalanced parenthesis", False),  # pylance ignores the trailing text (filter.py)
    ("CASE WHEN a > 1 THEN true ELSE false END", "CASE expressions are not supported", True),
])
def test_filter_errors_in_user_terms(pair, text, words, pylance_refuses) -> None:
    ref, ours = pair
    if pylance_refuses:
        with pytest.raises(ValueError):
            ref.to_table(filter=text)
    with pytest.raises(FilterError, match=words) as info:
        ours.to_table(filter=text)
    assert "sqlglot" not in str(info.value) and "class" not in str(info.value)


def test_scanner_runs_in_a_worker_process(pair) -> None:
    """A scanner shipped to a spawned worker reopens the pinned version and reads the same."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    _ref, ours = pair
    sc = ours.scanner(columns=["a", "_rowaddr"], filter="a % 4 = 1", limit=20)
    frag = ours.get_fragments()[1]
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        remote = pool.submit(sc.to_table).result(timeout=300)
        remote_frag = pool.submit(frag.to_table, ["s"]).result(timeout=300)
    _same(remote, sc.to_table())
    _same(remote_frag, frag.to_table(["s"]))


def test_stable_row_ids_after_compaction(tmp_path: Path) -> None:
    """With stable row ids, ``_rowid`` and ``_rowaddr`` differ after a compaction; both, and
    filters on them, match pylance."""
    path = str(tmp_path / "stable")
    table = pa.table({"a": pa.array(np.arange(400, dtype=np.int64)), "s": pa.array([f"v{i}" for i in range(400)])})
    lance.write_dataset(table, path, max_rows_per_file=100, enable_stable_row_ids=True)
    ds = lance.dataset(path)
    ds.delete("a % 3 = 0")
    ds.optimize.compact_files(target_rows_per_fragment=1000)
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    cols = ["a", "_rowid", "_rowaddr", "_rowoffset"]
    _same(ours.to_table(columns=cols), ref.to_table(columns=cols))
    _same(ours.to_table(columns=["a"], filter="_rowid > 200"), ref.to_table(columns=["a"], filter="_rowid > 200"))
    _same(ours.to_table(columns=["a"], with_row_id=True, limit=9, offset=40),
          ref.to_table(columns=["a"], with_row_id=True, limit=9, offset=40))
    got = ours.to_table(columns=["_rowid", "_rowaddr"])
    assert got.column("_rowid") != got.column("_rowaddr")


@pytest.mark.parametrize("late", [None, True, False, ["s"]])
def test_late_materialization(pair, field_reads, late) -> None:
    """With a selective filter the fields the filter does not read are asked for the
    surviving rows only (unless late_materialization=False); results equal pylance's."""
    ref, ours = pair
    kw = {"columns": ["a", "s", "st", "l"], "filter": "a % 50 = 7", "late_materialization": late}
    _same(ours.to_table(**kw), ref.to_table(**kw))
    decoded: dict[str, int] = {}
    for _fid, name, n in field_reads:
        decoded[name] = decoded.get(name, 0) + n
    matched = ref.count_rows("a % 50 = 7")
    assert decoded["a"] >= ours.count_rows()
    late_names = {"s", "st", "l"} if late in (None, True) else ({"s"} if late == ["s"] else set())
    for name in ("s", "st", "l"):
        if name in late_names:
            assert decoded[name] == matched, (name, decoded)
        else:
            assert decoded[name] >= ours.count_rows(), (name, decoded)


def test_count_rows_with_a_filter_decodes_only_the_filter_columns(pair, field_reads) -> None:
    """``count_rows(filter)`` reads the filter's columns and nothing else, and counts as pylance."""
    ref, ours = pair
    assert ours.count_rows("a > 10") == ref.count_rows("a > 10")
    assert {name for _f, name, _n in field_reads} == {"a"}
    field_reads.clear()
    assert ours.scanner(columns=["f", "s"], filter="a > 10", with_row_id=True).count_rows() == ref.count_rows("a > 10")
    assert {name for _f, name, _n in field_reads} == {"a"}


def _read_metrics(text: str) -> dict[str, int]:
    """``output_rows`` / ``rows_scanned`` / ``fragments_scanned`` of an analyze_plan's LanceRead line."""
    import re

    line = next(x for x in text.splitlines() if x.strip().startswith("LanceRead:"))
    return {k: int(re.search(rf"\b{k}=(\d+)", line).group(1)) for k in ("output_rows", "rows_scanned", "fragments_scanned")}


def test_analyze_plan_counts_as_pylance(tmp_path) -> None:
    """pylance's ``analyze_plan``: the rows the read output and scanned (a scalar index
    narrows the scan), with I/O counters; and a verbose ``explain_plan`` names the fields
    read (the filter's too) as the LanceRead projection."""
    import re

    uri = str(tmp_path / "an.lance")
    lance.write_dataset(pa.table({"a": pa.array(np.arange(100)), "b": pa.array(np.arange(100))}), uri,
                        max_rows_per_file=40)
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    cases = [{}, {"columns": [], "filter": "a < 50", "with_row_id": True}]
    for args in cases:
        assert _read_metrics(ours.scanner(**args).analyze_plan()) == _read_metrics(ref.scanner(**args).analyze_plan())
    text = ours.scanner().analyze_plan()
    assert re.search(r"^\s*LanceRead:.*bytes_read=[1-9]\d*.*iops=[1-9]\d*.*requests=[1-9]\d*.*$", text, re.MULTILINE)
    assert "projection=[a]" in ours.scanner(columns=[], filter="a < 50", with_row_id=True).explain_plan(True)
    ref.create_scalar_index("a", "BTREE")
    ours = lance_gpu.dataset(uri)
    got = _read_metrics(ours.scanner(filter="a = 10").analyze_plan())
    assert got["output_rows"] == 1 and got["rows_scanned"] == 1
    assert _read_metrics(lance.dataset(uri).scanner(filter="a = 10").analyze_plan())["rows_scanned"] == 1


def test_fragment_session_takes_as_pylance(tmp_path) -> None:
    """``LanceFragment.open_session(columns, with_row_address).take(offsets)``."""
    uri = str(tmp_path / "fs.lance")
    lance.write_dataset(pa.table({"a": pa.array(np.arange(100)), "b": pa.array(np.arange(100, 200))}), uri,
                        max_rows_per_file=60)
    lance.dataset(uri).delete("a = 2")
    for fid in (0, 1):
        frags = [m.dataset(uri).get_fragment(fid) for m in (lance, lance_gpu)]
        for columns, addr in ((["a", "b"], False), (["b"], True), (None, True)):
            ref, ours = (f.open_session(columns=columns, with_row_address=addr) for f in frags)
            for offsets in (range(1, 20), [0, 5, 7], [3]):
                assert ours.take(offsets) == ref.take(offsets), (fid, columns, addr, offsets)
