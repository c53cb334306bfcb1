# SPDX-License-Identifier: Apache-2.0
"""Legacy (``data_storage_version="legacy"`` / ``"0.1"``) datasets, differentially against
pylance 14: reading what pylance writes (every type its legacy writer takes; scans, takes,
filters, deletions), writing them (pylance reads back every file; pages and page table
byte for byte pylance's), appends and the commit API, rewrites of legacy datasets, the
storage version reported, and pylance's errors for what legacy files cannot hold."""

from __future__ import annotations

import decimal
import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu._proto import file_pb2
from lance_gpu.errors import CorruptFileError, LegacyFormatError

lance = pytest.importorskip("lance")

N = 10


def _columns() -> dict[str, pa.Array]:
    """One column per type pylance's legacy writer takes, nulls included (10 rows)."""
    ints = [i if i % 4 else None for i in range(N)]
    strs = [None if i % 3 == 0 else "" if i % 5 == 0 else f"s{i}" * (i % 3) for i in range(N)]
    return {
        "i8": pa.array(ints, pa.int8()),
        "u32": pa.array(ints, pa.uint32()),
        "i64": pa.array(ints, pa.int64()),
        "f16": pa.array(np.arange(N, dtype=np.float16)),
        "f32": pa.array([float(i) if i % 4 else None for i in range(N)], pa.float32()),
        "f64": pa.array([i / 3 for i in range(N)], pa.float64()),
        "bool": pa.array([None if i % 4 == 0 else i % 3 == 0 for i in range(N)]),
        "str": pa.array(strs, pa.string()),
        "lstr": pa.array(strs, pa.large_string()),
        "bin": pa.array([None if s is None else s.encode() for s in strs], pa.binary()),
        "lbin": pa.array([None if s is None else s.encode() for s in strs], pa.large_binary()),
        "fsb": pa.array([bytes([i, i + 1]) for i in range(N)], pa.binary(2)),
        "date": pa.array([i * 100 if i % 4 else None for i in range(N)], pa.date32()),
        "ts": pa.array([i * 1000 for i in range(N)], pa.timestamp("us")),
        "tstz": pa.array([i * 1000 for i in range(N)], pa.timestamp("ms", "UTC")),
        "time": pa.array([i for i in range(N)], pa.time64("us")),
        "dur": pa.array([i for i in range(N)], pa.duration("s")),
        "dec": pa.array([decimal.Decimal(i) / 4 if i % 4 else None for i in range(N)], pa.decimal128(6, 2)),
        "null": pa.nulls(N),
        "list": pa.array([None if i % 4 == 0 else list(range(i % 3)) for i in range(N)], pa.list_(pa.int32())),
        "llist": pa.array([[i, i] for i in range(N)], pa.large_list(pa.int64())),
        "list_str": pa.array([[f"a{i}", None, ""][: i % 4] for i in range(N)], pa.list_(pa.string())),
        "list_list": pa.array([[[i], []] if i % 2 else [] for i in range(N)], pa.list_(pa.list_(pa.int16()))),
        "struct": pa.array([None if i == 3 else {"x": i, "y": f"y{i}" if i % 2 else None} for i in range(N)],
                           pa.struct([("x", pa.int64()), ("y", pa.string())])),
        "list_struct": pa.array([[{"a": i}] * (i % 3) for i in range(N)], pa.list_(pa.struct([("a", pa.int32())]))),
        "fsl": pa.array([[i, -i, 2 * i] for i in range(N)], pa.list_(pa.float32(), 3)),
        "fsl_bool": pa.array([[i % 2 == 0, True, False] for i in range(N)], pa.list_(pa.bool_(), 3)),
        "fsl_fsl": pa.array([[[i, 1], [2, i]] for i in range(N)], pa.list_(pa.list_(pa.int32(), 2), 2)),
    }


def _dictionaries() -> dict[str, pa.Array]:
    return {
        "dict_str": pa.array([["u", "v", "w"][i % 3] for i in range(N)]).dictionary_encode(),
        "dict_int": pa.array([i % 4 for i in range(N)], pa.int64()).dictionary_encode(),
    }


def _table(dictionaries: bool = True) -> pa.Table:
    cols = _columns()
    if dictionaries:
        cols.update(_dictionaries())
    return pa.table(cols)


def _pylance_legacy(tmp_path: Path, table: pa.Table, name: str = "theirs", **kwargs) -> str:
    uri = str(tmp_path / name)
    lance.write_dataset(table, uri, data_storage_version="legacy", **kwargs)
    return uri


def _data_files(uri: str) -> list[Path]:
    return sorted(Path(uri, "data").glob("*.lance"))


def _metadata(raw: bytes) -> file_pb2.Metadata:
    pos = struct.unpack("<q", raw[-16:-8])[0]
    size = struct.unpack("<I", raw[pos : pos + 4])[0]
    md = file_pb2.Metadata()
    md.ParseFromString(raw[pos + 4 : pos + 4 + size])
    return md


# --------------------------------------------------------------------------------------------
# Reading what pylance writes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows_per_group", [3, 1024])
def test_read_every_type(tmp_path: Path, rows_per_group: int) -> None:
    uri = _pylance_legacy(tmp_path, _table(), max_rows_per_group=rows_per_group)
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    assert ours.data_storage_version == ref.data_storage_version == "0.1"
    expected = ref.to_table()
    got = ours.to_table()
    assert got.schema == expected.schema
    for name in expected.column_names:
        assert got[name].combine_chunks().equals(expected[name].combine_chunks()), name
    # legacy files store no validity for fixed-width values: nulls read back as zeros, as pylance reads them
    assert got["i64"].to_pylist()[0] == 0 and got["str"].to_pylist()[0] is None
    # pylance's take panics on a legacy fixed-size list of bools ("Expecting fixed stride
    # data type"); its scan reads it, so that column's take is checked against the scan
    cols = [c for c in expected.column_names if c != "fsl_bool"]
    for rows in ([0], [9, 2, 5], [3, 4, 5, 6], list(range(N))):
        assert ours.take(rows, columns=cols).equals(ref.take(rows, columns=cols)), rows
        assert ours.take(rows, columns=["fsl_bool"])["fsl_bool"].equals(expected["fsl_bool"].take(rows))
    cols = ["str", "struct", "list_str"]
    assert ours.to_table(columns=cols, offset=2, limit=5).equals(ref.to_table(columns=cols, offset=2, limit=5))


@pytest.mark.parametrize("predicate", ["f64 < 1.5", "f64 > 1 and struct.x < 8", "llist IS NOT NULL", "struct.x >= 5",
                                       "list_str IS NOT NULL and f64 > 2"])
def test_filters_and_deletions(tmp_path: Path, predicate: str) -> None:
    table = pa.concat_tables([_table(dictionaries=False).drop_columns(["fsl_bool"])] * 3)
    uri = _pylance_legacy(tmp_path, table, max_rows_per_group=7, max_rows_per_file=12)
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    assert ours.to_table(filter=predicate).equals(ref.to_table(filter=predicate))
    assert ours.count_rows(predicate) == ref.count_rows(predicate)
    ref.delete("f64 > 2.9 and f64 < 3.1")
    ours = lance_gpu.dataset(uri)
    ref = lance.dataset(uri)
    assert ours.to_table(filter=predicate).equals(ref.to_table(filter=predicate))
    assert ours.to_table(with_row_id=True).equals(ref.to_table(with_row_id=True))
    assert ours.take([0, 7, 20]).equals(ref.take([0, 7, 20]))


@pytest.mark.parametrize(("predicate", "mask"), [
    ("i64 > 3", lambda t: pa.compute.greater(t["i64"], 3)),
    ("str IS NULL", lambda t: pa.compute.is_null(t["str"])),
])
def test_filters_see_the_values_a_scan_reads(tmp_path: Path, predicate: str, mask) -> None:
    """Over columns whose nulls legacy files do not keep, a filter sees the values a scan
    returns (a null int reads as 0, an empty string as null).  pylance 14's filters do not
    (``i64 > 3`` keeps a row whose scanned ``i64`` is 0; ``str IS NULL`` misses an empty
    string its scan returns as null), so ours is checked against pylance's scan."""
    table = pa.concat_tables([_table(dictionaries=False).drop_columns(["fsl_bool"])] * 3)
    uri = _pylance_legacy(tmp_path, table, max_rows_per_group=7, max_rows_per_file=12)
    scanned = lance.dataset(uri).to_table()
    expected = scanned.filter(mask(scanned))
    assert lance_gpu.dataset(uri).to_table(filter=predicate).equals(expected)


@pytest.mark.gpu
def test_gpu_scan_decodes_legacy_files_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU executor hands legacy fields to the CPU reader (a CpuDecodeWarning naming
    them); ``on_cpu_fallback="raise"`` refuses, naming the legacy format."""
    from lance_gpu.gpu import read as gpu_read

    monkeypatch.setattr(gpu_read, "_warned", set())  # (warned once per process)
    uri = _pylance_legacy(tmp_path, _table(dictionaries=False).select(["i64", "str", "list", "struct"]))
    ds = lance_gpu.dataset(uri, device="gpu")
    with pytest.warns(lance_gpu.errors.CpuDecodeWarning, match="legacy"):
        got = ds.to_table(filter="i64 > 2")
    assert got.equals(lance.dataset(uri).to_table().filter(pa.compute.greater(lance.dataset(uri).to_table()["i64"], 2)))
    with pytest.raises(lance_gpu.errors.UnsupportedEncodingError, match="legacy"):
        ds.to_table(on_cpu_fallback="raise")


def test_truncated_legacy_file_is_corrupt(tmp_path: Path) -> None:
    uri = _pylance_legacy(tmp_path, _table(dictionaries=False))
    f = _data_files(uri)[0]
    raw = f.read_bytes()
    md = _metadata(raw)
    # the footer names a Metadata section that is not there any more
    f.write_bytes(raw[: md.page_table_position] + raw[-16:])
    with pytest.raises(CorruptFileError, match=f.name):
        lance_gpu.dataset(uri).to_table()


def test_flipped_bytes_raise_our_errors_or_read(tmp_path: Path) -> None:
    """Bytes of a legacy file's tail (page table, schema, metadata, footer) and pages flipped
    one at a time: a read either succeeds (legacy files have no checksums: a flipped value
    reads as another value) or raises one of our errors -- never another exception."""
    uri = _pylance_legacy(tmp_path, _table(), max_rows_per_group=4)
    f = _data_files(uri)[0]
    raw = f.read_bytes()
    rng = np.random.default_rng(7)
    spots = np.concatenate([rng.integers(len(raw) - 1400, len(raw), 60), rng.integers(0, len(raw), 20)])
    for spot in spots.tolist():
        bad = bytearray(raw)
        bad[spot] ^= 1 << int(rng.integers(0, 8))
        f.write_bytes(bytes(bad))
        lance_gpu.file.container.clear_metadata_cache()
        try:
            lance_gpu.dataset(uri).to_table()
        except lance_gpu.errors.LanceGpuError:
            pass


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows_per_group", [4, 1024])
def test_write_read_back_by_pylance_byte_for_byte(tmp_path: Path, rows_per_group: int) -> None:
    table = _table(dictionaries=False)
    theirs = _pylance_legacy(tmp_path, table, max_rows_per_group=rows_per_group)
    ours = str(tmp_path / "ours")
    ds = lance_gpu.write_dataset(table, ours, data_storage_version="legacy", max_rows_per_group=rows_per_group)
    assert ds.data_storage_version == "0.1"
    back = lance.dataset(ours)
    assert back.data_storage_version == "0.1"
    assert back.to_table().equals(lance.dataset(theirs).to_table())
    cols = [c for c in table.column_names if c != "fsl_bool"]  # (pylance's take panics on it)
    assert back.take([1, 8], columns=cols).equals(lance.dataset(theirs).take([1, 8], columns=cols))
    assert ds.to_table().equals(back.to_table())
    (mine,), (ref,) = _data_files(ours), _data_files(theirs)
    a, b = mine.read_bytes(), ref.read_bytes()
    ma, mb = _metadata(a), _metadata(b)
    assert list(ma.batch_offsets) == list(mb.batch_offsets)
    # the pages and the page table (the file up to its end) are pylance's bytes; pylance then
    # writes column statistics, which we leave out
    end_a = ma.page_table_position
    assert end_a == mb.page_table_position and a[:end_a] == b[:end_a]
    ids = [int(i) for i in back.get_fragments()[0].metadata.files[0].fields]
    table_bytes = (max(ids) - min(ids) + 1) * (len(ma.batch_offsets) - 1) * 16
    assert a[end_a : end_a + table_bytes] == b[end_a : end_a + table_bytes]
    frag = back.get_fragments()[0].metadata.files[0]
    ref_frag = lance.dataset(theirs).get_fragments()[0].metadata.files[0]
    assert (frag.file_major_version, frag.file_minor_version, list(frag.fields), list(frag.column_indices)) == (
        ref_frag.file_major_version, ref_frag.file_minor_version, list(ref_frag.fields), list(ref_frag.column_indices))


@pytest.mark.parametrize("spelling", [{"data_storage_version": "legacy"}, {"data_storage_version": "0.1"},
                                      {"use_legacy_format": True}])
def test_write_spellings(tmp_path: Path, spelling: dict) -> None:
    table = pa.table({"a": [1, 2, 3]})
    ours = lance_gpu.write_dataset(table, str(tmp_path / "ours"), **spelling)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = lance.write_dataset(table, str(tmp_path / "theirs"), **spelling)
    assert ours.data_storage_version == ref.data_storage_version == "0.1"
    assert lance.dataset(str(tmp_path / "ours")).to_table().equals(table)


def test_appends(tmp_path: Path) -> None:
    table = _table(dictionaries=False).drop_columns(["fsl_bool"])
    uri = _pylance_legacy(tmp_path, table, max_rows_per_group=3)
    lance_gpu.write_dataset(table, uri, mode="append", max_rows_per_group=3)
    lance_gpu.write_dataset(table, uri, mode="append", data_storage_version="legacy")
    ref = lance.dataset(uri)
    assert ref.data_storage_version == lance_gpu.dataset(uri).data_storage_version == "0.1"
    once = lance.dataset(_pylance_legacy(tmp_path, table, "once")).to_table()  # as legacy files keep it
    assert ref.to_table().equals(pa.concat_tables([once] * 3))
    assert {(f.file_major_version, f.file_minor_version) for fr in ref.get_fragments() for f in fr.metadata.files} == {(0, 2)}
    lance.write_dataset(table, uri, mode="append")  # pylance appends after ours
    assert lance_gpu.dataset(uri).to_table().equals(pa.concat_tables([once] * 4))


@pytest.mark.parametrize(("first", "then"), [("legacy", "2.1"), ("legacy", "stable"), ("legacy", "2.0"), ("2.2", "legacy"),
                                             ("2.0", "0.1")])
def test_v1_and_v2_files_do_not_mix(tmp_path: Path, first: str, then: str) -> None:
    table = pa.table({"a": [1, 2]})
    ref_uri, our_uri = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(table, ref_uri, data_storage_version=first)
    lance_gpu.write_dataset(table, our_uri, data_storage_version=first)
    with pytest.raises(OSError) as theirs:
        lance.write_dataset(table, ref_uri, mode="append", data_storage_version=then)
    with pytest.raises(OSError) as ours:
        lance_gpu.write_dataset(table, our_uri, mode="append", data_storage_version=then)
    assert isinstance(ours.value, LegacyFormatError)
    assert "V1 and V2 storage versions cannot be mixed" in str(theirs.value)
    assert "V1 and V2 storage versions cannot be mixed" in str(ours.value)
    with pytest.raises(OSError):
        lance.fragment.write_fragments(table, ref_uri, data_storage_version=then)
    with pytest.raises(OSError):
        lance_gpu.fragment.write_fragments(table, our_uri, data_storage_version=then)
    assert lance.dataset(our_uri).to_table().equals(table)  # nothing was committed


def test_write_fragments_and_create(tmp_path: Path) -> None:
    table = pa.table({"a": pa.array(range(6), pa.int32()), "s": [f"x{i}" for i in range(6)]})
    uri = str(tmp_path / "ds")
    frags = lance_gpu.fragment.write_fragments(table, uri, data_storage_version="legacy", max_rows_per_group=4)
    assert [(f.files[0].file_major_version, f.files[0].file_minor_version) for f in frags] == [(0, 2)]
    assert list(frags[0].files[0].column_indices) == []
    ds = lance_gpu.LanceDataset.commit(uri, lance_gpu.LanceOperation.Overwrite(table.schema, frags))
    assert ds.data_storage_version == lance.dataset(uri).data_storage_version == "0.1"
    # appends to a legacy dataset write legacy files without being asked
    more = lance_gpu.fragment.write_fragments(table, uri)
    assert (more[0].files[0].file_major_version, more[0].files[0].file_minor_version) == (0, 2)
    ref_more = lance.fragment.write_fragments(table, uri)
    assert (ref_more[0].files[0].file_major_version, ref_more[0].files[0].file_minor_version) == (0, 2)
    made = lance_gpu.LanceFragment.create(uri, table, data_storage_version="legacy")
    ref_made = lance.LanceFragment.create(uri, table, data_storage_version="legacy")
    assert (made.files[0].file_major_version, made.files[0].file_minor_version) == (
        ref_made.files[0].file_major_version, ref_made.files[0].file_minor_version)
    ds = lance_gpu.LanceDataset.commit(uri, lance_gpu.LanceOperation.Append([*more, made]), read_version=ds.version)
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([table] * 3))
    assert ds.to_table().equals(lance.dataset(uri).to_table())


def test_rewrites_of_a_legacy_dataset_stay_legacy(tmp_path: Path) -> None:
    table = pa.table({"x": pa.array(range(20), pa.int64()), "s": [f"v{i}" for i in range(20)]})
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(table, uri, data_storage_version="legacy", max_rows_per_file=5)
    ds = lance_gpu.dataset(uri)
    ds.delete("x = 3")
    ds.add_columns({"y": "x * 2"})
    ds.update({"s": "'z'"}, where="x < 2")
    ds.optimize.compact_files()
    ref = lance.dataset(uri)
    assert ref.data_storage_version == "0.1"
    assert {(f.file_major_version, f.file_minor_version) for fr in ref.get_fragments() for f in fr.metadata.files} == {(0, 2)}
    assert lance_gpu.dataset(uri).to_table().equals(ref.to_table())
    expected = table.filter(pa.compute.not_equal(table["x"], 3))
    assert sorted(ref.to_table()["x"].to_pylist()) == expected["x"].to_pylist()
    assert ref.to_table(filter="x < 2")["s"].to_pylist() == ["z", "z"]
    lance_gpu.dataset(uri).validate()
    ours_stats = [(f.id, f.bytes_on_disk) for f in lance_gpu.dataset(uri).stats.data_stats().fields]
    assert ours_stats == [(f.id, f.bytes_on_disk) for f in ref.stats.data_stats().fields]


# --------------------------------------------------------------------------------------------
# What legacy files cannot hold
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "column",
    [pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32())), pa.array([{}, {}], pa.struct([]))],
    ids=["map", "empty_struct"],
)
def test_refused_like_pylance(tmp_path: Path, column: pa.Array) -> None:
    table = pa.table({"c": column})
    with pytest.raises(OSError):
        lance.write_dataset(table, str(tmp_path / "theirs"), data_storage_version="legacy")
    with pytest.raises(OSError) as info:
        lance_gpu.write_dataset(table, str(tmp_path / "ours"), data_storage_version="legacy")
    assert isinstance(info.value, LegacyFormatError)
    assert not (tmp_path / "ours" / "_versions").exists() or not any((tmp_path / "ours" / "_versions").iterdir())


def test_dictionaries(tmp_path: Path) -> None:
    """Dictionary values go to the data files and, as pylance keeps them, to every manifest
    file of a legacy dataset; appends must bring the same dictionary (pylance's OSError)."""
    table = pa.table({**_dictionaries(), "x": pa.array(range(N), pa.int64())})
    ours, theirs = str(tmp_path / "ours"), _pylance_legacy(tmp_path, table, max_rows_per_group=4)
    lance_gpu.write_dataset(table, ours, data_storage_version="legacy", max_rows_per_group=4, max_rows_per_file=6)
    expected = lance.dataset(theirs).to_table()
    assert lance.dataset(ours).to_table().equals(expected)
    assert lance.dataset(ours).schema == lance.dataset(theirs).schema
    for uri in (ours, theirs):
        lance_gpu.write_dataset(table, uri, mode="append")
        lance_gpu.dataset(uri).delete("x = 1")
        ref = lance.dataset(uri)
        assert ref.count_rows() == 2 * N - 2
        assert ref.to_table().equals(lance_gpu.dataset(uri).to_table())
        other = pa.table({"dict_str": pa.array(["p", "q"]).dictionary_encode(),
                          "dict_int": pa.array([1, 2], pa.int64()).dictionary_encode(), "x": pa.array([1, 2], pa.int64())})
        with pytest.raises(OSError, match="dictionary"):
            lance.write_dataset(other, uri, mode="append")
        with pytest.raises(OSError, match="dictionary"):
            lance_gpu.write_dataset(other, uri, mode="append")


@pytest.mark.parametrize("storage", ["legacy", "2.0", "2.1"])
def test_overwrite_keeps_the_storage_version(tmp_path: Path, storage: str) -> None:
    table = pa.table({"a": [1, 2]})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_gpu.write_dataset(table, ours, data_storage_version=storage)
    lance.write_dataset(table, theirs, data_storage_version=storage)
    assert (lance_gpu.write_dataset(table, ours, mode="overwrite").data_storage_version
            == lance.write_dataset(table, theirs, mode="overwrite").data_storage_version)
    assert (lance_gpu.write_dataset(table, ours, mode="overwrite", data_storage_version="2.1").data_storage_version
            == lance.write_dataset(table, theirs, mode="overwrite", data_storage_version="2.1").data_storage_version == "2.1")


# --------------------------------------------------------------------------------------------
# The storage version reported
# --------------------------------------------------------------------------------------------


def test_cli_info_reports_the_storage_version(tmp_path: Path) -> None:
    uri = _pylance_legacy(tmp_path, pa.table({"a": [1, 2]}))
    out = subprocess.run([sys.executable, "-m", "lance_gpu", "info", uri, "--json"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    info = json.loads(out.stdout)
    assert info["data_storage_version"] == lance.dataset(uri).data_storage_version == "0.1"
    assert info["file_versions"] == ["0.2"]


def test_a_version_mixing_v1_and_v2_files_is_refused(tmp_path: Path) -> None:
    data = pa.table({"a": pa.array(range(8), pa.int64())})
    ref_uri, our_uri = str(tmp_path / "theirs"), str(tmp_path / "ours")
    refused = []
    for mod, uri in ((lance, ref_uri), (lance_gpu, our_uri)):
        ds = mod.write_dataset([], uri, schema=data.schema, data_storage_version="stable")
        frags = [mod.LanceFragment.create(ds.uri, data, data_storage_version="legacy"),
                 mod.LanceFragment.create(ds.uri, data, data_storage_version="stable")]
        with pytest.raises(OSError, match="mixes V1 and V2 data files") as info:
            mod.LanceDataset.commit(uri, mod.LanceOperation.Overwrite(ds.schema, frags))
        refused.append(info.value)
        assert mod.dataset(uri).version == 1
    assert isinstance(refused[1], LegacyFormatError)


def test_mixing_is_checked_from_the_base_kinds_and_the_touched_fragments(tmp_path: Path) -> None:
    """A commit knows its base's kinds of data files (found when the manifest was read, or
    by the commit that wrote it) and joins them with the fragments it adds: appending a
    legacy fragment to a V2 dataset is refused as pylance refuses it, without a loop over
    every fragment; replacing every fragment of a legacy dataset by V2 ones is not."""
    data = pa.table({"a": pa.array(range(8), pa.int64())})
    for mod, uri in ((lance, str(tmp_path / "theirs")), (lance_gpu, str(tmp_path / "ours"))):
        ds = mod.write_dataset(data, uri, data_storage_version="stable")
        legacy = mod.LanceFragment.create(ds.uri, data, data_storage_version="legacy")
        with pytest.raises(OSError, match="mixes V1 and V2 data files"):
            mod.LanceDataset.commit(uri, mod.LanceOperation.Append([legacy]), read_version=ds.version)
        assert mod.dataset(uri).count_rows() == 8
        old = mod.write_dataset(data, uri + "_legacy", data_storage_version="legacy")
        v2 = mod.LanceFragment.create(old.uri, data, data_storage_version="stable")
        replaced = mod.LanceDataset.commit(old.uri, mod.LanceOperation.Overwrite(old.schema, [v2]), read_version=old.version)
        assert replaced.count_rows() == 8
        appended = mod.LanceDataset.commit(old.uri, mod.LanceOperation.Append(
            [mod.LanceFragment.create(old.uri, data, data_storage_version="stable")]), read_version=replaced.version)
        assert appended.count_rows() == 16


def test_batches_with_other_dictionaries_share_the_first(tmp_path: Path) -> None:
    """A write whose batches carry different dictionaries: every file holds the first
    batch's dictionary and the other batches are re-encoded with it (pylance 14 keeps their
    indices, which then point at the wrong values: ``['u', 'v', 'u', 'v']`` here)."""
    batches = [pa.record_batch({"d": pa.array(v).dictionary_encode()}) for v in (["u", "v"], ["v", "u"], ["u"])]
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(pa.Table.from_batches(batches), uri, data_storage_version="legacy", max_rows_per_group=2,
                            max_rows_per_file=3)
    assert lance.dataset(uri).to_table()["d"].to_pylist() == ["u", "v", "v", "u", "u"]
    assert lance_gpu.dataset(uri).to_table().equals(lance.dataset(uri).to_table())
    with pytest.raises(OSError, match="dictionary"):
        lance_gpu.write_dataset(pa.table({"d": pa.chunked_array([b["d"] for b in batches] + [pa.array(["w"]).dictionary_encode()])}),
                                str(tmp_path / "grows"), data_storage_version="legacy", max_rows_per_group=2)


def test_single_file_api_refuses_legacy_files_as_pylance(tmp_path: Path) -> None:
    uri = _pylance_legacy(tmp_path, pa.table({"a": [1, 2]}))
    path = str(_data_files(uri)[0])
    with pytest.raises(OSError):
        lance.file.LanceFileReader(path)
    with pytest.raises(OSError, match="legacy"):
        lance_gpu.file.LanceFileReader(path).read_all()
    with pytest.raises(NotImplementedError):
        lance.file.LanceFileWriter(str(tmp_path / "theirs.lance"), version="legacy")
    with pytest.raises(NotImplementedError):
        lance_gpu.file.LanceFileWriter(str(tmp_path / "ours.lance"), version="legacy")


def test_extension_types(tmp_path: Path) -> None:
    """JSON columns are stored as JSONB documents (as pylance stores them) and read back as
    ``arrow.json``; other extension types (a tensor) as their storage."""
    table = pa.table({
        "j": pa.array(['{"a": 1}', None, "[2, 3]", '"s"'], pa.json_()),
        "t": pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(16, dtype=np.float32).reshape(4, 2, 2)),
    })
    theirs = _pylance_legacy(tmp_path, table)
    ours = str(tmp_path / "ours")
    lance_gpu.write_dataset(table, ours, data_storage_version="legacy")
    expected = lance.dataset(theirs).to_table()
    assert lance_gpu.dataset(theirs).to_table().equals(expected)
    assert lance.dataset(ours).to_table().equals(expected)
    assert lance_gpu.dataset(ours).take([3, 1]).equals(lance.dataset(theirs).take([3, 1]))
    (mine,), (ref,) = _data_files(ours), _data_files(theirs)
    a, b = mine.read_bytes(), ref.read_bytes()
    end = _metadata(b).page_table_position
    assert _metadata(a).page_table_position == end and a[:end] == b[:end]
