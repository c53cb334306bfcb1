# SPDX-License-Identifier: Apache-2.0
"""Bad input: every failure is one of our error classes, naming the file at fault.

Never an IndexError / ValueError from numpy, a crash, a hang, or silently wrong data where
the damage is structural.  Random damage to page *values* may legitimately decode to other
values, so the fuzz cases accept either an error of ours or a result — but nothing else.
The fuzz runs in a child process so that a crash or a hang fails the test instead of the
whole session.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    LanceGpuError,
    UnsupportedEncodingError,
    UnsupportedFeatureError,
)

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")

VERSIONS = ["2.0", "2.1", "2.2"]
FOOTER = 40


def _table(n: int = 3000) -> pa.Table:
    rng = np.random.default_rng(11)
    words = ["alpha", "beta", "gamma", "delta"]
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "i32": pa.array(rng.integers(-1000, 1000, n).astype(np.int32), mask=rng.random(n) < 0.1),
            "f": pa.array(rng.standard_normal(n)),
            "s": pa.array([f"{words[i % 4]}-{int(x)}" for i, x in enumerate(rng.integers(0, 10**6, n))]),
            "cat": pa.array([words[i] for i in rng.integers(0, 4, n)]),
            "long": pa.array([f"{i:05d}" + "xyz" * 100 for i in range(n)], mask=rng.random(n) < 0.05),
            "li": pa.array([list(range(i % 5)) if i % 7 else None for i in range(n)], pa.list_(pa.int32())),
            "st": pa.StructArray.from_arrays(
                [pa.array(np.arange(n, dtype=np.int32)), pa.array([words[i % 4] for i in range(n)])], names=["a", "b"]
            ),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 64).astype(np.float32)), 64),
        }
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small dataset per storage version (2 fragments, a deletion), written by pylance."""
    lance = pytest.importorskip("lance")
    root = tmp_path_factory.mktemp("read_errors")
    out = {}
    for v in VERSIONS:
        uri = root / f"ds_{v}"
        lance.write_dataset(_table(), str(uri), data_storage_version=v, max_rows_per_file=2000)
        lance.dataset(str(uri)).delete("id % 100 = 7")
        out[v] = uri
    return out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _data_files(uri: Path) -> list[Path]:
    return sorted(Path(uri, "data").glob("*.lance"))


def _latest_manifest(uri: Path) -> Path:
    ds = lance_gpu.dataset(uri)
    return Path(ds.snapshot.manifest_path)


def _read_everything(uri: Path) -> None:
    ds = lance_gpu.dataset(uri)
    ds.to_table()
    n = ds.count_rows()
    if n:
        ds.take([0, n - 1, n // 2])
    for _ in ds.to_batches(batch_size=700):
        pass


def _expect(exc_type: type[LanceGpuError], uri: Path, names: Path | str, *, read: bool = True) -> LanceGpuError:
    """Opening (and reading) ``uri`` raises ``exc_type``, and its message names ``names``."""
    with pytest.raises(LanceGpuError) as info:
        if read:
            _read_everything(uri)
        else:
            lance_gpu.dataset(uri)
    err = info.value
    assert isinstance(err, exc_type), f"{type(err).__name__}: {err}"
    assert str(names) in str(err), f"{err!s} does not name {names}"
    return err


def _page_buffers(path: Path) -> list[tuple[int, int, int]]:
    """(column, offset, size) of every non-empty page buffer of a data file."""
    from lance_gpu.file.container import LanceFileReader

    reader = LanceFileReader(path)
    out = []
    for ci in range(reader.num_columns):
        for page in reader.column(ci).pages:
            out.extend((ci, o, s) for o, s in zip(page.buffer_offsets, page.buffer_sizes) if s)
    reader.close()
    return out


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


# --------------------------------------------------------------------------------------------
# Data files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("keep", [0.5, 0.97, "minus10"])
def test_truncated_data_file(pristine, tmp_path: Path, version: str, keep) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    size = f.stat().st_size
    os.truncate(f, size - 10 if keep == "minus10" else int(size * keep))
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_to_almost_nothing(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    for size in (0, 3, 20):
        os.truncate(f, size)
        _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_wrong_magic(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[1]
    _patch(f, f.stat().st_size - 4, b"LANX")
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_footer_version(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    _patch(f, f.stat().st_size - 8, struct.pack("<HH", 7, 9))
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_footer_offsets_out_of_range(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    size = f.stat().st_size
    _patch(f, size - FOOTER, struct.pack("<Q", size * 3))
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_data_file(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    f.unlink()
    _expect(DatasetNotFoundError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_column_metadata_garbage(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    size = f.stat().st_size
    with open(f, "rb") as fh:
        fh.seek(size - FOOTER)
        a, b = struct.unpack("<QQ", fh.read(16))
    _patch(f, a, b"\xff" * (b - a))
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_column_metadata_offset_table_garbage(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    size = f.stat().st_size
    with open(f, "rb") as fh:
        fh.seek(size - FOOTER)
        _a, b, c = struct.unpack("<QQQ", fh.read(24))
    _patch(f, b, b"\x7f" * (c - b))
    _expect(CorruptFileError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_page_structure_garbage(pristine, tmp_path: Path, version: str) -> None:
    """Every page buffer of the string column "s" overwritten: offsets / chunk headers no
    longer add up, which must be detected (not decoded into garbage or an IndexError)."""
    uri = _copy(pristine[version], tmp_path)
    f = _data_files(uri)[0]
    ds = lance_gpu.dataset(uri)
    frag = next(fr for fr in ds.fragments if Path(ds.uri, "data", fr.pb.files[0].path) == f)
    field = next(x for x in ds.snapshot.lance_schema.fields if x.name == "s")
    cols = set(frag.snapshot.field_source(field).columns)
    for ci, off, size in _page_buffers(f):
        if ci in cols:
            _patch(f, off, b"\xff" * size)
    _expect(LanceGpuError, uri, f)


@pytest.mark.parametrize("version", VERSIONS)
def test_data_file_row_count_mismatch(pristine, tmp_path: Path, version: str) -> None:
    """A data file swapped for another fragment's (different row count) is refused."""
    uri = _copy(pristine[version], tmp_path)
    f0, f1 = _data_files(uri)[:2]
    shutil.copyfile(f1, f0)
    with pytest.raises(LanceGpuError) as info:
        _read_everything(uri)
    assert str(f0) in str(info.value) or str(f1) in str(info.value)


def _list_page_flips(seed: int, count: int, size: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [tuple(sorted(rng.sample(range(size), 2))) for _ in range(count)]  # type: ignore[misc]


@pytest.mark.parametrize("storage", ["2.1", "2.2"])
def test_list_levels_flipped_bytes_agree_with_pylance(tmp_path: Path, storage: str) -> None:
    """Two bytes flipped in the chunk data of a ``list<int32>`` mini-block page (levels and
    values, null and empty lists among them): wherever pylance raises, so do we (a
    CorruptFileError naming the file), never lists of other lengths.  A flipped repetition
    level that puts an item inside a list its level left null or empty gave offsets that
    disagree with the values; the CPU decode returned it silently (pylance: "Max offset ...
    exceeds length of values")."""
    lance = pytest.importorskip("lance")
    base = tmp_path / "base.lance"
    n = 2000
    lance.write_dataset(
        pa.table({"li": pa.array([list(range(i % 5)) if i % 7 else None for i in range(n)], pa.list_(pa.int32()))}),
        str(base), data_storage_version=storage,
    )
    (f,) = _data_files(base)
    pages = _page_buffers(f)
    assert len(pages) >= 2
    _ci, chunk_off, chunk_size = pages[1]  # buffer 0: chunk metadata, 1: the chunks
    original = f.read_bytes()
    want = lance.dataset(str(base)).to_table()
    uri = tmp_path / "flipped.lance"
    shutil.copytree(base, uri)
    (g,) = _data_files(uri)
    pylance_raised = caught = 0
    for pair in _list_page_flips(7, 80, chunk_size):
        data = bytearray(original)
        for p in pair:
            data[chunk_off + p] ^= 0xFF
        g.write_bytes(bytes(data))
        try:
            lance.dataset(str(uri)).to_table()
        except Exception:
            pylance_raised += 1
        else:
            continue
        try:
            got = lance_gpu.dataset(uri).to_table()
        except CorruptFileError as exc:
            assert str(g) in str(exc)
            caught += 1
            continue
        pytest.fail(f"flipping bytes {pair} of the chunk data: pylance raises, we return "
                    f"{'the same' if got.equals(want) else 'other'} data")
    assert pylance_raised == caught and caught >= 20


def _variable_chunk_starts(raw: bytes, off: int, size: int) -> list[int]:
    """Where a ``Variable`` chunk buffer's ``offsets[0]`` may lie in a mini-block page's
    chunk data: a u32 ``k * 4`` followed by ``k - 1`` more that do not decrease (a superset
    of the true ones; the test below asks pylance which patches are corrupt)."""
    out = []
    for p in range(off, off + size - 8, 4):
        first = struct.unpack_from("<I", raw, p)[0]
        k = first // 4
        if first % 4 or not 2 <= k <= 1024 or p + first > off + size:
            continue
        offsets = struct.unpack_from(f"<{k}I", raw, p)
        if all(a <= b for a, b in itertools.pairwise(offsets)) and offsets[-1] > first:
            out.append(p)
    return out


@pytest.mark.parametrize("storage", ["2.1", "2.2"])
@pytest.mark.parametrize("spans", [True, False])
def test_fsst_chunk_offsets_overlapping_their_values_raise(tmp_path: Path, storage: str, spans: bool, monkeypatch) -> None:
    """A mini-block FSST string chunk whose first offset (where its bytes start, right after
    its ``count + 1`` offsets) is made to point inside the offsets: pylance raises ("value
    region starts at offset 4 which overlaps the 33 requested offsets"), and so must we on
    every read path -- whole files decoded in one pass (and many small files decoded
    together, ``execute.SPANS``), takes and batches -- never strings made of offset bytes
    (tests/test_mutations.py found the one-pass FSST decode missing the check)."""
    lance = pytest.importorskip("lance")
    from lance_gpu.scan import execute

    monkeypatch.setattr(execute, "SPANS", spans)
    rng = np.random.default_rng(3)
    n = 600
    long = [f"{i:05d}" + "".join(map(chr, rng.integers(97, 123, 120))) if i % 9 else None for i in range(n)]
    base = tmp_path / "base.lance"
    lance.write_dataset(pa.table({"long": pa.array(long)}), str(base), data_storage_version=storage, max_rows_per_file=300)
    f = base / "data" / lance.dataset(str(base)).get_fragments()[0].data_files()[0].path  # rows 0..299
    _col, off, size = _page_buffers(f)[1]  # buffer 0: chunk metadata, 1: the chunks
    original = f.read_bytes()
    uri = tmp_path / "patched.lance"
    shutil.copytree(base, uri)
    g = uri / "data" / f.name
    pylance_raised = caught = 0
    for p in _variable_chunk_starts(original, off, size):
        data = bytearray(original)
        struct.pack_into("<I", data, p, 4)
        g.write_bytes(bytes(data))
        try:
            lance.dataset(str(uri)).to_table()
        except Exception:
            pylance_raised += 1
        else:
            continue
        for read in (lambda ds: ds.to_table(), lambda ds: list(ds.to_batches(batch_size=100)), lambda ds: ds.take(list(range(0, 300, 7)))):
            with pytest.raises(CorruptFileError, match="offsets"):
                read(lance_gpu.dataset(uri))
        caught += 1
    assert pylance_raised == caught and caught >= 5


# --------------------------------------------------------------------------------------------
# Manifests, versions, deletion files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("how", ["truncate", "garbage", "empty", "bad_length"])
def test_bad_manifest(pristine, tmp_path: Path, version: str, how: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    m = _latest_manifest(uri)
    data = m.read_bytes()
    if how == "truncate":
        m.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        m.write_bytes(random.Random(5).randbytes(400) + b"\x00\x00\x02\x00LANC")
    elif how == "empty":
        m.write_bytes(b"")
    else:  # the manifest section's length prefix runs past the end
        (pos,) = struct.unpack_from("<Q", data, len(data) - 16)
        m.write_bytes(data[:pos] + struct.pack("<I", 10**6) + data[pos + 4 :])
    _expect(CorruptFileError, uri, m, read=False)


def test_unknown_reader_feature_flag(pristine, tmp_path: Path) -> None:
    from lance_gpu._proto import table_pb2

    uri = _copy(pristine["2.2"], tmp_path)
    m = _latest_manifest(uri)
    data = m.read_bytes()
    (pos,) = struct.unpack_from("<Q", data, len(data) - 16)
    (length,) = struct.unpack_from("<I", data, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(data[pos + 4 : pos + 4 + length])
    manifest.reader_feature_flags |= 1 << 12
    body = manifest.SerializeToString()
    m.write_bytes(data[:pos] + struct.pack("<I", len(body)) + body + data[-16:])
    err = _expect(UnsupportedFeatureError, uri, m, read=False)
    assert "reader" in str(err)


def test_missing_dataset_and_version(tmp_path: Path, pristine) -> None:
    with pytest.raises(DatasetNotFoundError):
        lance_gpu.dataset(tmp_path / "nothing-here")
    with pytest.raises(DatasetNotFoundError) as info:
        lance_gpu.dataset(pristine["2.2"], version=99)
    assert "99" in str(info.value)


def _builtin(exc: BaseException) -> type[BaseException]:
    """The first builtin exception class ``exc`` is an instance of (pylance raises pyarrow's
    ``ArrowInvalid``, a ``ValueError``, or plain ``OSError``)."""
    return next(c for c in type(exc).__mro__ if c.__module__ == "builtins")


_CALLS = {
    "to_table": lambda ds: ds.to_table(),
    "filter": lambda ds: ds.to_table(filter="id > 3"),
    "to_batches": lambda ds: list(ds.to_batches()),
    "take": lambda ds: ds.take([1, 2]),
    "count_rows_filter": lambda ds: ds.count_rows("id > 3"),
}


@pytest.mark.parametrize("missing", ["deletion", "data"])
@pytest.mark.parametrize("call", list(_CALLS))
def test_missing_file_is_file_not_found_and_pylances_builtin(tmp_path: Path, missing: str, call: str) -> None:
    """A data or deletion file the manifest references is gone: the same call on pylance and
    on us raises; ours is a MissingFileError -- a FileNotFoundError, a CorruptFileError, and an
    instance of the builtin pylance raised for that call (ValueError for scans, OSError for
    take and count_rows) -- naming the file."""
    from lance_gpu.errors import MissingFileError

    lance = pytest.importorskip("lance")
    uri = tmp_path / "d.lance"
    lance.write_dataset(pa.table({"id": np.arange(100)}), str(uri))
    lance.dataset(str(uri)).delete("id < 5")
    gone = next(Path(uri, "_deletions" if missing == "deletion" else "data").iterdir())
    gone.unlink()
    with pytest.raises(Exception) as ref:  # noqa: B017 - pylance's class is what is compared
        _CALLS[call](lance.dataset(str(uri)))
    with pytest.raises(MissingFileError) as ours:
        _CALLS[call](lance_gpu.dataset(uri))
    assert isinstance(ours.value, FileNotFoundError) and isinstance(ours.value, CorruptFileError)
    assert isinstance(ours.value, _builtin(ref.value)), (type(ref.value), ref.value)
    assert gone.name in str(ours.value)


@pytest.mark.parametrize("layout", ["nothing", "empty_dir", "other_files", "empty_versions", "a_file"])
def test_not_a_dataset_says_so(tmp_path: Path, layout: str) -> None:
    """A path with no committed version: pylance raises ValueError; ours is a
    DatasetNotFoundError (a FileNotFoundError) that is also a ValueError, and says whether
    nothing is there or a directory that is not a Lance dataset."""
    from lance_gpu.errors import NotADatasetError

    lance = pytest.importorskip("lance")
    uri = tmp_path / "x.lance"
    if layout == "a_file":
        uri.write_bytes(b"PAR1")
    elif layout != "nothing":
        uri.mkdir()
    if layout == "other_files":
        (uri / "data").mkdir()
        (uri / "data" / "part-0.parquet").write_bytes(b"PAR1")
    if layout == "empty_versions":
        (uri / "_versions").mkdir()
    with pytest.raises(Exception) as ref:  # noqa: B017
        lance.dataset(str(uri))
    with pytest.raises(NotADatasetError) as ours:
        lance_gpu.dataset(uri)
    assert isinstance(ours.value, DatasetNotFoundError) and isinstance(ours.value, _builtin(ref.value))
    expected = {
        "nothing": "does not exist",
        "empty_dir": "is not a Lance dataset: no _versions/",
        "other_files": "is not a Lance dataset: no _versions/",
        "empty_versions": "is not a Lance dataset: no committed version in _versions/",
        "a_file": "is not a Lance dataset: no _versions/",
    }[layout]
    assert expected in str(ours.value) and str(uri) in str(ours.value)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_deletion_file_missing_or_garbage(pristine, tmp_path: Path, version: str) -> None:
    uri = _copy(pristine[version], tmp_path)
    deletions = sorted(Path(uri, "_deletions").glob("*"))
    assert deletions
    d = deletions[0]
    d.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(LanceGpuError) as info:
        _read_everything(uri)
    assert str(d) in str(info.value) or d.name in str(info.value)
    d.unlink()
    with pytest.raises(LanceGpuError) as info:
        _read_everything(uri)
    assert d.name in str(info.value)


# --------------------------------------------------------------------------------------------
# Formats we do not read
# --------------------------------------------------------------------------------------------


def test_legacy_dataset(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    uri = tmp_path / "legacy"
    lance.write_dataset(_table(200), str(uri), data_storage_version="legacy")
    f = _data_files(uri)[0]
    err = _expect(UnsupportedEncodingError, uri, f)
    assert "legacy" in str(err)


def test_2_3_dataset(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    uri = tmp_path / "v23"
    lance.write_dataset(_table(200), str(uri), data_storage_version="2.3")
    f = _data_files(uri)[0]
    err = _expect(UnsupportedEncodingError, uri, f)
    assert "2.3" in str(err)


# --------------------------------------------------------------------------------------------
# Random corruption (child process)
# --------------------------------------------------------------------------------------------

FUZZ_CASES = 30
FUZZ_META_CASES = 12


def _fuzz_worker(uris: list[str], seed: int, cases: int, target: str) -> None:
    """Corrupt random bytes ``cases`` times, read, print one JSON line per case, restore."""
    warnings.simplefilter("ignore")
    import traceback

    rng = random.Random(seed)
    for case in range(cases):
        uri = Path(rng.choice(uris))
        f = rng.choice(_data_files(uri))
        original = f.read_bytes()
        size = len(original)
        if target == "pages":
            _ci, off, length = rng.choice(_page_buffers(f))
        else:  # column metadata section
            a, b = struct.unpack_from("<QQ", original, size - FOOTER)
            off, length = a, b - a
        damaged = bytearray(original)
        mode = rng.choice(["bytes", "burst", "bits"])
        if mode == "bytes":
            for _ in range(rng.randint(1, 8)):
                damaged[off + rng.randrange(length)] = rng.randrange(256)
        elif mode == "burst":
            start = off + rng.randrange(length)
            end = min(off + length, start + rng.randint(4, 64))
            damaged[start:end] = bytes(rng.randrange(256) for _ in range(end - start))
        else:
            for _ in range(rng.randint(1, 4)):
                p = off + rng.randrange(length)
                damaged[p] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(damaged))
        record = {"case": case, "file": str(f), "mode": mode, "target": target}
        print(json.dumps({**record, "outcome": "started"}), flush=True)
        try:
            _read_everything(uri)
            record["outcome"] = "ok"
        except LanceGpuError as exc:
            record["outcome"] = "error"
            record["type"] = type(exc).__name__
            record["names_file"] = str(f) in str(exc) or f.name in str(exc)
            record["message"] = str(exc)[:300]
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            record["outcome"] = "foreign"
            record["type"] = type(exc).__name__
            record["message"] = str(exc)[:300]
            record["traceback"] = traceback.format_exc()[-3000:]
        finally:
            f.write_bytes(original)
        print(json.dumps(record), flush=True)


def _run_fuzz(pristine, tmp_path: Path, seed: int, cases: int, target: str) -> list[dict]:
    uris = [str(_copy(pristine[v], tmp_path)) for v in VERSIONS]
    args = [sys.executable, __file__, "fuzz", json.dumps(uris), str(seed), str(cases), target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"fuzz child hung; last lines:\n{out[-2000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = [r for r in lines if r["outcome"] != "started"]
    if proc.returncode != 0:
        started = [r for r in lines if r["outcome"] == "started"]
        last = started[-1] if started else None
        pytest.fail(f"fuzz child died (rc {proc.returncode}) during {last}:\n{proc.stderr[-3000:]}")
    assert len(done) == cases
    foreign = [r for r in done if r["outcome"] == "foreign"]
    assert not foreign, "foreign exceptions:\n" + "\n\n".join(f"{r}\n{r.get('traceback', '')}" for r in foreign)
    unnamed = [r for r in done if r["outcome"] == "error" and not r["names_file"]]
    assert not unnamed, f"errors that do not name the file: {unnamed}"
    return done


def test_random_page_corruption(pristine, tmp_path: Path) -> None:
    results = _run_fuzz(pristine, tmp_path, seed=20261121, cases=FUZZ_CASES, target="pages")
    assert any(r["outcome"] == "error" for r in results)  # the fuzz does hit structure


def test_random_column_metadata_corruption(pristine, tmp_path: Path) -> None:
    _run_fuzz(pristine, tmp_path, seed=7, cases=FUZZ_META_CASES, target="metadata")


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "fuzz":
    _fuzz_worker(json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])


def test_continues_empty_list_finds_the_first_item_inside_a_null_or_empty_list() -> None:
    """The compiled check gives the first position of the definition it states: a level
    below ``restart[def]`` of its own definition level or of the previous one (random
    levels of nullable / emptyable lists of nullable items, one and two list layers)."""
    from lance_gpu.file.page import NULL_AND_EMPTY_LIST, NULLABLE_ITEM, NULLABLE_LIST
    from lance_gpu.file.v2_1.repdef import continues_empty_list, restart_levels

    rng = np.random.default_rng(12)
    shapes = [(NULLABLE_ITEM, NULL_AND_EMPTY_LIST), (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST)]
    found = 0
    for trial in range(300):
        layers = shapes[trial % 2]
        nrep = sum(1 for x in layers if x != NULLABLE_ITEM)
        restart = restart_levels(layers)
        n = int(rng.integers(1, 40))
        rep = rng.integers(0, nrep + 1, n).astype(np.uint16)
        def_ = rng.integers(0, restart.size, n).astype(np.uint16)
        if trial % 3 == 0:
            def_[:] = np.minimum(def_, 1)
        need = restart[def_.astype(np.int64)]
        bad = [i for i in range(n) if rep[i] < need[i] or (i > 0 and rep[i] < need[i - 1])]
        assert continues_empty_list(rep, def_, layers) == (bad[0] if bad else -1)
        found += bool(bad)
    assert 0 < found < 300
