# SPDX-License-Identifier: Apache-2.0
"""The GPU read planner on the host (no GPU, no simulator): mini-block pages planned in bulk
(chunk tables of all of a leaf's pages parsed together, their work emitted per group of
pages encoded alike) give exactly the work page-by-page planning gives, refuse the same
corrupt metadata, and are what a many-page read takes (issue 25 item 1)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
lance = pytest.importorskip("lance")

import gpu_datasets as gd  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu.errors import CorruptFileError  # noqa: E402
from lance_gpu.file.container import LanceFileReader  # noqa: E402
from lance_gpu.file.encodings.base import DecodeContext  # noqa: E402
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan  # noqa: E402
from lance_gpu.gpu import headers, pagetable, passplan, plan, staging  # noqa: E402
from lance_gpu.gpu.rows import plan_field_rows  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu_plan")


@pytest.fixture(scope="module")
def datasets(root: Path) -> dict[str, str]:
    return {
        "rich21": gd.write_rich(lance, root, "2.1"),
        "rich22": gd.write_rich(lance, root, "2.2"),
        "fsst": gd.write_fsst(lance, root),
        "binary": gd.write_binary(lance, root),
        "many21": gd.write_many_pages(lance, root, "2.1"),
        "many22": gd.write_many_pages(lance, root, "2.2"),
        "runs22": _write(root / "runs22", gd.null_runs_table(), "2.2"),
        "mixed21": gd.write_mixed_list_pages(lance, root, "2.1"),
        "mixed22": gd.write_mixed_list_pages(lance, root, "2.2"),
        "mixedflat21": gd.write_mixed_flat_pages(lance, root, "2.1"),
        "mixedflat22": gd.write_mixed_flat_pages(lance, root, "2.2"),
        "fixdict22": gd.write_fixed_dictionaries(lance, root, "2.2"),
        # (pages of many chunks: a row selection cuts a mixed leaf's mini-block and full-zip pages)
        "mixedcut21": gd.write_mixed_flat_pages(lance, root, "2.1", n=12000, run=1500),
        "mixedcut22": gd.write_mixed_flat_pages(lance, root, "2.2", n=12000, run=1500),
        "dictplain21": gd.write_dictionary_beside_plain_pages(lance, root, "2.1"),
        "dictplain22": gd.write_dictionary_beside_plain_pages(lance, root, "2.2"),
    }


def _write(path: Path, table, version: str) -> str:
    lance.write_dataset(table, str(path), data_storage_version=version)
    return str(path)


def _snapshot(uri):
    """The snapshot of dataset ``uri`` (a path, or ``(name, store)`` on an object store)."""
    return (lance_gpu.dataset(uri) if isinstance(uri, str) else lance_gpu.dataset(uri[0], store=uri[1]))._snapshot


def _leaves(uri, rows: np.ndarray | None = None) -> list[plan.LeafPlan]:
    """Every GPU-planned leaf of every field of every fragment (``rows``: a row selection)."""
    snap = _snapshot(uri)
    leaves = []
    for frag in snap.fragments:
        for f in snap.lance_schema.fields:
            src = frag.field_source(f)
            if src is None:
                continue
            reader = frag.file_reader(src.path)
            af = snap.schema.field(f.name)
            try:
                if rows is None:
                    leaves.extend(plan.plan_field_leaves(reader, af, src.columns))
                else:
                    leaves.extend(plan_field_rows(reader, af, src.columns, rows[rows < frag.physical_rows])[0])
            except plan.Unsupported:
                continue
    return leaves


class _LevelRegions:
    """Level arena positions as ``(leaf, rep / def, level within the leaf)``: list leaves
    whose level counts the device pre-pass reads have their regions allocated after it, so
    their (and later leaves') positions differ from the host parse's, not what lands there."""

    def __init__(self, leaves: list[plan.LeafPlan]) -> None:
        regions = [(leaf.rep_pos, k, 0) for k, leaf in enumerate(leaves) if leaf.has_rep]
        regions += [(leaf.def_pos, k, 1) for k, leaf in enumerate(leaves) if leaf.has_def]
        regions.sort()
        self.starts = np.array([r[0] for r in regions] + [2**62], np.int64)
        self.labels = [(r[1], r[2]) for r in regions]

    def __call__(self, pos: int, unit: int = 1) -> tuple:
        """``pos`` in ``unit``-sized items (2: bytes of u16 levels); -1 stays -1."""
        if pos < 0:
            return (-1,)
        level, rest = divmod(int(pos), unit)
        r = int(np.searchsorted(self.starts, level, side="right")) - 1
        return (*self.labels[r], level - int(self.starts[r]), rest)


def _work(uri: str, rows: np.ndarray | None = None, *, by_unit: bool = False) -> dict[str, object]:
    """The unit's work of a whole read, order-free: each work list's rows sorted, the
    staged layout, fills, FSST tables, checks and remaps (level positions relative to their
    leaf's region: :class:`_LevelRegions`; a full-zip walk's invisible-level table by its
    entries); leaf by leaf (``plan.place_leaf``), or
    ``by_unit`` as a read places a unit (``passplan.place_unit``: a column of many
    fragments as one table)."""
    unit = plan.UnitPlan()
    leaves = _leaves(uri, rows)
    if by_unit:
        passplan.place_unit(unit, leaves)
    else:
        for leaf in leaves:
            plan.place_leaf(unit, leaf)
    # pages whose chunk headers the device parses: the pre-pass's CPU form over the staged bytes
    headers.parse_and_emit_on_host(unit)
    at = _LevelRegions(leaves)
    level = plan._DESTS.index("level")

    invisible = np.concatenate(unit.invisible) if unit.invisible else np.zeros(0, np.bool_)

    def rows_of(name: str, cols: dict) -> list:
        keys = sorted(cols)
        n = len(cols[keys[0]])
        out = []
        for i in range(n):
            row = []
            for c in keys:
                v = int(cols[c][i])
                if (name == "copy_level" and c == "dst") or (name.startswith("rle16") and c == "dst" and int(cols["dest"][i]) == level):
                    row.append(at(v, 2))
                elif (name == "unpack('level', 16)" and c == "dst") or (name == "fullzip" and c in ("rep_dst", "def_dst")):
                    row.append(at(v))
                elif name == "fullzip" and c == "inv":  # a walk's invisible-level table: its entries
                    row.append(tuple(invisible[v : v + int(cols["ninv"][i])].tolist()))
                else:
                    row.append((v,))
            out.append(row)
        return sorted(out)

    out: dict[str, object] = {}
    named = {"copy_fixed": unit.copy_fixed, "copy_level": unit.copy_level, "bits": unit.bits,
             "var_chunks": unit.var_chunks, "fullzip": unit.fullzip}
    named.update({f"copy_index{k}": v for k, v in unit.copy_index.items()})
    named.update({f"unpack{k}": v for k, v in unit.unpack.items()})
    named.update({f"rle{k}": v for k, v in unit.rle.items()})
    named.update({f"dictionary{k}": v for k, v in unit.dictionary.items()})
    for name, lst in named.items():
        out[name] = rows_of(name, lst.arrays()) if len(lst) else []
    out["stage"] = [(it.pos, it.size) for it in unit.stage.items]
    arena = unit.stage.host_bytes()  # each FSST segment's symbol table, read where it was staged
    out["fsst"] = sorted((a, b, n, arena[t : t + fsst_plan.TABLE_BYTES].tobytes()) for a, b, t, n in unit.fsst)
    out["fills"] = (sorted(unit.fill_fixed), sorted((at(d, 2), n, p) for d, n, p in unit.fill_level), sorted(unit.fill_slots))
    out["checks"] = sorted(unit.var_checks + [  # a table leaf's checks, a row each
        (slot, n, utf8, path, column, page)
        for slots, counts, utf8, path, column, pages in unit.var_check_rows
        for slot, n, page in zip(slots.tolist(), counts.tolist(), pages.tolist(), strict=True)
    ])
    out["remap"] = sorted((at(a), b, t.tobytes()) for a, b, t in unit.remap)
    out["sizes"] = (unit.fixed_size, unit.level_size, unit.nslots, dict(unit.index_size))
    return out


def _prepass_matches_the_host_parser(uri, rows: np.ndarray | None = None) -> int:
    """The device pre-pass's CPU form (``headers.parse_on_host`` over a read's staged bytes;
    tests/gpu/sim_pipeline.py runs the kernel against it) against the file layer's host
    parser, the CPU reader's (``miniblock.chunk_table`` of each page alone): per chunk of
    every page the pre-pass parses, its item count, level count and the spans of its level
    sections and value buffers (starts relative to the chunk's).  A page a row selection
    cuts is compared for the chunks it keeps (``plan.ChunkCut``).  Returns the chunks
    compared."""
    import cuda_kernels.chunkheaders as chk
    from lance_gpu.file.v2_1 import miniblock

    unit = plan.UnitPlan()
    for leaf in _leaves(uri, rows):
        plan.place_leaf(unit, leaf)
    if not unit.device_blocks:
        return 0
    table = headers.ChunkTable(unit.device_blocks)
    headers.parse_on_host(table, unit.stage.host_bytes())
    headers.check(table)
    out = table.out
    row = compared = 0
    for block in table.device_blocks:
        for leaf, t in block.parts():
            assert t is not None
            pages = leaf.reader.column(leaf.column).pages
            cut = t.memo.get("cut")
            kept = 0  # chunks of ``cut.keep`` before this row's
            for r in range(len(t)):
                info = pages[int(t.ids[r])]
                bufs = leaf.reader.read_buffers(list(zip(info.buffer_offsets, info.buffer_sizes, strict=True)))
                got = miniblock.chunk_table(t.layouts[int(t.layout[r])].body, bufs, leaf.ctx())
                starts, counts, levels, rep, dfn, vals = got[4], got[6], got[7], got[8], got[9], got[10]
                if cut is not None:
                    keep = cut.keep[kept : kept + counts.size]
                    kept += counts.size
                    starts, counts, levels, rep, dfn, vals = starts[keep], counts[keep], levels[keep], rep[keep], dfn[keep], vals[keep]
                lo, hi = int(table.bounds[row]), int(table.bounds[row + 1])
                assert hi - lo == counts.size, (leaf.path, leaf.column, r)
                assert np.array_equal(table.counts[lo:hi], counts) and np.array_equal(out[lo:hi, chk.OUT_LEVELS], levels)
                spans = [(rep, chk.OUT_REP), (dfn, chk.OUT_DEF)] + [(vals[:, b], chk.OUT_BUF0 + 2 * b) for b in range(min(vals.shape[1], 3))]
                for want, col in spans:
                    size = out[lo:hi, col + 1]
                    assert np.array_equal(size, want[:, 1]), (leaf.path, leaf.column, r, col)
                    some = size > 0
                    assert np.array_equal((out[lo:hi, col] - table.start[lo:hi])[some], (want[:, 0] - starts)[some])
                row += 1
                compared += counts.size
    assert row == table.bounds.size - 1
    return compared


def _mixed_rows_partition_the_leaf(leaves: list[plan.LeafPlan]) -> int:
    """Each leaf of several page kinds (``LeafPlan.mixed``): its table's rows are its
    mini-block, full-zip and constant rows, each once, and its per-row value and level
    counts add up to the leaf's (its constant rows' to their decoded pages').  Returns the
    leaves checked."""
    mixed = [leaf for leaf in leaves if leaf.mixed is not None]
    for leaf in mixed:
        col, n = leaf.mixed.column, len(leaf.table)
        assert np.array_equal(np.sort(np.concatenate([col.mini_at, col.full_zip_at, col.constant_at])), np.arange(n))
        assert leaf.mixed.num_values.size == leaf.mixed.num_levels.size == n
        assert int(leaf.mixed.num_values.sum()) == leaf.num_values and int(leaf.mixed.num_levels.sum()) == leaf.num_levels
        consts = leaf.constant_pages or []
        assert len(consts) == col.constant_at.size
        assert [lp.num_values for lp in consts] == leaf.mixed.num_values[col.constant_at].tolist()
    return len(mixed)


def _work_rows(work: dict[str, object]) -> dict[str, int]:
    """How many rows each work list of :func:`_work` has (not where they read: a store's
    read stages its ranges apart where a mapped file's joins neighbours)."""
    return {k: len(v) for k, v in work.items() if isinstance(v, list) and k != "stage"}


def _ranges_are_page_buffers(src, rows: np.ndarray | None, ranges: list[tuple]) -> None:
    """Every range read from the store straight into the slabs (``ranges``: ``(key, offset,
    size)``) lies in one buffer of a page of the read's leaves (chunks, full-zip data or
    repetition index); of a whole read, it is that buffer."""
    bufs: dict[str, list[tuple[int, int]]] = {}
    for leaf in _leaves(src, rows):
        for info in leaf.reader.column(leaf.column).pages:
            bufs.setdefault(leaf.reader.key, []).extend(zip(map(int, info.buffer_offsets), map(int, info.buffer_sizes), strict=True))
    for key, o, z in set(ranges):
        inside = [(bo, bz) for bo, bz in bufs[key] if bo <= o and o + z <= bo + bz]
        assert inside, (key, o, z)
        if rows is None:
            assert (o, z) in inside, (key, o, z)


@pytest.mark.parametrize("name", ["many21", "many22", "rich22", "rich21"])
def test_a_leaf_whose_pages_all_go_to_the_device_is_one_block(datasets, name, monkeypatch):
    """A leaf whose pages are all planned for the device pre-pass is planned as a table of
    its pages (``LeafPlan.table``) and placed as one :class:`plan.DeviceBlock` over its rows
    (its pages' chunk buffers staged by ``add_file_buffers``, neighbours as one range),
    with the same work from the array branch (``DEVICE_BLOCK_MIN_PAGES`` 1) and the scalar
    loop (past any leaf).  Every such leaf, whatever its page count; the pre-pass's parse
    of every block row equals the host parser's (:func:`_prepass_matches_the_host_parser`)."""
    uri = datasets[name]
    leaves = _leaves(uri)
    unit = plan.UnitPlan()
    for leaf in leaves:
        plan.place_leaf(unit, leaf)
    table_leaves = [leaf for leaf in leaves if leaf.table is not None and leaf.table.layouts[0].kind == "mini_block_layout"]
    assert table_leaves, "no leaf was planned as a table"
    assert any(leaf.levels_pending for leaf in table_leaves)  # a list leaf (levels settled after the pre-pass)
    blocks = {id(b.leaf): b for b in unit.device_blocks}
    for leaf in table_leaves:
        block = blocks[id(leaf)]
        assert block.rows is leaf.table and len(block.data_pos) == len(leaf.table)
    together = _work(uri)
    for threshold in (1, 10**9):
        monkeypatch.setattr(plan, "DEVICE_BLOCK_MIN_PAGES", threshold)
        assert _work(uri) == together, threshold
    assert _prepass_matches_the_host_parser(uri) > 0


def test_many_small_fragments_stage_one_range_per_file(root, monkeypatch):
    """One page per leaf, 12 files: the chunk buffers of a file's leaves lie side by side
    (their chunk metadata between them) and are staged as one range per file (without
    joins: one per page)."""
    uri = str(root / "small_frags")
    lance.write_dataset(gd.rich_table(12 * 40, seed=4), uri, data_storage_version="2.1", max_rows_per_file=40)
    leaves = _leaves(uri)
    unit = plan.UnitPlan()
    for leaf in leaves:
        plan.place_leaf(unit, leaf)
    files = {leaf.path for leaf in leaves}
    assert len(files) == 12
    starts = np.array([it.pos for it in unit.stage.items])
    per_file: dict[str, set[int]] = {}
    for b in unit.device_blocks:
        for pos in np.asarray(b.data_pos).tolist():  # the item holding each page's chunks
            per_file.setdefault(b.leaf.path, set()).add(int(np.searchsorted(starts, pos, side="right")) - 1)
    assert all(len(items) == 1 for items in per_file.values()), per_file
    monkeypatch.setattr(staging, "STAGE_GAP", -1)  # no buffer joins another
    apart = plan.UnitPlan()
    for leaf in leaves:
        plan.place_leaf(apart, leaf)
    assert len(apart.stage.items) >= len(unit.stage.items) + len(unit.device_blocks) - len(files)


def _fragments(root: Path, name: str, nfrags: int, rows: int = 40, version: str = "2.1") -> str:
    """``gd.rich_table`` as ``nfrags`` fragments of ``rows`` rows (one page per leaf)."""
    uri = root / f"{name}_{nfrags}"
    if not uri.exists():
        lance.write_dataset(gd.rich_table(nfrags * rows, seed=4), str(uri), data_storage_version=version, max_rows_per_file=rows)
    return str(uri)


@pytest.mark.parametrize("name", ["frags21", "frags22", "rich21", "rich22", "fsst", "many21", "many22", "runs22", "fixdict22"])
def test_a_units_fragments_place_a_column_as_one_table(datasets, root, name, monkeypatch):
    """A unit places the same column of its fragments as one pass table
    (``passplan.place_unit``: one device block over every fragment's rows) with the work,
    regions and staged ranges of leaf-by-leaf placement (``plan.place_leaf`` in unit
    order), whatever the page count (both staging branches), from two leaves a pass and at
    the default threshold, and with pass tables off."""
    uri = _fragments(root, name, 12, version=name[-2] + "." + name[-1]) if name.startswith("frags") else datasets[name]
    monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
    leaves = _leaves(uri)
    unit = plan.UnitPlan()
    passplan.place_unit(unit, leaves)
    passes = [b for b in unit.device_blocks if b.leaves is not None]
    if name.startswith("frags"):
        assert passes, "no column placed as one table"
        assert all(len(b.leaves) >= 6 and b.npages == int(b.leaf_rows[-1]) for b in passes)
        assert len({b.leaf.column for b in passes}) == len(passes)  # one block per column
    by_leaf = _work(uri)
    assert _work(uri, by_unit=True) == by_leaf
    monkeypatch.setattr(plan, "DEVICE_BLOCK_MIN_PAGES", 1)
    assert _work(uri, by_unit=True) == _work(uri)
    monkeypatch.undo()  # the default threshold
    assert _work(uri, by_unit=True) == by_leaf
    monkeypatch.setattr(passplan, "PASS_TABLES", False)
    assert _work(uri, by_unit=True) == _work(uri)


def test_fsst_strings_of_many_fragments_place_as_one_table(root, monkeypatch):
    """FSST-compressed string pages (mini-block chunks; full-zip long strings) of three
    fragments as pass tables: every fragment's symbol tables staged and its FSST segments
    emitted, the work of leaf-by-leaf placement."""
    import pyarrow as pa

    uri = root / "fsst_frags"
    if not uri.exists():
        n = 3 * 1300
        rng = np.random.default_rng(5)
        vals = [" ".join(gd.FSST_WORDS[j] for j in rng.integers(0, 8, 5)) + f" {i}" for i in range(n)]
        long = [v * 40 for v in vals]  # long strings: full-zip pages
        lance.write_dataset(pa.table({"text": pa.array(vals, mask=rng.random(n) < 0.05), "long": pa.array(long)}), str(uri),
                            data_storage_version="2.2", max_rows_per_file=1300)
    monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
    leaves = _leaves(str(uri))
    unit = plan.UnitPlan()
    passplan.place_unit(unit, leaves)
    assert [len(b.leaves) for b in unit.device_blocks if b.leaves is not None] == [3]
    headers.parse_and_emit_on_host(unit)
    assert unit.fsst, "no FSST segment"
    assert {leaf.path for leaf in leaves if id(leaf) in unit.fsst_rows} == {leaf.path for leaf in leaves}
    assert _work(str(uri), by_unit=True) == _work(str(uri))


def test_pass_tables_do_not_grow_per_fragment(root, monkeypatch):
    """4 and 32 fragments of the same columns: the same number of pass blocks (one per
    mini-block column, list columns too), no leaf of a table of mini-block or full-zip
    pages placed on its own
    (``plan._place_table_leaf``, ``plan._place_fullzip_table``), and the device pre-pass's
    chunk table made from one block per such column."""
    placed_alone: list[plan.LeafPlan] = []
    for name in ("_place_table_leaf", "_place_fullzip_table"):
        real = getattr(plan, name)

        def spy(unit, leaf, t, real=real):
            placed_alone.append(leaf)
            return real(unit, leaf, t)

        monkeypatch.setattr(plan, name, spy)
    monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
    counts = []
    for nfrags in (4, 32):
        leaves = _leaves(_fragments(root, "grow", nfrags))
        placed_alone.clear()
        unit = plan.UnitPlan()
        passplan.place_unit(unit, leaves)
        keys = [passplan.pass_key(leaf) for leaf in leaves]
        mini = [leaf for leaf, key in zip(leaves, keys, strict=True) if key is not None and key[0] == "mini_block_layout"]
        full_zip = [leaf for leaf, key in zip(leaves, keys, strict=True) if key is not None and key[0] == "full_zip_layout"]
        assert len(mini) >= 4 * nfrags and len(full_zip) >= nfrags
        assert not placed_alone  # (list leaves too: a pass of their own, settled after the pre-pass)
        passes = [b for b in unit.device_blocks if b.leaves is not None]
        assert sorted(id(leaf) for b in passes for leaf in b.leaves) == sorted(map(id, mini))
        counts.append(len(passes))
        headers.parse_and_emit_on_host(unit)  # the chunk table of the pass blocks (and of the list leaves)
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize("name", ["mixed21", "mixed22"])
def test_list_leaves_with_full_zip_or_constant_pages_go_to_the_device(datasets, name, monkeypatch):
    """List leaves whose pages pylance writes as mini-block pages beside full-zip pages (long
    strings) or constant pages (all-null or one repeated list): planned as tables of their
    pages split by kind (``LeafPlan.mixed``), their mini-block pages planned for
    the device pre-pass (no chunk parsed on the host), the leaf's levels wait for it, and
    the pre-pass's parse of their chunks equals the host parser's; whole and for a row
    selection (tests/gpu/sim_pipeline.py:
    test_list_leaves_with_full_zip_or_constant_pages_match_pylance decodes them)."""
    from lance_gpu.file.v2_1 import miniblock

    uri = datasets[name]
    leaves = _leaves(uri)
    mixed = [leaf for leaf in leaves if leaf.mixed is not None]
    kinds = {f.kind for leaf in mixed for f in leaf.table.layouts}
    assert {"mini_block_layout", "full_zip_layout", "constant_layout"} <= kinds, kinds  # pylance wrote the mix
    assert all(leaf.levels_pending for leaf in mixed if leaf.has_rep)
    host_parses = []
    for fn in ("chunk_headers", "chunk_table", "chunk_tables_mapped"):
        real = getattr(miniblock, fn)
        monkeypatch.setattr(miniblock, fn, lambda *a, _real=real, _fn=fn, **k: host_parses.append(_fn) or _real(*a, **k))
    assert _work(uri)["var_chunks"] or _work(uri)["copy_fixed"]
    assert not host_parses, host_parses
    monkeypatch.undo()
    rows = np.unique(np.random.default_rng(6).integers(0, lance.dataset(uri).count_rows(), 50))
    assert _prepass_matches_the_host_parser(uri) > 0 and _prepass_matches_the_host_parser(uri, rows) > 0


@pytest.mark.parametrize("name", ["mixed21", "mixed22", "mixedflat21", "mixedflat22"])
def test_leaves_of_several_page_kinds_plan_as_tables(datasets, name, monkeypatch):
    """Leaves whose pages are of several kinds (mini-block pages beside full-zip or constant
    ones; lists, and flat strings / integers whose levels are known while planning) are
    tables split by kind, each row once, their counts the leaf's
    (:func:`_mixed_rows_partition_the_leaf`), and a row selection of every row plans the work of the whole read (the decoded
    columns: tests/gpu/sim_pipeline.py, test_flat_leaves_of_several_page_kinds_match_pylance
    and test_list_leaves_with_full_zip_or_constant_pages_match_pylance)."""
    uri = datasets[name]
    mixed = [leaf for leaf in _leaves(uri) if leaf.mixed is not None]
    assert mixed
    assert {leaf.levels_pending for leaf in mixed} == ({True} if name.startswith("mixed2") else {False})
    if name.startswith("mixedflat"):
        assert {leaf.kind for leaf in mixed} == {"var", "fixed"}
        assert {f.kind for leaf in mixed for f in leaf.table.layouts} == {"mini_block_layout", "full_zip_layout", "constant_layout"}
    pages, _lines = _traced_plan(uri)
    assert pages >= 4 * len(mixed)
    assert _mixed_rows_partition_the_leaf(_leaves(uri)) == len(mixed)
    assert _work(uri, np.arange(lance.dataset(uri).count_rows())) == _work(uri)


def _memory_copy(local: str, prefix: str):
    """An obstore memory:// store holding a copy of dataset ``local`` as ``ds`` (data files
    read by ranges, as large files on object stores are: their buffers are requests)."""
    import obstore.store

    from lance_gpu.io import ObstoreStore

    store = ObstoreStore(obstore.store.MemoryStore(), f"memory://{prefix}", whole_object_below=0)
    for path in Path(local).rglob("*"):
        if path.is_file():
            store.put(f"ds/{path.relative_to(local).as_posix()}", path.read_bytes())
    return store


@pytest.mark.parametrize("name", ["rich22", "many21", "mixed21", "mixedflat22", "fixdict22", "mixedcut22"])
def test_object_store_leaves_plan_as_tables(datasets, name, monkeypatch):
    """On an object store (memory://, ranged reads), leaves are planned as tables of their
    pages too: their chunks, full-zip data and repetition indexes staged straight from the
    store into the slabs (each range one page buffer, or within one for a row selection),
    the work of the local (memory-mapped) copy's read but for where it is staged, their
    chunk metadata, dictionaries and constant pages read on the host (the decoded columns:
    tests/gpu/sim_pipeline.py, test_memory_store_every_page_kind_lands_in_the_slabs)."""
    pytest.importorskip("obstore")
    from lance_gpu.file import container
    from lance_gpu.gpu import staging

    monkeypatch.setattr(container, "TAIL_READ", 4096)  # (pages not read with the file's tail, as in large files)
    src = ("ds", _memory_copy(datasets[name], name))
    leaves = _leaves(src)
    assert leaves and all(leaf.table is not None for leaf in leaves)
    assert leaves[0].reader.mapped is None
    _traced_plan(src)
    ranges: list[tuple] = []
    real = staging.Stager.add_range
    monkeypatch.setattr(staging.Stager, "add_range", lambda self, st, key, o, z, **kw: ranges.append((key, o, z)) or real(self, st, key, o, z, **kw))

    def direct() -> tuple[dict[str, object], dict[str, int]]:
        unit = plan.UnitPlan()
        for leaf in _leaves(src):
            plan.place_leaf(unit, leaf)
        return _work(src), unit.direct_pages

    tables = direct()
    _ranges_are_page_buffers(src, None, ranges)
    assert ranges and tables[1].get("mini_block_layout", 0) > 0
    ranges[:] = []
    rows = np.unique(np.random.default_rng(3).integers(0, lance.dataset(datasets[name]).count_rows(), 60))
    selected = _work(src, rows)  # a row selection: cut chunks read from the store into the slabs
    assert ranges
    _ranges_are_page_buffers(src, rows, ranges)
    local = _work(datasets[name], rows)  # (the same work rows, staged elsewhere in the arena)
    assert _work_rows(selected) == _work_rows(local)
    assert selected["sizes"] == local["sizes"]


def _full_zip_rows(leaf: plan.LeafPlan) -> pagetable.LeafPages | None:
    """The table of a table leaf's full-zip pages (its own, or a mixed leaf's full-zip rows)."""
    if leaf.mixed is not None:
        return leaf.mixed.column.full_zip
    return leaf.table if leaf.table.layouts[0].kind == "full_zip_layout" else None


@pytest.mark.parametrize("name", ["rich21", "rich22", "many21", "many22", "runs22", "mixed21", "mixedflat22", "fixdict22", "fsst",
                                  "mixedcut21", "mixedcut22"])
def test_row_selections_plan_as_tables(datasets, name, monkeypatch):
    """A row selection's pages are planned as a table of them: pages it does not cut whole,
    mini-block pages it cuts to their chunks (``plan.ChunkCut``, over the table at once),
    full-zip pages to row runs (``plan.RowRuns``: long strings and embeddings of rich21 /
    rich22), and both in a leaf of several page kinds (mixedflat22), for selections of a
    few rows, of a run and of many rows: the kept chunks' headers parsed by the pre-pass as
    the host parser parses them, the decoded extent no more than the whole read's, and the
    extent of a selection of every row the whole read's (the decoded rows:
    tests/gpu/sim_pipeline.py, test_selections_cutting_leaves_of_several_page_kinds_match_pylance
    and test_gpu_take_decodes_only_the_chunks_and_rows_it_selects; object stores:
    test_object_store_leaves_plan_as_tables)."""
    from lance_gpu.gpu.rows import extent

    uri = datasets[name]
    rng = np.random.default_rng(7)
    n = lance.dataset(uri).count_rows()
    selections = [np.unique(rng.integers(0, n, 25)), np.arange(n // 3, n // 3 + 700), np.unique(rng.integers(0, n, 400))]
    cut = runs = mixed_both = 0
    whole = extent(_leaves(uri))
    assert extent(_leaves(uri, np.arange(n))) == whole
    for rows in selections:
        leaves = _leaves(uri, rows)
        tables = [leaf for leaf in leaves if leaf.table is not None]
        assert tables and len(tables) == len(leaves)
        cut += sum("cut" in t.memo for t in map(plan.miniblock_rows, tables) if t is not None)
        runs += sum("runs" in t.memo for t in map(_full_zip_rows, tables) if t is not None)
        mixed_both += sum(leaf.mixed is not None and "cut" in leaf.mixed.column.mini.memo and "runs" in leaf.mixed.column.full_zip.memo
                          for leaf in tables if leaf.mixed is not None and leaf.mixed.column.full_zip is not None
                          and leaf.mixed.column.mini is not None)
        got = extent(leaves)
        assert all(got[k] <= whole[k] for k in got) and got["rows"] >= rows.size, (name, got, whole)
        _prepass_matches_the_host_parser(uri, rows)
        _mixed_rows_partition_the_leaf(leaves)
    assert (cut > 0) == (name in ("many21", "many22", "runs22", "mixedflat22", "fsst", "mixedcut21", "mixedcut22")), (name, cut)
    assert (runs > 0) == (name in ("rich21", "rich22", "mixedflat22", "mixedcut21", "mixedcut22")), (name, runs)
    if name.startswith("mixedcut"):  # a leaf of several kinds with its mini-block and full-zip pages both cut
        assert mixed_both, name


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_row_selections_cut_full_zip_pages_as_tables(root, version, monkeypatch):
    """Full-zip pages a row selection cuts (nullable long FSST strings: control words and a
    repetition index; nullable and plain embeddings: fixed width with and without control
    words; twelve pages a column; long strings with an all-null page: a leaf of several
    page kinds) are planned as a table of the selected pages, the cut ones to row runs
    (``plan.RowRuns``), for selections of a few rows, a run that keeps whole pages beside a
    cut one, and many rows; with the default staging gap and a small one (many spans a
    page: more staged items, the same work rows); on a memory:// copy, each range read from
    the store into the slabs within one page buffer, and the local copy's work rows (the
    decoded rows: tests/gpu/sim_pipeline.py, test_full_zip_pages_cut_by_a_selection_match_pylance)."""
    from lance_gpu.file import container
    from lance_gpu.gpu.rows import extent

    uri = gd.write_full_zip_pages(lance, root, version)
    n = 3000
    rng = np.random.default_rng(11)
    selections = [np.unique(rng.integers(0, n, 25)), np.arange(1000, 1700), np.unique(rng.integers(0, n, 400)),
                  np.array([249, 250, 2999])]
    by_gap: dict[int, list] = {}
    for gap in (plan.FULLZIP_STAGE_GAP, 512):
        monkeypatch.setattr(plan, "FULLZIP_STAGE_GAP", gap)
        for rows in selections:
            leaves = _leaves(uri, rows)
            assert all(leaf.table is not None for leaf in leaves)
            cut = [(leaf, t) for leaf in leaves if (t := _full_zip_rows(leaf)) is not None and "runs" in t.memo]
            assert {leaf.kind for leaf, _t in cut} == {"var", "fixed"}
            assert any(leaf.mixed is not None for leaf, _t in cut)  # (``gap``: an all-null page between full-zip ones)
            assert any(len(t) > int(np.unique(t.memo["runs"].row).size) for _leaf, t in cut) or rows.size != 700
            got = _work(uri, rows)
            by_gap.setdefault(gap, []).append(({k: v for k, v in got.items() if k not in ("stage", "fullzip")},
                                               len(got["fullzip"]), len(got["stage"]), extent(leaves)))
    for (work, walks, staged, ext), (work2, walks2, staged2, ext2) in zip(*by_gap.values(), strict=True):
        # (a small gap stages a cut page's spans as more items, moving what follows in the arena)
        assert walks == walks2 and ext == ext2 and staged <= staged2 and work["sizes"] == work2["sizes"]
    pytest.importorskip("obstore")
    from lance_gpu.gpu import staging

    monkeypatch.setattr(container, "TAIL_READ", 4096)
    src = ("ds", _memory_copy(uri, f"fz{version}"))
    ranges: list[tuple] = []
    real = staging.Stager.add_range
    monkeypatch.setattr(staging.Stager, "add_range", lambda self, st, key, o, z, **kw: ranges.append((key, o, z)) or real(self, st, key, o, z, **kw))
    for rows in selections:
        leaves = _leaves(src, rows)
        assert leaves[0].reader.mapped is None and any("runs" in leaf.table.memo for leaf in leaves)
        ranges[:] = []
        got = _work(src, rows)
        assert ranges
        _ranges_are_page_buffers(src, rows, ranges)
        local = _work(uri, rows)
        assert _work_rows(got) == _work_rows(local)
        assert got["sizes"] == local["sizes"]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("column", [1, 4])
def test_cut_full_zip_pages_refuse_a_corrupt_index(tmp_path, version, column, monkeypatch):
    """A full-zip page of long strings (``long``; ``gap``: a leaf of several page kinds)
    whose repetition index's last entry points past its data buffer: a selection of its
    last row is refused by the table of cut pages (``CorruptFileError`` naming the file), as
    the CPU reader refuses it; a selection not reading that entry is not."""
    src = gd.write_full_zip_pages(lance, tmp_path, version)

    def past_the_end(index: bytes) -> bytes:
        raw = bytearray(index)
        width = len(raw) // 251  # (250 rows a page: 251 offsets)
        raw[-width:] = (2 ** (8 * width) - 1).to_bytes(width, "little")
        return bytes(raw)

    uri = _corrupt_copy(src, tmp_path / "bad_index", column, 1, past_the_end)
    rows = np.array([3, 249, 1100])  # (1100: in ``gap``'s all-null page)
    assert any(leaf.mixed is not None for leaf in _leaves(uri, rows) if leaf.column == column) == (column == 4)
    with pytest.raises(CorruptFileError, match="full-zip rows point outside the page") as got:
        _work(uri, rows)
    assert "bad_index" in str(got.value)
    assert _work(uri, np.array([3, 248, 1100]))["fullzip"]
    with pytest.raises(CorruptFileError):
        lance_gpu.dataset(uri, device="cpu").take(rows.tolist())


@pytest.mark.parametrize("name", ["dictplain21", "dictplain22"])
def test_dictionary_pages_beside_other_kinds_plan_as_tables(datasets, name, monkeypatch):
    """Leaves whose mini-block pages are partly dictionary pages (strings and lists of
    strings with runs of few values, beside all-null constant pages; integers, 2.2; short
    strings' dictionary pages beside long strings' full-zip pages) are tables: the
    dictionaries staged together (or a lone one before its page's chunks), one block of
    mini-block rows whose dictionary rows name their index scratch and whose chunk headers
    the pre-pass parses as the host parser does; whole, for row selections and on a
    memory:// copy (each range read from the store a page buffer, or within one; the local
    copy's work rows).  The decoded columns: tests/gpu/sim_pipeline.py,
    test_dictionary_pages_beside_other_kinds_match_pylance."""
    from lance_gpu.file import container
    from lance_gpu.gpu import staging
    from lance_gpu.gpu.rows import extent

    uri = datasets[name]
    leaves = _leaves(uri)
    assert all(leaf.table is not None for leaf in leaves)
    partly = [leaf for leaf in leaves if (t := plan.miniblock_rows(leaf)) is not None
              and (rows := plan.dictionary_rows(t)) is not None and (rows.size < len(t) or leaf.mixed is not None)]
    assert {leaf.mixed is not None for leaf in partly} == ({True, False} if name.endswith("22") else {True})
    assert any(leaf.levels_pending for leaf in partly) and any(leaf.mixed is not None and leaf.mixed.column.full_zip is not None
                                                               for leaf in partly)
    got = _work(uri)
    assert any(rows for key, rows in got.items() if key.startswith("dictionary"))
    n = lance.dataset(uri).count_rows()
    selections = [np.unique(np.random.default_rng(5).integers(0, n, 40)), np.arange(1200, 2600)]
    whole = extent(leaves)
    assert _prepass_matches_the_host_parser(uri) > 0 and _mixed_rows_partition_the_leaf(leaves)
    for rows in selections:
        assert _prepass_matches_the_host_parser(uri, rows) > 0
        part = extent(_leaves(uri, rows))
        assert all(part[k] <= whole[k] for k in part)
    pytest.importorskip("obstore")
    monkeypatch.setattr(container, "TAIL_READ", 4096)
    src = ("ds", _memory_copy(uri, name))
    ranges: list[tuple] = []
    real = staging.Stager.add_range
    monkeypatch.setattr(staging.Stager, "add_range", lambda self, st, key, o, z, **kw: ranges.append((key, o, z)) or real(self, st, key, o, z, **kw))
    for rows in (None, selections[0]):
        work = _work(src, rows)
        assert ranges
        _ranges_are_page_buffers(src, rows, ranges)
        ranges[:] = []
        local = _work(uri, rows)
        assert _work_rows(work) == _work_rows(local)
        assert work["sizes"] == local["sizes"]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize(("column", "nth"), [(0, 0), (1, 1)])
def test_dictionary_pages_beside_other_kinds_refuse_a_corrupt_dictionary(tmp_path, version, column, nth, monkeypatch):
    """A corrupt dictionary buffer (its first bytes overwritten) of a dictionary page beside
    plain pages -- the lone one of ``s`` (staged alone, before its chunks), the second of
    ``li`` (staged with the others) -- is refused by the planner (a ``CorruptFileError``
    naming the file) as by the CPU reader."""
    src = gd.write_dictionary_beside_plain_pages(lance, tmp_path, version)
    dst = tmp_path / "bad_dictionary"
    shutil.copytree(src, dst)
    path = next(Path(dst, "data").glob("*.lance"))
    reader = LanceFileReader(path)
    cp = pagetable.column_pages(reader.column(column), DecodeContext(str(path), column))
    info = [pg for pg, j in zip(cp.pages, cp.index, strict=True) if cp.layouts[j].dictionary][nth]
    raw = bytearray(path.read_bytes())
    at = int(info.buffer_offsets[2])
    raw[at : at + 8] = b"\xff" * 8
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError) as got:
        _work(str(dst))
    assert str(path) in str(got.value) or path.name in str(got.value)
    with pytest.raises(CorruptFileError):
        lance_gpu.dataset(str(dst)).to_table(device="cpu")


def test_every_leaf_is_a_table_of_its_pages(datasets):
    """Every leaf of every field of this module's pylance datasets (flat, list, full-zip,
    FSST, dictionary, constant and mixed-kind pages; 2.1 and 2.2) is planned on the GPU as
    a table of its pages (no field falls back to the CPU reader), whole or for a selection
    of random rows, and its work is planned."""
    rng = np.random.default_rng(21)
    for name, uri in datasets.items():
        snap = _snapshot(uri)
        fields = sum(frag.field_source(f) is not None for frag in snap.fragments for f in snap.lance_schema.fields)
        rows = np.unique(rng.integers(0, lance.dataset(uri).count_rows(), 50))
        for sel in (None, rows):
            leaves = _leaves(uri, sel)
            assert all(leaf.table is not None for leaf in leaves), name
            assert len({(leaf.path, leaf.column) for leaf in leaves}) >= fields, name  # (no field left out: Unsupported)
            assert _work(uri, sel)["stage"], name


def test_leaves_pass_tables_cannot_place_are_placed_alone(root, monkeypatch):
    """A unit of three fragments (pass tables from two leaves) whose leaves a pass table
    cannot place: a column of pages of several kinds in every fragment (``LeafPlan.mixed``),
    a row selection cutting mini-block chunks of every fragment (``memo["cut"]``) and leaves
    on an object store (memory://, not mapped): ``passplan.pass_key`` gives them no group,
    and the unit plans the work of leaf by leaf, beside the pass tables of the columns a
    pass does take."""
    pytest.importorskip("obstore")
    import pyarrow as pa

    from lance_gpu.file import container

    def write(name: str, tbl: pa.Table, rows: int, batch: int, page: int, cache: int) -> str:
        uri = root / name
        if not uri.exists():
            reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=batch))
            lance.write_dataset(reader, str(uri), data_storage_version="2.2", max_rows_per_file=rows, max_rows_per_group=batch,
                                max_page_bytes=page, data_cache_bytes=cache)
        return str(uri)

    mixed = write("pass_mixed", gd.mixed_flat_pages_table(3000, run=250), 1000, 250, 8192, 4 * 8192)
    many = write("pass_many", gd.many_pages_table(2400, seed=12), 800, 200, 2048, 8 * 2048)
    monkeypatch.setattr(container, "TAIL_READ", 4096)  # (the memory:// copy's pages not read with its tail)
    store = ("ds", _memory_copy(mixed, "pass_mixed"))
    selection = np.unique(np.random.default_rng(11).integers(0, 800, 40))
    monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
    for src, rows, alone in ((mixed, None, lambda leaf: leaf.mixed is not None),
                             (many, selection, lambda leaf: leaf.table is not None and "cut" in leaf.table.memo),
                             (store, None, lambda leaf: leaf.table is not None)):
        leaves = _leaves(src, rows)
        odd = [leaf for leaf in leaves if alone(leaf)]
        assert len({leaf.path for leaf in odd}) == 3, src  # in every fragment
        assert all(passplan.pass_key(leaf) is None for leaf in odd)
        unit = plan.UnitPlan()
        passplan.place_unit(unit, leaves)
        placed = {id(leaf) for b in unit.device_blocks if b.leaves is not None for leaf in b.leaves}
        assert not placed & set(map(id, odd))
        assert bool(placed) == (src is not store), src  # (a selection's uncut tables in passes too; on the store none)
        assert _work(src, rows, by_unit=True) == _work(src, rows), src


def test_mapped_buffers_are_views_of_the_map(datasets):
    """Table leaves stage their buffers as views of ``LanceFileReader.mapped`` at the pages'
    file offsets (``Stager.add_file_buffers``): a mapped file's buffers are views of its map there."""
    path = next(Path(datasets["many22"], "data").glob("*.lance"))
    reader = LanceFileReader(path)
    whole = reader.mapped
    assert whole is not None
    pages = reader.column(1).pages
    ranges = [(int(o), int(s)) for p in pages for o, s in zip(p.buffer_offsets, p.buffer_sizes, strict=True)]
    for (offset, size), buf in zip(ranges, reader.read_buffers(ranges), strict=True):
        assert buf.size == size
        if size:
            assert buf.__array_interface__["data"][0] == whole.__array_interface__["data"][0] + offset


def _corrupt_copy(src: str, dst: Path, column: int, buffer: int, edit) -> str:
    """A copy of the dataset whose first page of ``column`` with two chunks or more (or the
    first page, where there is none) has ``edit(bytes)`` applied to its buffer ``buffer``."""
    shutil.copytree(src, dst)
    path = next(Path(dst, "data").glob("*.lance"))
    pages = LanceFileReader(path).column(column).pages
    info = next((p for p in pages if int(p.buffer_sizes[0]) >= 4), pages[0])
    offset, size = int(info.buffer_offsets[buffer]), int(info.buffer_sizes[buffer])
    raw = bytearray(path.read_bytes())
    raw[offset : offset + size] = edit(bytes(raw[offset : offset + size]))
    path.write_bytes(bytes(raw))
    return str(dst)


def _all_chunks_full(meta: bytes) -> bytes:
    """Every chunk metadata word (u16: a 2.1 file) claims 2^15 values: more than the page holds."""
    words = np.frombuffer(meta, np.uint16).copy()
    words |= 0xF
    return words.tobytes()


def _bad_width(data: bytes) -> bytes:
    """The first bit width word of an InlineBitpacking chunk: wider than its word."""
    chunk = bytearray(data)
    # u16 num_levels | u16 def bytes | u16 buffer size | pad to 8 | def levels (pad 8) | values
    def_bytes = int.from_bytes(chunk[2:4], "little")
    at = 8 + (def_bytes + 7) // 8 * 8
    chunk[at : at + 4] = (1 << 30).to_bytes(4, "little")
    return bytes(chunk)


def _chunk_edit(name: str, at: int, value: int, nbytes: int, doc: str):
    """An edit of a page's chunk bytes: ``value`` written (``nbytes`` little-endian) at byte
    ``at`` of the first chunk (``name`` names the corrupt copy)."""

    def edit(data: bytes) -> bytes:
        chunk = bytearray(data)
        chunk[at : at + nbytes] = value.to_bytes(nbytes, "little")
        return bytes(chunk)

    edit.__name__ = name
    edit.__doc__ = doc
    return edit


# u16 num_levels | u16 def bytes | u16 buffer size | pad to 8 | def levels: u16 width, packed words
_bad_level_width = _chunk_edit("_bad_level_width", 8, 17, 2, "The first chunk's first InlineBitpacking def level width: 17.")
# u16 num_levels | u16 rep bytes | u16 def bytes | u16 buffer size | rep levels: u16 width, packed words
_bad_rep_width = _chunk_edit("_bad_rep_width", 8, 17, 2, "A list page's first chunk: its first rep level width 17.")
_huge_rep_section = _chunk_edit("_huge_rep_section", 2, 0xFFF0, 2, "A list page's first chunk: its rep section far past the chunk.")
# u16 num_levels | u16 def bytes | u16 buffer size | pad to 8 | def levels: u64 value bytes, values, run lengths
_bad_rle_levels = _chunk_edit("_bad_rle_levels", 8, 3, 8, "The first chunk's Rle def levels: an odd value byte count.")
# u16 num_levels | u16 buffer size (no levels: a 2.1 int64 column)
_huge_buffer = _chunk_edit("_huge_buffer", 2, 0xFFF0, 2, "The first chunk's value buffer size far past the chunk.")


@pytest.mark.parametrize("name", ["rich21", "rich22", "fsst", "binary", "many21", "many22", "runs22", "mixed21", "mixed22", "fixdict22"])
def test_device_parsed_chunk_headers_equal_the_host_parser(datasets, name):
    """Chunk headers parsed by the device pre-pass (``cuda_kernels.chunkheaders``, its CPU
    form here; tests/gpu/sim_pipeline.py runs the kernel) give, chunk by chunk, the item and
    level counts and the level / value spans the file layer's host parser (the CPU
    reader's) gives, for whole reads and row selections (their kept chunks)."""
    uri = datasets[name]
    rows = np.unique(np.random.default_rng(5).integers(0, 1600, 40))
    assert _prepass_matches_the_host_parser(uri) > 0, "no page took the device pre-pass"
    _prepass_matches_the_host_parser(uri, rows)


@pytest.mark.parametrize(("name", "column", "buffer", "edit", "message"), [
    ("many21", 6, 0, _all_chunks_full, "does not add up"),
    ("many22", 1, 1, _bad_width, "inline bit-packed chunk is malformed"),
    ("many22", 1, 1, _bad_level_width, "inline bit-packed chunk is malformed"),
    ("rich21", 13, 1, _bad_rep_width, "inline bit-packed chunk is malformed"),
    ("rich22", 13, 1, _huge_rep_section, "points past its chunk"),
    ("runs22", 0, 1, _bad_rle_levels, "RLE level buffer sections out of range"),
    ("many21", 0, 1, _huge_buffer, "points past its chunk"),
], ids=["chunk-metadata", "bit-width", "level-bit-width", "list-rep-width", "list-rep-section", "rle-def-levels", "chunk-header"])
def test_corrupt_chunks_are_refused_as_the_cpu_reader_refuses_them(datasets, root, monkeypatch, name, column, buffer, edit, message):
    """Corrupt chunk metadata (counts beyond the page), corrupt bit widths (values,
    definition levels, a list page's repetition levels) and chunk headers pointing past
    their chunk (a flat page's value buffer, a list page's repetition levels): the same
    CorruptFileError, naming the file, from the device pre-pass's parse (leaf by leaf, and
    a unit's columns as pass tables); the CPU reader and pylance refuse each too."""
    uri = _corrupt_copy(datasets[name], root / f"corrupt_{name}_{column}_{buffer}_{edit.__name__}", column, buffer, edit)
    errors = []
    with pytest.raises(CorruptFileError) as exc:
        _work(uri)
    errors.append(str(exc.value))
    assert str(Path(uri).name) in errors[0] or "corrupt_" in errors[0]
    monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
    with pytest.raises(CorruptFileError) as exc:  # a unit's fragments' columns as pass tables
        _work(uri, by_unit=True)
    errors.append(str(exc.value))
    assert len(set(errors)) == 1 and message in errors[0], errors
    with pytest.raises(CorruptFileError):
        lance_gpu.dataset(uri).to_table(device="cpu")
    with pytest.raises(ValueError):  # pylance refuses too (ArrowInvalid); CorruptFileError is a ValueError
        lance.dataset(uri).to_table()


def test_random_list_layouts_parse_on_the_device_as_on_the_host(root, monkeypatch):
    """Property: random list-heavy tables (lists of ints, strings, booleans nested 1-3 deep,
    a list of structs, a struct of a list, null and empty lists and null items at random densities, page and chunk boundaries from
    small pages and batches, 1-4 fragments, 2.1 / 2.2): every leaf is a table, the device
    pre-pass's CPU form parses every list page's chunks as the file layer's host parser
    does, and a list leaf of mini-block pages waits for its in-band level counts (the
    decoded columns: tests/gpu/sim_pipeline.py, test_random_list_layouts_match_pylance_and_the_cpu)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 10**6), n=st.integers(1, 400), depth=st.integers(1, 3), null_p=st.sampled_from([0.0, 0.3, 1.0]),
           empty_p=st.sampled_from([0.0, 0.4]), frags=st.integers(1, 4), page_bytes=st.sampled_from([None, 1024, 4096]),
           batch=st.sampled_from([7, 64]), version=st.sampled_from(["2.1", "2.2"]))
    def check(seed, n, depth, null_p, empty_p, frags, page_bytes, batch, version) -> None:
        uri = str(root / f"lists_{seed}_{n}_{depth}_{int(10 * null_p)}_{int(10 * empty_p)}_{frags}_{page_bytes}_{batch}_{version}")
        shutil.rmtree(uri, ignore_errors=True)
        table = gd.list_table(n, seed=seed, depth=depth, null_p=null_p, empty_p=empty_p)
        gd.write_lists(lance, uri, table, version, rows_per_file=max(1, -(-n // frags)), page_bytes=page_bytes, batch=batch)
        leaves = _leaves(uri)
        assert all(leaf.table is not None for leaf in leaves)
        _prepass_matches_the_host_parser(uri)
        _work(uri)
        assert all(leaf.levels_pending for leaf in leaves
                   if any(f.has_rep and f.kind == "mini_block_layout" for f in leaf.table.layouts))

    check()


# -- page tables (lance_gpu.gpu.pagetable) ---------------------------------------------


def _column_infos(uri: str) -> list[tuple[LanceFileReader, int]]:
    """``(reader, column)`` of every column of every data file of a dataset."""
    snap = _snapshot(uri)
    out = []
    for frag in snap.fragments:
        for f in snap.lance_schema.fields:
            src = frag.field_source(f)
            if src is not None:
                reader = frag.file_reader(src.path)
                out.extend((reader, c) for c in src.columns)
    return out


def _page_by_page(reader: LanceFileReader, column: int) -> list[dict]:
    """What the per-page path reads of each page of a column: ``parse_layout`` of its protobuf."""
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.reader import parse_layout

    out = []
    for page in reader.column(column).pages:
        layout = parse_layout(page, DecodeContext(reader.path, column))
        kind = layout.WhichOneof("layout")
        body = getattr(layout, kind)
        row = {"kind": kind, "message": layout, "offsets": tuple(page.buffer_offsets), "sizes": tuple(page.buffer_sizes),
               "num_rows": page.num_rows, "num_items": -1, "num_visible": -1, "has_rep": False, "has_def": False,
               "device_headers": False}
        if kind == "mini_block_layout":
            row.update(num_items=body.num_items, num_visible=body.num_items, has_rep=body.HasField("rep_compression"),
                       has_def=body.HasField("def_compression"), device_headers=plan.device_headers(body))
        elif kind == "full_zip_layout":
            row.update(num_items=body.num_items, num_visible=body.num_visible_items, has_rep=body.bits_rep > 0,
                       has_def=body.bits_def > 0)
        out.append(row)
    return out


@pytest.mark.parametrize("name", ["rich21", "rich22", "fsst", "binary", "many21", "many22", "runs22"])
def test_a_pass_table_holds_what_the_per_page_path_reads(datasets, name):
    """Every column of every file of the dataset as one pass table (``pagetable.concat`` of
    their tables): each row's layout, buffers and rows equal the per-page protobuf parse's,
    its counts and levels its own table's; each distinct layout held once."""
    from lance_gpu.file.encodings.base import DecodeContext

    cols = _column_infos(datasets[name])
    tables = [pagetable.column_pages(r.column(c), DecodeContext(r.path, c)).leaf_pages(None) for r, c in cols]
    table, edges = pagetable.concat(tables)
    expected = [(k, p, row) for k, (r, c) in enumerate(cols) for p, row in enumerate(_page_by_page(r, c))]
    assert len(table) == len(expected) > 0
    assert edges.tolist() == [0, *np.cumsum([len(t) for t in tables]).tolist()]
    kinds = set()
    for i, (k, p, row) in enumerate(expected):
        assert edges[k] <= i < edges[k + 1] and int(table.ids[i]) == p
        facts = table.layouts[int(table.layout[i])]
        assert facts.kind == row["kind"] and facts.message == row["message"]
        nb = len(row["offsets"])
        assert int(table.nbuf[i]) == nb and int(table.num_rows[i]) == row["num_rows"]
        assert tuple(table.offsets[i, :nb].tolist()) == row["offsets"] and tuple(table.sizes[i, :nb].tolist()) == row["sizes"]
        assert not table.offsets[i, nb:].any() and not table.sizes[i, nb:].any()
        if row["kind"] != "constant_layout":
            assert int(table.num_values[i]) == row["num_visible"]
            assert (bool(table.has_rep[i]), bool(table.has_def[i])) == (row["has_rep"], row["has_def"])
        own, j = tables[k], i - int(edges[k])
        for key in ("num_values", "num_levels", "has_rep", "has_def"):
            assert getattr(table, key)[i] == getattr(own, key)[j], (i, key)
        kinds.add(row["kind"])
    assert len({id(f) for f in table.layouts}) == len(table.layouts)  # each distinct layout once
    assert "mini_block_layout" in kinds
    if name in ("rich21", "rich22"):
        assert {"full_zip_layout", "constant_layout"} <= kinds  # embeddings / long strings; constant or all-null pages


@pytest.mark.parametrize("name", ["mixed21", "mixedflat22"])
def test_kind_codes_are_the_page_kinds_of_the_per_page_parse(datasets, name):
    """``ColumnPages.kind_codes`` of a column's pages, all or some (a selection's indices),
    are the codes of the kinds the per-page protobuf parse gives (pylance wrote mini-block,
    full-zip and constant pages into these columns)."""
    seen = set()
    for reader, column in _column_infos(datasets[name]):
        cp = pagetable.column_pages(reader.column(column), DecodeContext(reader.path, column))
        kinds = [pagetable.KIND_CODES.get(row["kind"], -1) for row in _page_by_page(reader, column)]
        assert cp.kind_codes(slice(None)).tolist() == kinds
        some = np.arange(cp.num_pages)[::-2]
        assert cp.kind_codes(some).tolist() == [kinds[i] for i in some]
        seen.update(kinds)
    assert seen == {0, 1, 2}, seen


def test_page_layouts_are_parsed_once_per_distinct_protobuf(datasets):
    """Files written alike share their layouts' parses: a second plan of a many-page read
    parses no layout, and the first parses fewer layouts than it has pages."""
    from lance_gpu.gpu import pagetable

    pagetable.clear()
    before = pagetable.layout_parses
    leaves = _leaves(datasets["many21"])
    pages = sum(leaf.num_pages for leaf in leaves)
    first = pagetable.layout_parses - before
    assert 0 < first < pages
    again = pagetable.layout_parses
    assert sum(leaf.num_pages for leaf in _leaves(datasets["many21"])) == pages
    assert pagetable.layout_parses == again


def test_a_page_whose_layout_does_not_parse_is_refused_naming_its_file(datasets, root):
    """A bad PageLayout protobuf: the column's other pages keep their table rows; planning
    the page raises the per-page parser's CorruptFileError naming the file."""
    from google.protobuf.any_pb2 import Any

    from lance_gpu.file.container import ColumnInfo, PageInfo
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.gpu import pagetable

    reader, column = _column_infos(datasets["rich21"])[0]
    good = reader.column(column).pages[0]
    bad = PageInfo(good.buffer_offsets, good.buffer_sizes, good.num_rows, good.first_row,
                   Any(type_url=good.encoding.type_url, value=b"\xff\xff\xff"))
    col = ColumnInfo(column, [good, bad], (), (), None, 2 * good.num_rows)
    cp = pagetable.column_pages(col, DecodeContext("a/file.lance", column))
    assert cp.index[0] >= 0 and cp.index[1] == -1 and cp.arrays().layout.tolist() == cp.index
    with pytest.raises(LookupError):
        cp.select(None)
    assert cp.select([0]).layouts[0].kind == pagetable.layout_facts(good, DecodeContext("x", column)).kind
    with pytest.raises(CorruptFileError, match=r"other/file\.lance"):
        pagetable.layout_facts(bad, DecodeContext("other/file.lance", column))


def test_shared_column_pages_stay_bounded(datasets, monkeypatch):
    """The column page selections kept per process hold their ColumnInfo: at most
    SHARED_COLUMN_PAGES_MAX pages of them are kept, and plans are the same either way."""
    from lance_gpu.gpu import pagetable

    pagetable.clear()
    expected = _work(datasets["many21"])
    monkeypatch.setattr(pagetable, "SHARED_COLUMN_PAGES_MAX", 8)
    pagetable.clear()
    assert _work(datasets["many21"]) == expected
    held = sum(cp.num_pages for _col, cp in pagetable._columns.values())
    assert 0 < held <= 8 or len(pagetable._columns) == 1


def _dictionary_items(unit: plan.UnitPlan) -> list[tuple[int, int, list[bytes]]]:
    """Every dictionary work row of ``unit`` as ``(first value slot or byte, item width,
    its dictionary's items)``, read through the unit's staged bytes (variable width: through
    its staged offsets)."""
    arena = unit.stage.host_bytes()
    out = []
    for lst in unit.dictionary.values():
        a = lst.arrays()
        for items, nitems, offsets, width, dst in zip(a["items"], a["nitems"], a["offsets"], a["width"], a["dst"], strict=True):
            at, n, w = int(items), int(nitems), int(width)
            if w:
                out.append((int(dst), w, [bytes(arena[at + w * i : at + w * (i + 1)]) for i in range(n)]))
                continue
            offs = arena[int(offsets) : int(offsets) + 8 * (n + 1)].view(np.int64)
            out.append((int(dst), 0, [bytes(arena[at + int(offs[i]) : at + int(offs[i + 1])]) for i in range(n)]))
    return sorted(out)


@pytest.mark.parametrize("name", ["many21", "many22", "fixdict22"])
def test_a_leafs_dictionaries_are_staged_together(datasets, name, monkeypatch):
    """The dictionary pages of a leaf have their dictionaries placed at once: a string
    leaf's checked together and staged as two items (blocks, offsets), a fixed-width leaf's
    items as one, not one or two per page; every page's dictionary work row reads the same
    items as when each page's dictionary is decoded and staged alone."""
    leaves = _leaves(datasets[name])
    together = plan.UnitPlan()
    staged = []
    real = plan._dictionaries_together

    def counted(unit, leaf, *pages):
        out = real(unit, leaf, *pages)
        staged.append((leaf.kind, len(out or ())))
        return out

    monkeypatch.setattr(plan, "_dictionaries_together", counted)
    for leaf in leaves:
        plan.place_leaf(together, leaf)
    placed = {kind for kind, n in staged if n >= 2}  # leaves of several dictionary pages took the leaf-wide path
    assert placed == ({"var", "fixed"} if name == "fixdict22" else {"var"}), staged
    monkeypatch.setattr(plan, "_dictionaries_together", lambda *args: None)
    alone = plan.UnitPlan()
    for leaf in _leaves(datasets[name]):
        plan.place_leaf(alone, leaf)
    got, want = _dictionary_items(together), _dictionary_items(alone)
    assert got == want and len(got) >= 2
    pages = sum(n for _kind, n in staged)
    leaves_placed = sum(1 for _kind, n in staged if n >= 2)
    # per page: one item (fixed) or two (var) alone; per leaf together
    assert len(alone.stage.items) - len(together.stage.items) >= pages - 2 * leaves_placed
    if name == "fixdict22":
        assert any(w for _d, w, _items in got)


def test_dictionary_blocks_decoded_together_match_one_by_one():
    """``variable.decode_blocks32`` over many Variable dictionary blocks gives each block's
    :func:`variable.decode_block` items; a block that fails a check makes it give None (the
    one-by-one decode then names the fault)."""
    import struct

    from lance_gpu._proto import encodings_v2_1_pb2 as pb
    from lance_gpu.file.encodings import variable
    from lance_gpu.file.encodings.base import DecodeContext

    def block(items: list[bytes], lead: bytes = b"") -> np.ndarray:
        offs = (len(lead) + np.cumsum([0] + [len(x) for x in items])).astype("<u4")
        start = 8 + offs.nbytes
        return np.frombuffer(struct.pack("<II", 32, start) + offs.tobytes() + lead + b"".join(items), np.uint8)

    enc = pb.CompressiveEncoding(variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32))))
    ctx = DecodeContext("<test>", 0)
    rng = np.random.default_rng(3)
    blocks = [[bytes(rng.integers(97, 123, int(rng.integers(0, 6))).astype(np.uint8)) for _ in range(int(k))] for k in (3, 0, 1, 7, 2)]
    bufs = [block(items, b"zz" if k == 3 else b"") for k, items in enumerate(blocks)]
    n = np.array([len(b) for b in blocks])
    blob, start, offsets, first = variable.decode_blocks32(bufs, n)
    for k, buf in enumerate(bufs):
        one = variable.decode_block(enc.variable, buf, int(n[k]), ctx)
        offs = offsets[first[k] : first[k + 1]]
        assert offs.tolist() == one.offsets.tolist()
        assert bytes(blob[start[k] + offs[0] : start[k] + offs[-1]]) == bytes(one.data) == b"".join(blocks[k])
    bad_order = bufs[3].copy()
    bad_order[8:12] = np.frombuffer(struct.pack("<I", 200), np.uint8)  # first offset past the next
    short = bufs[0][:6]
    past_end = bufs[4].copy()
    past_end[8 + 4 * 2 : 8 + 4 * 3] = np.frombuffer(struct.pack("<I", 999), np.uint8)
    for bad, k in ((bad_order, 3), (short, 0), (past_end, 4)):
        with pytest.raises(CorruptFileError):
            variable.decode_block(enc.variable, bad, int(n[k]), ctx)
        assert variable.decode_blocks32([*bufs[:k], bad, *bufs[k + 1 :]], n) is None


@pytest.mark.parametrize("name", ["rich22", "many21"])
def test_a_leafs_page_bytes_are_its_pages_buffers(datasets, name):
    """``LeafPlan.page_bytes`` (what a unit's memory estimate reads instead of the pages) is
    the sum of its pages' buffer sizes, whole reads and row selections (whose cut pages
    count whole) alike."""
    rows = np.unique(np.random.default_rng(2).integers(0, 200, 30))
    for selection in (None, rows):
        leaves = _leaves(datasets[name], selection)
        assert leaves
        for leaf in leaves:
            assert leaf.table is not None  # planned as a table of its pages
            # (a constant column may have no buffers: all null, no levels; cut pages count whole)
            pages = leaf.reader.column(leaf.column).pages
            assert leaf.page_bytes == sum(int(s) for i in leaf.table.ids.tolist() for s in pages[i].buffer_sizes), leaf.path
            assert leaf.page_bytes > 0 or leaf.table.layouts[0].kind == "constant_layout", leaf.path


def test_symbol_tables_parsed_together_match_one_by_one(monkeypatch):
    """``fsst.symbol_tables`` over many FSST symbol tables gives each one's
    :class:`fsst.SymbolTable` (symbols, lengths, count, compressed flag), and refuses a bad
    table with its error."""
    import struct

    from lance_gpu.file.encodings import fsst
    from lance_gpu.file.encodings.base import DecodeContext

    def raw(symbols: list[bytes], compressed: bool) -> bytes:
        header = (0x46535354 << 32) | (int(compressed) << 24) | len(symbols)
        return struct.pack("<Q", header) + b"".join(s.ljust(8, b"\0") for s in symbols) + bytes(len(s) for s in symbols)

    ctx = DecodeContext("<test>", 0)
    rng = np.random.default_rng(8)
    raws = [raw([bytes(rng.integers(97, 123, int(rng.integers(1, 9))).astype(np.uint8)) for _ in range(k)], k % 2 == 1)
            for k in (0, 3, 255, 17, 1)]
    for few in (1, 10**9):  # the NumPy path, and one by one
        monkeypatch.setattr(fsst, "_FEW_TABLES", few)
        symbols, lengths, n, compressed = fsst.symbol_tables(raws, ctx)
        for j, r in enumerate(raws):
            one = fsst.SymbolTable(r, ctx)
            assert symbols[j].tolist() == one.symbols.tolist() and lengths[j].tolist() == one.lengths.tolist()
            assert (int(n[j]), bool(compressed[j])) == (one.n_symbols, one.compressed)
    bad_magic = b"\0" + raws[1][1:8][:3] + b"XXXX" + raws[1][8:]
    bad_length = raws[1][:-1] + b"\x09"
    monkeypatch.setattr(fsst, "_FEW_TABLES", 1)  # refused by the NumPy path
    for bad, message in ((raws[2][:100], "truncated"), (bad_magic, "magic"), (bad_length, "outside 1..8"), (b"\0" * 4, "shorter")):
        with pytest.raises(CorruptFileError, match=message):
            fsst.symbol_tables([raws[0], bad, raws[1]], ctx)


def _device_only_table(n: int, seed: int):
    """Columns whose pages all go to the device pre-pass (no page dictionary, no FSST, no
    full-zip or constant pages): integers, nullable ones, floats, booleans, distinct strings, lists."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i32n": pa.array(rng.integers(0, 1 << 20, n).astype(np.int32), mask=rng.random(n) < 0.2),
        "f64": pa.array(rng.standard_normal(n)),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "s": pa.array([f"v{i}-{int(x)}" for i, x in enumerate(rng.integers(0, 10**9, n))], mask=rng.random(n) < 0.1),
        "li": pa.array([None if i % 7 == 0 else [int(v) for v in rng.integers(0, 1000, i % 4)] for i in range(n)], pa.list_(pa.int32())),
    })


def _traced_plan(uri) -> tuple[int, int]:
    """``(pages, Python lines run in lance_gpu / cuda_kernels)`` of planning a
    whole read of ``uri`` (all its fragments; every leaf planned and placed, the chunk table laid out, and after
    the pre-pass's CPU form -- not counted -- the levels settled and the work emitted), after
    one untraced plan (the per-process page selections and layouts are made once).  Not
    counted: the stager's registration of each range it could not join to the one before
    (``staging.py``: an item per page where a column's pages lie far apart in the file)."""
    snap = _snapshot(uri)
    sources = [(frag.file_reader(src.path), snap.schema.field(f.name), src.columns)
               for frag in snap.fragments for f in snap.lance_schema.fields if (src := frag.field_source(f)) is not None]
    def run() -> tuple[int, plan.UnitPlan, list[plan.LeafPlan]]:
        unit = plan.UnitPlan()
        leaves = [leaf for reader, af, columns in sources for leaf in plan.plan_field_leaves(reader, af, columns)]
        for leaf in leaves:
            plan.place_leaf(unit, leaf)
        headers.stage(unit)
        return sum(leaf.num_pages for leaf in leaves), unit, leaves

    run()
    roots = (str(Path(plan.__file__).parents[1]), str(Path(headers.chk.__file__).parent))
    lines = [0]

    def local(frame, event, arg):
        if event == "line":
            lines[0] += 1
        return local

    def tracer(frame, event, arg):
        name = frame.f_code.co_filename
        return local if name.startswith(roots) and not name.endswith("staging.py") else None

    sys.settrace(tracer)
    try:
        pages, unit, leaves = run()
    finally:
        sys.settrace(None)
    table, _at = unit.chunk_table
    headers.parse_on_host(table, unit.stage.host_bytes())
    headers.check(table)
    sys.settrace(tracer)
    try:
        headers.settle_levels(unit, table)
        headers.emit(unit, table)
    finally:
        sys.settrace(None)
    assert all(leaf.table is not None for leaf in leaves), [leaf.column for leaf in leaves if leaf.table is None]
    return pages, lines[0]


def test_planning_runs_no_python_per_page(root, monkeypatch):
    """Leaves whose pages all go to the device pre-pass are planned as tables of their pages:
    a read of ten times the pages (over 1,000) runs about the same
    Python lines in the planner (plan, place, chunk table, level settling, emission): O(leaves
    and distinct layouts), not O(pages) -- counted, not timed."""
    import pyarrow as pa

    uris = []
    for n in (2000, 20000):
        uri = str(root / f"device_only_{n}")
        tbl = _device_only_table(n, seed=9)
        batches = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=100))
        lance.write_dataset(batches, uri, data_storage_version="2.1", max_rows_per_group=100, max_page_bytes=2048,
                            data_cache_bytes=8 * 2048)
        uris.append(uri)
    small_pages, small_lines = _traced_plan(uris[0])
    big_pages, big_lines = _traced_plan(uris[1])
    assert big_pages >= 1000 and big_pages >= 8 * small_pages, (small_pages, big_pages)
    assert big_lines <= 1.1 * small_lines + 100, (small_pages, small_lines, big_pages, big_lines)


def test_one_page_leaves_plan_as_tables(root):
    """Many small fragments (one page per leaf: mini-block pages, and the full-zip pages of
    long strings and embeddings) are planned as tables of their pages, and the
    Python lines run per leaf (plan, place, chunk table, levels, emission) stay what they
    are for a few fragments (O(leaves): four times the fragments, about four times the
    lines) and no more than a leaf of many pages takes -- counted, not timed."""
    import pyarrow as pa

    names = ["id", "i32n", "f64", "b", "s", "emb", "li", "long"]
    counted = {}
    for nfrag in (4, 16):
        uri = str(root / f"one_page_{nfrag}")
        lance.write_dataset(gd.rich_table(20 * nfrag, seed=5).select(names), uri, data_storage_version="2.1", max_rows_per_file=20)
        counted[nfrag] = _traced_plan(uri)
    for nfrag, (pages, _lines) in counted.items():
        assert pages == len(names) * nfrag, (nfrag, pages)
    few, many = counted[4][1], counted[16][1]
    assert many <= 4.4 * few, (few, many)
    uri = str(root / "one_fragment_many_pages")
    tbl = _device_only_table(2000, seed=9)
    lance.write_dataset(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=100)), uri,
                        data_storage_version="2.1", max_rows_per_group=100, max_page_bytes=2048, data_cache_bytes=8 * 2048)
    pages, lines = _traced_plan(uri)
    assert pages >= 8 * 6
    assert many / (16 * len(names)) <= 1.1 * lines / 6, (many, lines)


@pytest.mark.parametrize("by_unit", [False, True])
@pytest.mark.parametrize(("what", "message"), [
    ("data", "full-zip buffer shorter than its values"),
    ("index", "full-zip repetition index has an impossible width"),
])
def test_full_zip_table_checks_refuse_bad_buffers(root, what, message, by_unit, monkeypatch):
    """A leaf of full-zip pages planned as a table is checked over its rows at once, with
    messages naming the file: a data buffer shorter than its values, a
    repetition index whose size is not a whole width per row; ``by_unit``: the middle one
    of three fragments' leaves placed as one pass table names its own file."""
    import dataclasses

    uri = str(root / "fullzip_checks")
    if not Path(uri).exists():
        lance.write_dataset(gd.rich_table(300, seed=2).select(["emb", "long"]), uri, data_storage_version="2.1",
                            max_rows_per_file=100)
    leaves = _leaves(uri)
    found = [lf for lf in leaves if lf.table is not None and lf.table.layouts[0].kind == "full_zip_layout"
             and (lf.kind == "var") == (what == "index")]
    leaf = found[len(found) // 2 if by_unit else 0]
    sizes = leaf.table.sizes.copy()
    if what == "data":
        sizes[0, 0] = 1
    else:
        sizes[0, 1] += 1
    leaf.table = dataclasses.replace(leaf.table, sizes=sizes, memo={})
    with pytest.raises(CorruptFileError, match=message) as got:
        if by_unit:
            assert len({lf.path for lf in found}) == 3
            monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
            passplan.place_unit(plan.UnitPlan(), leaves)
        else:
            plan.place_leaf(plan.UnitPlan(), leaf)
    assert leaf.path in str(got.value)


def _dictionary_table(n: int, seed: int):
    return gd.dictionary_constant_table(n, seed=seed)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_dictionary_and_constant_leaves_plan_as_tables(root, monkeypatch, version):
    """Leaves of dictionary pages and of constant / all-null pages (one or many pages a
    leaf, one or many fragments) are planned as tables of their pages, their dictionaries
    placed by table row: the same dictionary work rows placed together and each page's
    alone (its dictionary staged before its chunks), the pre-pass's parse of their chunks
    the host parser's (the decoded columns: tests/gpu/sim_pipeline.py,
    test_dictionary_pass_tables_decode_as_pylance)."""
    import pyarrow as pa

    uris = []
    for nfrag, rows, page_bytes in ((1, 6000, 1024), (8, 800, 1 << 20)):
        uri = str(root / f"dictionaries_{version}_{nfrag}")
        tbl = _dictionary_table(rows, seed=nfrag)
        lance.write_dataset(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=100)), uri,
                            data_storage_version=version, max_rows_per_file=rows // nfrag, max_page_bytes=page_bytes,
                            data_cache_bytes=8 * page_bytes)
        uris.append(uri)
    for uri in uris:
        leaves = _leaves(uri)
        dict_leaves = [leaf for leaf in leaves if leaf.table is not None and leaf.table.layouts[0].dictionary]
        assert {leaf.kind for leaf in dict_leaves} == ({"var", "fixed"} if version == "2.2" else {"var"}), \
            [(leaf.column, leaf.kind, leaf.table is not None) for leaf in leaves]
        constant = {leaf.column for leaf in leaves if leaf.table is not None and leaf.table.layouts[0].kind == "constant_layout"}
        assert constant >= ({3, 4, 5, 6} if version == "2.2" else {3, 4}), constant
        for leaf in leaves:  # a constant leaf: its column's shared table, its file's decoded pages beside it
            if leaf.table is not None and leaf.table.layouts[0].kind == "constant_layout":
                shared = pagetable.column_pages(leaf.reader.column(leaf.column), leaf.ctx()).leaf_pages(None)
                assert leaf.table is shared and leaf.constant_pages is not None and len(leaf.constant_pages) == len(shared)
                assert leaf.num_values == sum(lp.num_values for lp in leaf.constant_pages)
                assert leaf.num_levels == sum(lp.num_levels for lp in leaf.constant_pages)
        pages, _lines = _traced_plan(uri)
        assert pages >= len(leaves)
        assert _prepass_matches_the_host_parser(uri) > 0
        tables = _work(uri)
        assert any(v for k, v in tables.items() if k.startswith("dictionary")), uri
        with monkeypatch.context() as mp:
            mp.setattr(plan, "_dictionaries_together", lambda *args: None)
            alone = _work(uri)
        # (the same rows, reading each page's dictionary where it was staged alone)
        assert {k: len(v) for k, v in alone.items() if k.startswith("dictionary")} == \
            {k: len(v) for k, v in tables.items() if k.startswith("dictionary")}, uri
        assert len(alone["stage"]) >= len(tables["stage"]) and alone["sizes"][:3] == tables["sizes"][:3], uri
    assert max(len(leaf.table) for leaf in _leaves(uris[0]) if leaf.table is not None) > 1  # many pages a leaf


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_dictionary_leaves_of_many_fragments_place_as_one_table(root, monkeypatch, version):
    """The dictionary leaves of a column of several fragments (one page a leaf, and several:
    dictionaries placed together per leaf, or each page's alone) are placed as one pass
    table (``passplan.place_unit``: a device block over every fragment's rows, each row's
    first index item) with the work, regions, staged ranges and dictionary rows of
    leaf-by-leaf placement, whatever the page count (both staging branches) and with pass
    tables off."""
    import pyarrow as pa

    for nfrag, rows, page_bytes in ((6, 600, 1 << 20), (4, 2400, 1024)):
        uri = str(root / f"dictionary_passes_{version}_{nfrag}")
        if not Path(uri).exists():
            tbl = _dictionary_table(rows, seed=nfrag)
            lance.write_dataset(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=100)), uri,
                                data_storage_version=version, max_rows_per_file=rows // nfrag, max_page_bytes=page_bytes,
                                data_cache_bytes=8 * page_bytes)
        monkeypatch.setattr(passplan, "PASS_MIN_LEAVES", 2)
        leaves = _leaves(uri)
        dict_leaves = [leaf for leaf in leaves if leaf.table is not None and leaf.table.layouts[0].dictionary]
        assert dict_leaves and all(passplan.pass_key(leaf) is not None for leaf in dict_leaves)
        unit = plan.UnitPlan()
        passplan.place_unit(unit, leaves)
        passes = [b for b in unit.device_blocks if b.leaves is not None and b.dictionary is not None]
        assert sorted(id(leaf) for b in passes for leaf in b.leaves) == sorted(map(id, dict_leaves))
        # (columns read alike, strings with and without nulls, share a pass)
        assert all(len(b.leaves) % nfrag == 0 and len(b.dictionary[1]) == b.npages for b in passes)
        for together in (True, False):
            if not together:
                monkeypatch.setattr(plan, "_dictionaries_together", lambda *args: None)
            by_leaf = _work(uri)
            assert any(v for k, v in by_leaf.items() if k.startswith("dictionary")), uri
            assert _work(uri, by_unit=True) == by_leaf, (uri, together)
            monkeypatch.setattr(plan, "DEVICE_BLOCK_MIN_PAGES", 1)
            assert _work(uri, by_unit=True) == _work(uri), (uri, together)
            monkeypatch.setattr(plan, "DEVICE_BLOCK_MIN_PAGES", 10**9)
            assert _work(uri, by_unit=True) == _work(uri), (uri, together)
        monkeypatch.undo()
        assert max(len(leaf.table) for leaf in dict_leaves) > (1 if page_bytes == 1024 else 0)


def _drop_buffers(monkeypatch, kind: str, keep: int) -> None:
    """``LanceFileReader.column`` answers for the first column with a page of layout
    ``kind`` with that page cut to its first ``keep`` buffers (a page pylance never writes:
    its column metadata edited)."""
    import dataclasses

    from lance_gpu.file.reader import parse_layout

    real = LanceFileReader.column
    target: list[int] = []

    def first(self, index: int) -> int:
        for k, page in enumerate(real(self, index).pages):
            if parse_layout(page, DecodeContext(self.path, index)).WhichOneof("layout") == kind:
                return k
        return -1

    def column(self, index: int):
        info = real(self, index)
        if not target:
            target.append(next(c for c in range(self.num_columns) if first(self, c) >= 0))
        if index != target[0]:
            return info
        pages = list(info.pages)
        k = first(self, index)
        pages[k] = dataclasses.replace(pages[k], buffer_offsets=pages[k].buffer_offsets[:keep], buffer_sizes=pages[k].buffer_sizes[:keep])
        return dataclasses.replace(info, pages=pages)

    monkeypatch.setattr(LanceFileReader, "column", column)


def test_pages_no_table_takes_fall_back_to_the_cpu_reader_or_are_refused(datasets, monkeypatch):
    """Pages no table takes (pylance writes none: made here by editing the pages' buffer
    lists): a mini-block page without its chunk buffer makes its field raise
    ``plan.Unsupported`` -- the read sends the field to the CPU reader (reported as a
    fallback: ``on_cpu_fallback`` 'warn' names it, 'raise' refuses), which refuses the page
    as the GPU path would not decode it; a full-zip page without its data buffer is a
    ``CorruptFileError`` naming the file; whole and for a row selection."""
    from concurrent.futures import ThreadPoolExecutor

    from lance_gpu.errors import UnsupportedEncodingError
    from lance_gpu.gpu import read

    uri = datasets["rich22"]
    snap = _snapshot(uri)
    frag = snap.fragments[0]
    fields = [f for f in snap.lance_schema.fields if frag.field_source(f) is not None]
    arrow = {f.name: snap.schema.field(f.name) for f in fields}
    whole = read._plan_fragment(frag, None, fields, arrow, "warn", ThreadPoolExecutor(1), {})
    assert not whole.cpu and len(whole.gpu) == len(fields)
    rows = np.arange(3, 40, 5)
    with monkeypatch.context() as mp:
        _drop_buffers(mp, "mini_block_layout", 1)
        pagetable.clear()
        refused = []
        for f in fields:
            src = frag.field_source(f)
            try:
                plan.plan_field_leaves(frag.file_reader(src.path), arrow[f.name], src.columns)
            except plan.Unsupported:
                refused.append(f.name)
        assert len(refused) == 1, refused
        for sel in (None, rows):
            seen: dict[str, list[str]] = {}
            with ThreadPoolExecutor(2) as pool:
                got = read._plan_fragment(frag, sel, fields, arrow, "warn", pool, seen)
                assert list(got.cpu) == refused and len(got.gpu) == len(fields) - 1, (sorted(got.cpu), sel is None)
                assert [names for names in seen.values()] == [list(got.cpu)]
                with pytest.raises(CorruptFileError):  # the CPU reader refuses the page too
                    next(iter(got.cpu.values())).result()
                with pytest.raises(UnsupportedEncodingError, match="no GPU decoder"):
                    read._plan_fragment(frag, sel, fields, arrow, "raise", pool, {})
    with monkeypatch.context() as mp:
        _drop_buffers(mp, "full_zip_layout", 0)
        pagetable.clear()
        for sel in (None, rows):
            with pytest.raises(CorruptFileError, match="full-zip page without a data buffer") as exc:
                read._plan_fragment(frag, sel, fields, arrow, "warn", ThreadPoolExecutor(1), {})
            assert frag.field_source(fields[0]).path.split("/")[-1] in str(exc.value)
    pagetable.clear()


def test_fixed_size_list_item_validity_is_planned_as_bits_to_bytes(tmp_path):
    """A fixed-size list whose mini-block pages carry item validity (pylance writes
    FixedSizeList{has_validity} where items are null) is planned on the device: each leaf
    gets ``dim`` items per value and an item validity region of a byte per item, which the
    chunks' validity bits are spread to (``bits`` work rows covering every item), its values
    copied from the chunks' second buffer; a leaf of all-null pages fills its items null;
    pages with item validity beside other pages (mini-block, full-zip, constant), or under a
    list, give the leaf item validity too."""
    import pyarrow as pa

    n, dim = 3000, 3
    items = pa.array(np.arange(n * dim, dtype=np.float32), mask=np.arange(n * dim) % 5 == 1)
    fsl = pa.FixedSizeListArray.from_arrays(items, dim, mask=pa.array(np.arange(n) % 7 == 0))
    uri = str(tmp_path / "fsl")
    lance.write_dataset(pa.table({"v": fsl, "z": pa.nulls(n, fsl.type)}), uri, data_storage_version="2.2")
    leaves = _leaves(uri)
    assert [(leaf.item_dim, leaf.num_values) for leaf in leaves] == [(dim, n), (dim, n)]
    unit = plan.UnitPlan()
    for leaf in leaves:
        plan.place_leaf(unit, leaf)
    headers.parse_and_emit_on_host(unit)
    v, z = leaves
    assert v.item_pos >= v.value_pos + n * v.width and z.item_pos >= z.value_pos + n * z.width
    bits = unit.bits.arrays()
    assert int(bits["count"].sum()) == n * dim  # every item's bit, to its byte
    assert sorted((bits["dst"] - v.item_pos).tolist())[0] == 0 and int((bits["dst"] + bits["count"]).max()) == v.item_pos + n * dim
    assert (z.item_pos, n * dim, b"\x00") in unit.fill_fixed
    copied = unit.copy_fixed.arrays()
    assert int(copied["len"].sum()) == n * v.width  # the values: the second chunk buffer, as Flat

    def facts(valid: bool, kind: str = "mini_block_layout") -> SimpleNamespace:
        from lance_gpu._proto import encodings_v2_1_pb2 as pb

        mb = pb.MiniBlockLayout()
        mb.value_compression.fixed_size_list.items_per_value = dim
        mb.value_compression.fixed_size_list.has_validity = valid
        mb.value_compression.fixed_size_list.values.flat.bits_per_value = 32
        return SimpleNamespace(kind=kind, dictionary=False, num_buffers=2 if valid else 1, body=mb, has_rep=has_rep)

    has_rep = False
    assert plan._item_layers_of([facts(True), facts(True)], (dim,)) == (dim,)
    assert plan._item_layers_of([facts(False)], (dim,)) == ()
    assert plan._item_layers_of([facts(True), facts(False), facts(False, "constant_layout")], (dim,)) == (dim,)
    has_rep = True  # (under a list too)
    assert plan._item_layers_of([facts(False)], (dim,)) == ()
    assert plan._item_layers_of([facts(True), facts(False)], (dim,)) == (dim,)


def test_nested_fixed_size_list_item_validity_is_planned_layer_by_layer(tmp_path):
    """Nested fixed-size lists (2 lists of 3 items) whose mini-block pages carry item
    validity in the outer layer, the inner, both (three chunk buffers) or neither, beside an
    all-null page: the leaf gets both layers (``item_layers`` (2, 6), 8 bytes a value), each
    layer's region after the one above it; the pages' validity buffers are spread to their
    own layer's bytes (bits rows over every item of the pages carrying it), the layers a
    page does not carry are filled valid, the all-null page's null in both."""
    import pyarrow as pa

    run, d1, d2 = 40, 2, 3
    rng = np.random.default_rng(3)

    def batch(outer: bool, inner: bool, all_null: bool = False) -> pa.RecordBatch:
        items = pa.array(np.arange(run * d1 * d2, dtype=np.int32), mask=(rng.random(run * d1 * d2) < 0.2) if inner else None)
        mid = pa.FixedSizeListArray.from_arrays(items, d2, mask=pa.array(rng.random(run * d1) < 0.2) if outer else None)
        rows = pa.array(np.full(run, True)) if all_null else None
        return pa.record_batch({"v": pa.FixedSizeListArray.from_arrays(mid, d1, mask=rows)})

    batches = [batch(True, False), batch(False, True), batch(True, True), batch(False, False), batch(False, False, True)]
    uri = str(tmp_path / "nested")
    lance.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), uri, data_storage_version="2.1",
                        max_page_bytes=256, data_cache_bytes=256)
    (leaf,) = _leaves(uri)
    n = 5 * run
    assert leaf.item_layers == (d1, d1 * d2) and leaf.item_dim == d1 + d1 * d2 and leaf.num_values == n
    unit = plan.UnitPlan()
    plan.place_leaf(unit, leaf)
    headers.parse_and_emit_on_host(unit)
    outer, inner = leaf.item_pos, leaf.item_pos + n * d1  # the layers' regions, layer after layer
    bits = unit.bits.arrays()
    spans = sorted(zip((bits["dst"]).tolist(), bits["count"].tolist(), strict=True))
    got_outer = sum(c for d, c in spans if outer <= d < inner)
    got_inner = sum(c for d, c in spans if inner <= d < inner + n * d1 * d2)
    assert (got_outer, got_inner) == (2 * run * d1, 2 * run * d1 * d2)  # the pages carrying each layer, every item
    assert min(d for d, _c in spans) == outer and max(d + c for d, c in spans) == inner + 3 * run * d1 * d2
    fills = sorted((d, size, pat) for d, size, pat in unit.fill_fixed if outer <= d < inner + n * d1 * d2)
    assert fills == [
        (outer + run * d1, run * d1, b"\x01"),  # batch 1 carries the inner layer only
        (outer + 3 * run * d1, run * d1, b"\x01"),  # batch 3 neither
        (outer + 4 * run * d1, run * d1, b"\x00"),  # the all-null page
        (inner, run * d1 * d2, b"\x01"),  # batch 0 carries the outer layer only
        (inner + 3 * run * d1 * d2, run * d1 * d2, b"\x01"),
        (inner + 4 * run * d1 * d2, run * d1 * d2, b"\x00"),
    ]
    # under a list: refused (its own reason; the CPU reader decodes it)
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 3], pa.int32()), batches[2].column(0).slice(0, 3))
    uri = str(tmp_path / "nested_lists")
    lance.write_dataset(pa.table({"l": lists}), uri, data_storage_version="2.1")
    snap = _snapshot(uri)
    frag, field = snap.fragments[0], snap.lance_schema.fields[0]
    src = frag.field_source(field)
    with pytest.raises(plan.Unsupported, match=r"^nested fixed-size lists with item validity under a list$"):
        plan.plan_field_leaves(frag.file_reader(src.path), snap.schema.field("l"), src.columns)


@pytest.mark.parametrize("dim", [3, 64])
def test_fixed_size_list_pages_without_item_validity_fill_their_items_valid(tmp_path, dim):
    """A fixed-size list leaf whose pages (one per batch; mini-block for dim 3, full-zip for
    dim 64) carry item validity, carry none, or are all null has item validity: the pages
    with it write their bits (bits work rows, or the full-zip walk's ``idim``), the page
    without it fills its items valid, the all-null page null, each over its own items."""
    import pyarrow as pa

    run = 40
    rng = np.random.default_rng(dim)

    def batch(item_p: float, all_null: bool) -> pa.RecordBatch:
        items = pa.array(rng.random(run * dim).astype(np.float32), mask=rng.random(run * dim) < item_p)
        rows = np.full(run, all_null) | (rng.random(run) < 0.2)
        return pa.record_batch({"v": pa.FixedSizeListArray.from_arrays(items, dim, mask=pa.array(rows))})

    batches = [batch(0.2, False), batch(0.0, False), batch(0.0, True)]
    uri = str(tmp_path / "fsl")
    lance.write_dataset(pa.RecordBatchReader.from_batches(batches[0].schema, batches), uri, data_storage_version="2.2",
                        max_page_bytes=256, data_cache_bytes=256)
    (leaf,) = _leaves(uri)
    assert leaf.item_dim == dim and leaf.mixed is not None
    unit = plan.UnitPlan()
    plan.place_leaf(unit, leaf)
    headers.parse_and_emit_on_host(unit)
    fills = sorted((d - leaf.item_pos, n, pat) for d, n, pat in unit.fill_fixed if leaf.item_pos <= d < leaf.item_pos + leaf.num_values * dim)
    assert fills == [(run * dim, run * dim, b"\x01"), (2 * run * dim, run * dim, b"\x00")]
    if dim == 3:
        bits = unit.bits.arrays()
        assert int(bits["count"].sum()) == run * dim and int(bits["dst"].min()) == leaf.item_pos
    else:
        walk = unit.fullzip.arrays()
        assert walk["idim"].tolist() == [dim, 0] and walk["item_dst"].tolist() == [leaf.item_pos, -1]
