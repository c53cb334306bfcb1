# SPDX-License-Identifier: Apache-2.0
"""Strict reads: the reliability probe's cases of wrong data without an error, and of
untyped errors, each on pylance-written bytes (issue 17, items 1-3).

* strings with invalid UTF-8, and a binary mini-block chunk whose offsets were zeroed;
* a manifest field with the wrong wire type (python protobuf would drop it silently);
* a fragment row count that disagrees with its data file (to_table, take);
* an unknown data-storage version, a NUL byte in a data file path;
* a deletion file holding another type than uint32.

Every one raises ``CorruptFileError`` (a ``ValueError``) naming the file.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, LanceGpuError, RowIndexError
from lance_gpu.table.manifest import MANIFEST_FOOTER_SIZE

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")

VERSIONS = ["2.0", "2.1", "2.2"]


def _table(n: int = 400) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "s": pa.array([f"row{i:04d}-MARKER-é" for i in range(n)]),
            "b": pa.array([f"bin{i:04d}".encode() for i in range(n)], pa.binary()),
        }
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    lance = pytest.importorskip("lance")
    root = tmp_path_factory.mktemp("strict")
    out = {}
    for v in VERSIONS:
        uri = root / f"ds_{v}"
        lance.write_dataset(_table(), str(uri), data_storage_version=v, max_rows_per_file=200)
        lance.dataset(str(uri)).delete("id = 3")
        out[v] = uri
    return out


@pytest.fixture
def copy(pristine: dict[str, Path], tmp_path: Path):
    def make(version: str) -> Path:
        dst = tmp_path / f"ds_{version}"
        shutil.copytree(pristine[version], dst)
        return dst

    return make


def _data_files(uri: Path) -> list[Path]:
    return sorted(Path(uri, "data").glob("*.lance"))


def _manifest_path(uri: Path) -> Path:
    return Path(lance_gpu.dataset(uri).snapshot.manifest_path)


def _rewrite_manifest(uri: Path, edit, path: Path | None = None) -> Path:
    """Replace the latest manifest's Manifest message (or ``path``'s) by ``edit(manifest) -> bytes``."""
    path = path or _manifest_path(uri)
    raw = path.read_bytes()
    (pos,) = struct.unpack_from("<Q", raw, len(raw) - MANIFEST_FOOTER_SIZE)
    (length,) = struct.unpack_from("<I", raw, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(raw[pos + 4 : pos + 4 + length])
    body = edit(manifest)
    path.write_bytes(raw[:pos] + struct.pack("<I", len(body)) + body + raw[len(raw) - MANIFEST_FOOTER_SIZE :])
    return path


def _read_all(uri: Path, device: str = "cpu") -> None:
    ds = lance_gpu.dataset(uri, device=device)
    ds.to_table()
    ds.take([0, 1, 150, 250])
    for _ in ds.to_batches(batch_size=64):
        pass


def _raises_naming(uri: Path, name: object, *, match: str | None = None, device: str = "cpu") -> CorruptFileError:
    with pytest.raises(CorruptFileError, match=match) as info:
        _read_all(uri, device)
    assert str(name) in str(info.value), info.value
    assert isinstance(info.value, ValueError)
    return info.value


# -- 1. decoded data is valid Arrow --------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_invalid_utf8_is_corrupt(copy, version):
    uri = copy(version)
    f = next(f for f in _data_files(uri) if b"row0000-MARKER" in f.read_bytes())
    raw = bytearray(f.read_bytes())
    i = raw.find(b"MARKER")
    assert i > 0, "string bytes are stored plainly in this small file"
    raw[i] = 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="invalid utf-8 sequence") as info:
        lance_gpu.dataset(uri, device="cpu").to_table()
    assert str(f) in str(info.value) and "column 1 page 0" in str(info.value)
    # streamed: each batch is a run sliced from decoded chunks, still checked
    with pytest.raises(CorruptFileError, match="invalid utf-8 sequence"):
        list(lance_gpu.dataset(uri, device="cpu").to_batches(batch_size=64))
    # the bad value is not needed by this take: the rows come back, valid
    rows = lance_gpu.dataset(uri, device="cpu").take([250, 260])
    rows.validate(full=True)


@pytest.mark.parametrize("version", ["2.0", "2.1"])  # 2.2 compresses the dictionary
def test_invalid_utf8_in_a_dictionary_is_corrupt(tmp_path, version):
    """A dictionary page is validated once, its dictionary, not each expanded value: a bad
    dictionary item is still found, and a sound dictionary reads as pylance reads it."""
    lance = pytest.importorskip("lance")
    uri = tmp_path / "dict"
    words = [f"DICTWORD{i}-é" for i in range(4)]
    tbl = pa.table({"d": pa.array([words[i % 4] for i in range(3000)])})
    lance.write_dataset(tbl, str(uri), data_storage_version=version)
    assert lance_gpu.dataset(uri, device="cpu").to_table().equals(lance.dataset(str(uri)).to_table())
    (f,) = _data_files(uri)
    raw = bytearray(f.read_bytes())
    assert raw.count(b"DICTWORD2") == 1, "the column is dictionary-encoded, items stored plainly"
    raw[raw.find(b"DICTWORD2")] = 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="invalid utf-8 sequence") as info:
        lance_gpu.dataset(uri, device="cpu").to_table()
    assert str(f) in str(info.value)


@pytest.mark.parametrize("version", ["2.1"])  # 2.2 compresses this column's chunks
def test_binary_miniblock_with_zeroed_offsets_is_corrupt(copy, version):
    uri = copy(version)
    f = next(f for f in _data_files(uri) if b"bin0000bin0001" in f.read_bytes())
    raw = bytearray(f.read_bytes())
    data_pos = raw.find(b"bin0000bin0001")
    # the chunk's u32 offsets end where its bytes begin; offsets[0] == 4 * (count + 1)
    start = next(
        data_pos - 4 * (c + 1)
        for c in range(1, 4096)
        if struct.unpack_from("<I", raw, data_pos - 4 * (c + 1))[0] == 4 * (c + 1)
    )
    raw[start:data_pos] = bytes(data_pos - start)
    f.write_bytes(bytes(raw))
    _raises_naming(uri, f, match="offsets")


# -- 2. metadata parsed strictly ----------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_manifest_field_with_wrong_wire_type_is_corrupt(copy):
    """A schema field re-tagged as field 3 (``version``, a varint) keeps its bytes but would
    vanish from the schema: the column would silently disappear."""
    uri = copy("2.2")

    def retag(m: table_pb2.Manifest) -> bytes:
        field = m.fields[1]
        assert field.name == "s"
        payload = field.SerializeToString()
        del m.fields[1]
        return m.SerializeToString() + b"\x1a" + _varint(len(payload)) + payload

    path = _rewrite_manifest(uri, retag)
    with pytest.raises(CorruptFileError, match="wrong wire type") as info:
        lance_gpu.dataset(uri)
    assert str(path) in str(info.value) and "Manifest.version" in str(info.value)


def test_unknown_fields_of_unknown_numbers_stay_allowed(copy):
    uri = copy("2.2")
    _rewrite_manifest(uri, lambda m: m.SerializeToString() + b"\xf8\x3e\x01")  # field 1007, varint
    assert lance_gpu.dataset(uri).to_table().num_rows == 399


def test_parse_strict_proof_and_full_check_agree():
    """``parse_strict`` accepts bytes that are exactly their known fields' encoding at C speed
    and walks the tree otherwise: an encoding protobuf would not write (an overlong varint,
    fields out of order, an undeclared field) still parses, a misplaced field inside a nested
    message is still refused."""
    from lance_gpu.protobuf import canonical_without_unknowns, parse_strict

    frag = table_pb2.DataFragment(id=3, physical_rows=7, files=[table_pb2.DataFile(path="a.lance", fields=[0, 1], file_size_bytes=9)])
    canonical = frag.SerializeToString()
    assert canonical_without_unknowns(table_pb2.DataFragment, canonical)
    overlong = b"\x08\x83\x00" + canonical[2:]  # id 3 as a two-byte varint
    reordered = canonical[2:] + canonical[:2]
    undeclared = canonical + b"\xf8\x3e\x01"  # field 1007, a varint
    for data in (overlong, reordered, undeclared):
        assert not canonical_without_unknowns(table_pb2.DataFragment, data)
        assert parse_strict(table_pb2.DataFragment, data, "p", "fragment").physical_rows == 7
    misplaced_file = table_pb2.DataFile(path="a.lance").SerializeToString() + b"\x32\x01\x00"  # size (6) length-delimited
    bad = canonical + b"\x12" + _varint(len(misplaced_file)) + misplaced_file
    assert not canonical_without_unknowns(table_pb2.DataFragment, bad)
    with pytest.raises(CorruptFileError, match=r"DataFragment\.files\.file_size_bytes"):
        parse_strict(table_pb2.DataFragment, bad, "p", "fragment")
    assert not canonical_without_unknowns(table_pb2.DataFragment, b"\x0a\x05ab")  # truncated


@pytest.mark.parametrize("version", VERSIONS)
def test_row_count_disagreeing_with_data_file_is_corrupt(copy, version):
    uri = copy(version)

    def grow(m: table_pb2.Manifest) -> bytes:
        m.fragments[1].physical_rows += 50
        return m.SerializeToString()

    _rewrite_manifest(uri, grow)
    ds = lance_gpu.dataset(uri, device="cpu")
    frag = ds.get_fragment(1)
    calls = (ds.to_table, lambda: ds.take([440]), lambda: list(ds.to_batches()), lambda: frag.to_table())
    for call in calls:
        with pytest.raises(CorruptFileError, match="holds 200 rows but fragment"):
            call()
    # counting without a filter reads no data file: the manifest's counts, as pylance's
    lance = pytest.importorskip("lance")
    assert ds.count_rows() == lance.dataset(str(uri)).count_rows() == 449
    assert frag.count_rows() == lance.dataset(str(uri)).get_fragment(1).count_rows() == 250
    # the sound fragment still reads, on its own and through a dataset-wide take of its rows:
    # positions come from the manifest's counts, as pylance's, and only the files read are
    # checked (a take over many small fragments opens only those it reads)
    assert ds.get_fragment(0).to_table().num_rows == 199  # one row of it deleted
    assert ds.get_fragment(0).count_rows() == 199
    assert ds.take([5, 198]).equals(lance.dataset(str(uri)).take([5, 198]))
    with pytest.raises(CorruptFileError, match="holds 200 rows but fragment"):
        ds.take([5, 199])  # position 199: the first row of the lying fragment


@pytest.mark.parametrize("version", VERSIONS)
def test_count_rows_over_any_corrupted_row_count(copy, version):
    """Mutation-suite style: ``physical_rows`` of one fragment rewritten to parseable wrong
    values; every read raises the typed error, ``count_rows`` without a filter trusts the
    manifest as pylance's does (and answers as pylance), and the pristine count comes back
    once repaired.  A count below the fragment's deletions is refused when the manifest loads."""
    lance = pytest.importorskip("lance")
    uri = copy(version)
    pristine = lance_gpu.dataset(uri, device="cpu").count_rows()
    seen: list[int] = []
    path = _rewrite_manifest(uri, lambda m: seen.append(int(m.fragments[0].physical_rows)) or m.SerializeToString())
    raw = seen[0]
    for bad in (0, 1, raw - 1, raw + 1, 1 << 31, (1 << 63) - 1):
        def set_rows(m: table_pb2.Manifest, bad: int = bad) -> bytes:
            m.fragments[0].physical_rows = bad
            return m.SerializeToString()

        _rewrite_manifest(uri, set_rows, path)
        if bad == 0:  # fewer rows than the deletions: refused when the manifest loads
            with pytest.raises(CorruptFileError, match=r"fragment 0 deletes"):
                lance_gpu.dataset(uri, device="cpu")
            continue
        ds = lance_gpu.dataset(uri, device="cpu")
        if ds.get_fragment(0).count_rows() == 0:
            # position 0 is then the next fragment's first row, as pylance positions it (from
            # the manifest's counts);
            # the lying fragment is not read (with no other row, both refuse the position)
            try:
                want = lance.dataset(str(uri)).take([0])
            except (OSError, ValueError, IndexError):
                with pytest.raises(RowIndexError):
                    ds.take([0])
            else:
                assert ds.take([0]).equals(want)
        else:
            with pytest.raises(CorruptFileError, match=r"fragment 0 has"):
                ds.take([0])
        for call in ("to_table", "fragment.to_table"):
            with pytest.raises(CorruptFileError, match=r"fragment 0 has"):
                ds = lance_gpu.dataset(uri, device="cpu")
                if call == "fragment.to_table":
                    ds.get_fragment(0).to_table()
                else:
                    getattr(ds, call)()
        ds = lance_gpu.dataset(uri, device="cpu")
        ref = lance.dataset(str(uri))
        assert ds.count_rows() == ref.count_rows() == pristine - raw + bad
        assert ds.get_fragment(0).count_rows() == ref.get_fragment(0).count_rows()

    def repair(m: table_pb2.Manifest) -> bytes:
        m.fragments[0].physical_rows = raw
        return m.SerializeToString()

    _rewrite_manifest(uri, repair, path)
    assert lance_gpu.dataset(uri, device="cpu").count_rows() == pristine


@pytest.mark.parametrize("version", VERSIONS)
def test_take_over_a_deletion_count_the_deletion_file_denies(copy, version):
    """A take maps positions by the manifest's live counts (no data or deletion file opened
    for that, as pylance's); a fragment whose manifest says its deletion file deletes more
    rows than it does raises the typed error when the take reads it, never rows shifted by
    the difference, and a take of other fragments' rows still reads."""
    lance = pytest.importorskip("lance")
    uri = copy(version)

    def more_deleted(m: table_pb2.Manifest) -> bytes:
        assert m.fragments[0].deletion_file.num_deleted_rows == 1
        m.fragments[0].deletion_file.num_deleted_rows = 2
        return m.SerializeToString()

    _rewrite_manifest(uri, more_deleted)
    ds = lance_gpu.dataset(uri, device="cpu")
    assert ds.count_rows() == lance.dataset(str(uri)).count_rows() == 398
    with pytest.raises(CorruptFileError, match="holds 1 deleted rows but the manifest says 2"):
        ds.take([3, 250])
    assert ds.take([250, 198]).equals(lance.dataset(str(uri)).take([250, 198]))


def test_unknown_data_storage_version_is_refused(copy):
    uri = copy("2.1")

    def garble(m: table_pb2.Manifest) -> bytes:
        m.data_format.version = "2.\x07"
        return m.SerializeToString()

    path = _rewrite_manifest(uri, garble)
    with pytest.raises(CorruptFileError, match="unknown data storage version") as info:
        lance_gpu.dataset(uri)
    assert str(path) in str(info.value)


def test_unknown_data_file_version_is_refused(copy):
    uri = copy("2.1")

    def garble(m: table_pb2.Manifest) -> bytes:
        m.fragments[0].files[0].file_minor_version = 9
        return m.SerializeToString()

    _rewrite_manifest(uri, garble)
    with pytest.raises(CorruptFileError, match="unknown file version 2.9"):
        lance_gpu.dataset(uri)


def test_field_id_not_in_the_data_files_schema_is_corrupt(copy):
    uri = copy("2.1")

    names = []

    def renumber(m: table_pb2.Manifest) -> bytes:
        df = m.fragments[0].files[0]
        names.append(df.path)
        ids = list(df.fields)
        df.fields[:] = [ids[0], ids[2], ids[1]]  # swapped: ids still unique, columns crossed
        df.fields[1] = 17
        return m.SerializeToString()

    _rewrite_manifest(uri, renumber)
    _raises_naming(uri, names[0], match="field ids")


# -- 3. every bad-byte failure typed ------------------------------------------------------------


def test_nul_byte_in_data_file_path_is_corrupt(copy):
    uri = copy("2.2")

    def nul(m: table_pb2.Manifest) -> bytes:
        m.fragments[0].files[0].path = m.fragments[0].files[0].path[:5] + "\x00x.lance"
        return m.SerializeToString()

    path = _rewrite_manifest(uri, nul)
    with pytest.raises(CorruptFileError, match="invalid data file path") as info:
        lance_gpu.dataset(uri)
    assert str(path) in str(info.value)


def test_deletion_file_of_the_wrong_type_is_corrupt(copy):
    uri = copy("2.2")
    files = sorted(Path(uri, "_deletions").glob("*.arrow"))
    assert files
    sink = pa.BufferOutputStream()
    tbl = pa.table({"row_id": pa.array([3], pa.int64())})
    with pa.ipc.new_file(sink, tbl.schema) as w:
        w.write_table(tbl)
    files[0].write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(CorruptFileError, match="uint32") as info:
        lance_gpu.dataset(uri).to_table()
    assert str(files[0]) in str(info.value)


def test_deletion_file_with_a_damaged_field_name_is_corrupt(copy):
    uri = copy("2.2")
    files = sorted(Path(uri, "_deletions").glob("*.arrow"))
    assert files
    raw = files[0].read_bytes()
    assert b"row_id" in raw
    files[0].write_bytes(raw.replace(b"row_id", b"\xc0ow_id"))  # the name is no longer UTF-8
    with pytest.raises(CorruptFileError, match="damaged Arrow schema") as info:
        lance_gpu.dataset(uri).to_table()
    assert str(files[0]) in str(info.value)


def test_pristine_datasets_read_as_pylance_reads_them(pristine):
    lance = pytest.importorskip("lance")
    for uri in pristine.values():
        ours = lance_gpu.dataset(uri, device="cpu").to_table()
        ours.validate(full=True)
        assert ours.equals(lance.dataset(str(uri)).to_table())


def test_errors_are_lance_gpu_errors():
    assert issubclass(CorruptFileError, LanceGpuError) and issubclass(CorruptFileError, ValueError)
    assert os.sep  # (keeps the module's imports honest on every platform)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_invalid_utf8_is_corrupt_on_the_device(copy, version):
    """The device decode validates strings in one launch per unit (run on a GPU, or under the
    simulator with ``NUMBA_ENABLE_CUDASIM=1 LANCE_GPU_TEST_SIM_DEVICE=1``)."""
    uri = copy(version)
    assert lance_gpu.dataset(uri, device="gpu").to_table().equals(lance_gpu.dataset(uri, device="cpu").to_table())
    f = next(f for f in _data_files(uri) if b"row0000-MARKER" in f.read_bytes())
    raw = bytearray(f.read_bytes())
    raw[raw.find(b"MARKER")] = 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="invalid utf-8 sequence") as info:
        lance_gpu.dataset(uri, device="gpu").to_table()
    assert str(f) in str(info.value) and "column 1 page 0" in str(info.value)
