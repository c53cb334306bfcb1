# SPDX-License-Identifier: Apache-2.0
"""Manifests, version listing, transactions and feature flags against pylance 14 output."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from lance_gpu.io import LOCAL, resolve
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, DatasetNotFoundError, UnsupportedFeatureError
from lance_gpu.table import features
from lance_gpu.table.manifest import (
    U64_MAX,
    list_versions,
    load_manifest,
    manifest_file_name,
    parse_version_file_name,
    read_manifest,
    read_manifest_file,
    read_transaction_file,
    resolve_manifest,
)
from lance_gpu.table.schema import LanceSchema

lance = pytest.importorskip("lance")


def _tbl(start: int, n: int = 20) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


@pytest.fixture(scope="module")
def v2_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three versions, V2 naming; version 3 adds a btree index."""
    uri = tmp_path_factory.mktemp("mf") / "v2"
    lance.write_dataset(_tbl(0), str(uri))
    ds = lance.write_dataset(_tbl(20), str(uri), mode="append")
    ds.create_scalar_index("id", "BTREE")
    return uri


@pytest.fixture(scope="module")
def v1_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uri = tmp_path_factory.mktemp("mf") / "v1"
    lance.write_dataset(_tbl(0), str(uri), enable_v2_manifest_paths=False)
    lance.write_dataset(_tbl(20), str(uri), mode="append")
    return uri


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def test_version_file_names() -> None:
    assert parse_version_file_name("18446744073709551614.manifest") == (1, "V2")
    assert parse_version_file_name("7.manifest") == (7, "V1")
    assert manifest_file_name(1) == "18446744073709551614.manifest"
    assert manifest_file_name(12, "V1") == "12.manifest"
    for name in ("d3.manifest", ".tmp_5.manifest", "5.manifest-1234-abcd", "x.manifest",
                 "latest_version_hint.json", "99999999999999999999.manifest"):
        assert parse_version_file_name(name) is None, name


@pytest.mark.parametrize("which", ["v2_ds", "v1_ds"])
def test_list_versions_matches_pylance(which: str, request: pytest.FixtureRequest) -> None:
    uri = request.getfixturevalue(which)
    ours = list_versions(*resolve(uri))
    theirs = lance.dataset(str(uri)).versions()
    assert [v.version for v in ours] == [v["version"] for v in theirs]
    assert {v.naming for v in ours} == {"V2" if which == "v2_ds" else "V1"}
    for mine, ref in zip(ours, theirs, strict=True):
        assert os.path.basename(mine.path) == manifest_file_name(mine.version, mine.naming)
        ts = ref["timestamp"]
        ref_utc = ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts
        assert abs((mine.timestamp - ref_utc).total_seconds()) < 1 or abs(
            (mine.timestamp.replace(tzinfo=None) - ts).total_seconds()
        ) < 1


def test_resolve_latest_and_older(v2_ds: Path) -> None:
    latest = resolve_manifest(*resolve(v2_ds))
    assert latest.version == lance.dataset(str(v2_ds)).version == 3
    old = resolve_manifest(*resolve(v2_ds), 1)
    m = read_manifest(LOCAL, old.path)
    assert m.version == 1
    assert sum(f.physical_rows for f in m.fragments) == lance.dataset(str(v2_ds), version=1).count_rows()
    schema = LanceSchema.from_manifest(m, old.path).to_arrow()
    assert schema.equals(lance.dataset(str(v2_ds), version=1).schema, check_metadata=True)
    assert resolve_manifest(*resolve(v2_ds), "2").version == 2


def test_hint_and_stray_files_ignored(v2_ds: Path, tmp_path: Path) -> None:
    uri = _copy(v2_ds, tmp_path)
    (uri / "_versions" / "latest_version_hint.json").write_text('{"version":1}')
    (uri / "_versions" / "d9.manifest").write_bytes(b"detached")
    (uri / "_versions" / ".tmp_18446744073709551610.manifest").write_bytes(b"staging")
    (uri / "_versions" / "18446744073709551610.manifest-8a6f").write_bytes(b"staging")
    assert [v.version for v in list_versions(*resolve(uri))] == [1, 2, 3]
    assert resolve_manifest(*resolve(uri)).version == 3


def test_mixed_naming_refused(v2_ds: Path, tmp_path: Path) -> None:
    uri = _copy(v2_ds, tmp_path)
    shutil.copy(uri / "_versions" / manifest_file_name(3), uri / "_versions" / "4.manifest")
    with pytest.raises(CorruptFileError, match="mixes V1"):
        list_versions(*resolve(uri))


def test_missing_dataset_and_version(v2_ds: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError):
        list_versions(*resolve(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError):
        resolve_manifest(*resolve(tmp_path / "empty"))
    (tmp_path / "empty" / "_versions").mkdir()
    with pytest.raises(DatasetNotFoundError):
        resolve_manifest(*resolve(tmp_path / "empty"))
    with pytest.raises(DatasetNotFoundError, match="no version 42"):
        resolve_manifest(*resolve(v2_ds), 42)
    with pytest.raises(DatasetNotFoundError):
        resolve_manifest(*resolve(v2_ds), "no_such_tag")
    with pytest.raises(UnsupportedFeatureError):
        resolve_manifest(*resolve("ftp://host/ds"))  # s3:// etc. are lance_gpu.io stores


def test_tags(v2_ds: Path, tmp_path: Path) -> None:
    uri = _copy(v2_ds, tmp_path)
    lance.dataset(str(uri)).tags.create("first", 1)
    assert resolve_manifest(*resolve(uri), "first").version == 1


def test_file_uri(v2_ds: Path) -> None:
    assert resolve_manifest(*resolve(v2_ds.as_uri())).version == 3


def test_sections_and_transactions(v2_ds: Path) -> None:
    # version 1: inline transaction at offset 0 (field 23), identical to the .txn file
    mf = read_manifest_file(LOCAL, resolve_manifest(*resolve(v2_ds), 1).path)
    m = mf.manifest
    assert m.HasField("transaction_section") and m.transaction_section == 0
    assert not m.HasField("transaction_section_deprecated")
    assert mf.index_section is None and mf.transaction is not None
    txn_path = v2_ds / "_transactions" / m.transaction_file
    assert read_transaction_file(LOCAL, txn_path) == mf.transaction
    assert mf.transaction.WhichOneof("operation") == "overwrite"
    assert m.writer_version.library == "lance" and m.data_format.version == "2.2"

    # version 3: index section first, then the transaction, then the manifest
    mf3 = load_manifest(*resolve(v2_ds))
    assert mf3.manifest.index_section == 0 and mf3.manifest.transaction_section > 0
    assert [i.name for i in mf3.index_section.indices] == ["id_idx"]
    assert mf3.index_section.indices[0].index_details.type_url == "/lance.table.BTreeIndexDetails"
    assert mf3.transaction.WhichOneof("operation") == "create_index"
    assert mf3.transaction == read_transaction_file(LOCAL, v2_ds / "_transactions" / mf3.manifest.transaction_file)


def test_field_21_fallback(v2_ds: Path, tmp_path: Path) -> None:
    """An older writer's manifest keeps the transaction offset in field 21."""
    data = Path(resolve_manifest(*resolve(v2_ds), 1).path).read_bytes()
    pos = struct.unpack_from("<Q", data, len(data) - 16)[0]
    m = read_manifest(LOCAL, resolve_manifest(*resolve(v2_ds), 1).path)
    off = m.transaction_section
    m.ClearField("transaction_section")
    m.transaction_section_deprecated = off
    path = tmp_path / "old.manifest"
    path.write_bytes(_rebuild(data, pos, m))
    mf = read_manifest_file(LOCAL, path)
    assert mf.transaction is not None and mf.transaction.read_version == 0


def _rebuild(data: bytes, pos: int, manifest: table_pb2.Manifest) -> bytes:
    """Keep the sections before the manifest, re-encode the manifest, write a new footer."""
    body = manifest.SerializeToString()
    return data[:pos] + struct.pack("<I", len(body)) + body + struct.pack("<QHH4s", pos, 0, 2, b"LANC")


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda d, pos: d[:-5], "magic"),
        (lambda d, pos: d[:10], "less than|magic|outside"),
        (lambda d, pos: d[:-4] + b"LANX", "magic"),
        (lambda d, pos: d[:-16] + struct.pack("<QHH4s", len(d), 0, 2, b"LANC"), "outside"),
        (lambda d, pos: d[:pos] + struct.pack("<I", 1 << 30) + d[pos + 4 :], "running past"),
        (lambda d, pos: d[:pos + 4] + b"\xff" * (len(d) - pos - 20) + d[-16:], "protobuf"),
        (lambda d, pos: b"", "less than"),
    ],
    ids=["truncated", "tiny", "bad-magic", "pos-out-of-range", "len-out-of-range", "garbage", "empty"],
)
def test_corrupt_manifest(v2_ds: Path, tmp_path: Path, mangle, match: str) -> None:
    src = Path(resolve_manifest(*resolve(v2_ds), 1).path)
    data = src.read_bytes()
    pos = struct.unpack_from("<Q", data, len(data) - 16)[0]
    bad = tmp_path / src.name
    bad.write_bytes(mangle(data, pos))
    with pytest.raises(CorruptFileError, match=match) as info:
        read_manifest_file(LOCAL, bad)
    assert str(bad) in str(info.value)


def test_corrupt_inline_transaction(v2_ds: Path, tmp_path: Path) -> None:
    src = Path(resolve_manifest(*resolve(v2_ds), 1).path)
    data = bytearray(src.read_bytes())
    data[4:40] = b"\xff" * 36  # inside the transaction section at offset 0
    bad = tmp_path / "m.manifest"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="transaction section"):
        read_manifest_file(LOCAL, bad)
    assert read_manifest(LOCAL, bad).version == 1  # the manifest itself is intact


def test_corrupt_transaction_file(tmp_path: Path) -> None:
    bad = tmp_path / "0-x.txn"
    bad.write_bytes(b"\xff\xff\xff")
    with pytest.raises(CorruptFileError, match=str(bad)):
        read_transaction_file(LOCAL, bad)
    with pytest.raises(CorruptFileError):
        read_transaction_file(LOCAL, tmp_path / "missing.txn")


def test_unknown_reader_flag(v2_ds: Path, tmp_path: Path) -> None:
    uri = _copy(v2_ds, tmp_path)
    path = Path(resolve_manifest(*resolve(uri)).path)
    data = path.read_bytes()
    pos = struct.unpack_from("<Q", data, len(data) - 16)[0]
    m = read_manifest(LOCAL, path)
    m.reader_feature_flags |= 1 << 12
    path.write_bytes(_rebuild(data, pos, m))
    assert read_manifest_file(LOCAL, path).manifest.reader_feature_flags == 1 << 12
    with pytest.raises(UnsupportedFeatureError, match=r"bit 12") as info:
        load_manifest(*resolve(uri))
    assert str(path) in str(info.value)
    assert load_manifest(*resolve(uri), check_flags=False).manifest.version == 3
    assert load_manifest(*resolve(uri), 2).manifest.version == 2  # older versions are unaffected


def test_feature_flag_checks() -> None:
    ok = (
        features.FLAG_DELETION_FILES
        | features.FLAG_STABLE_ROW_IDS
        | features.FLAG_USE_V2_FORMAT_DEPRECATED
        | features.FLAG_TABLE_CONFIG
        | features.FLAG_DISABLE_TRANSACTION_FILE
        | features.FLAG_COVERING_INDEX_METADATA
        | features.FLAG_MIXED_DATA_FILE_VERSIONS
    )
    features.check_reader_flags(ok, "m.manifest")
    features.check_writer_flags(features.SUPPORTED_WRITER_FLAGS, "m.manifest")
    for bit, name in [(4, "multiple base paths"), (6, "data overlay"), (9, "stable field ids"), (13, "unknown")]:
        with pytest.raises(UnsupportedFeatureError, match=name):
            features.check_reader_flags(1 << bit, "m.manifest")
    with pytest.raises(UnsupportedFeatureError, match="writer"):
        features.check_writer_flags(features.FLAG_MIXED_DATA_FILE_VERSIONS, "m.manifest")


def test_flags_pylance_writes(tmp_path: Path) -> None:
    uri = tmp_path / "flags"
    ds = lance.write_dataset(_tbl(0, 50), str(uri), enable_stable_row_ids=True)
    ds.delete("id < 3")
    ds.update_config({"k": "v"})
    m = load_manifest(*resolve(uri)).manifest  # passes the reader check
    assert m.reader_feature_flags == 3 and m.writer_feature_flags == 3 | 8
    features.check_writer_flags(m.writer_feature_flags, "x")


def test_u64_max_naming_edge() -> None:
    assert parse_version_file_name(f"{U64_MAX - 12345:020d}.manifest") == (12345, "V2")


def test_parsed_manifests_are_reused_only_for_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest read again (or the one a commit of this process wrote) is not parsed or
    vetted again while its bytes are the same; other bytes at the same path (the dataset
    dropped and written again, a corrupted file) are parsed afresh."""
    import lance_gpu
    from lance_gpu.table import manifest as manifest_mod

    parses: list[str] = []
    real = manifest_mod.parse_manifest_bytes

    def counting(data: bytes, path: object = "<memory>", **kwargs: object) -> object:
        parses.append(str(path))
        return real(data, path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(manifest_mod, "parse_manifest_bytes", counting)
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(pa.table({"a": [1, 2, 3]}), uri)
    lance_gpu.write_dataset(pa.table({"a": [4]}), uri, mode="append")
    assert parses == []  # the commits' own manifests: nothing to parse
    ds = lance_gpu.dataset(uri)
    assert parses == [] and ds.to_table()["a"].to_pylist() == [1, 2, 3, 4]
    key = ds.manifest_file.path
    fresh = real(Path(key).read_bytes(), key)
    assert fresh == ds.manifest_file  # what a reader parses from the bytes, offsets included

    shutil.rmtree(uri)  # the same paths, other bytes
    lance.write_dataset(pa.table({"a": [9, 8]}), uri)
    lance.write_dataset(pa.table({"a": [7]}), uri, mode="append")
    again = lance_gpu.dataset(uri)
    assert again.to_table()["a"].to_pylist() == [9, 8, 7]
    assert parses == [key]

    data = bytearray(Path(key).read_bytes())
    data[-20] ^= 0xFF  # inside the Manifest message
    Path(key).write_bytes(bytes(data))
    with pytest.raises((CorruptFileError, DatasetNotFoundError)):
        lance_gpu.dataset(uri).to_table()
