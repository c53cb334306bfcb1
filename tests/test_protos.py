# SPDX-License-Identifier: Apache-2.0
"""Our .proto files cover every byte pylance 14 writes.

Datasets are written with pylance (reference only) into tmp_path; every manifest
(with its inline index and transaction sections), every ``.txn`` file, every data
and index file (column metadata, page / column encodings, FileDescriptor) and every
row-id / version sequence is parsed with our generated modules, and no message,
however deep (``Any`` payloads included), may hold unknown fields.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import any_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from lance_gpu._proto import (  # noqa: F401  (imports register the types in the pool)
    encodings_v2_0_pb2,
    encodings_v2_1_pb2,
    file2_pb2,
    file_pb2,
    index_old_pb2,
    rowids_pb2,
    table_pb2,
    transaction_pb2,
)

lance = pytest.importorskip("lance")

N = 3000


class Checker:
    """Recursively parses messages and records unknown fields and what was seen."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.seen: Counter[str] = Counter()

    def check(self, msg: Message, where: str) -> None:
        name = msg.DESCRIPTOR.full_name
        self.seen[name] += 1
        unknown = UnknownFieldSet(msg)
        if len(unknown):
            nums = sorted({f.field_number for f in unknown})
            self.problems.append(f"{where}: {name} has unknown fields {nums}")
        if name == "google.protobuf.Any":
            self.check_any(msg, where)  # type: ignore[arg-type]
            return
        for fd, value in msg.ListFields():
            self.seen[f"{name}.{fd.name}"] += 1
            sub = f"{where}.{fd.name}"
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                if fd.message_type.GetOptions().map_entry:
                    vfd = fd.message_type.fields_by_name["value"]
                    if vfd.type == FieldDescriptor.TYPE_MESSAGE:
                        for k, v in value.items():
                            self.check(v, f"{sub}[{k}]")
                elif fd.is_repeated:
                    for i, v in enumerate(value):
                        self.check(v, f"{sub}[{i}]")
                else:
                    self.check(value, sub)
            elif fd.type == FieldDescriptor.TYPE_BYTES:
                self.check_bytes(name, fd.name, value, sub)

    def check_any(self, msg: any_pb2.Any, where: str) -> None:
        type_name = msg.type_url.split("/")[-1]
        self.seen[f"Any:{type_name}"] += 1
        try:
            desc = descriptor_pool.Default().FindMessageTypeByName(type_name)
        except KeyError:
            self.problems.append(f"{where}: unknown Any type {msg.type_url!r}")
            return
        payload = message_factory.GetMessageClass(desc)()
        payload.ParseFromString(msg.value)
        self.check(payload, f"{where}<{type_name}>")

    def check_bytes(self, owner: str, field: str, value: bytes, where: str) -> None:
        """Bytes fields that hold nested protobufs."""
        if owner == "lance.file.v2.DirectEncoding" and field == "encoding":
            self.check(any_pb2.Any.FromString(value), where)
        elif owner == "lance.table.DataFragment" and field == "inline_row_ids":
            self.check(rowids_pb2.RowIdSequence.FromString(value), where)
        elif owner == "lance.table.DataFragment" and field.startswith("inline_") and field.endswith(
            "_versions"
        ):
            self.check(rowids_pb2.RowDatasetVersionSequence.FromString(value), where)


def _section(buf: bytes, pos: int, cls: type[Message]) -> Message:
    (n,) = struct.unpack_from("<I", buf, pos)
    assert pos + 4 + n <= len(buf)
    return cls.FromString(buf[pos + 4 : pos + 4 + n])


def check_manifest(path: Path, chk: Checker) -> table_pb2.Manifest:
    buf = path.read_bytes()
    pos, major, minor, magic = struct.unpack("<QHH4s", buf[-16:])
    assert magic == b"LANC" and (major, minor) == (0, 2)
    m = _section(buf, pos, table_pb2.Manifest)
    chk.check(m, path.name)
    if m.HasField("index_section"):
        chk.check(_section(buf, m.index_section, table_pb2.IndexSection), f"{path.name}#index")
    if m.HasField("transaction_section"):
        chk.check(_section(buf, m.transaction_section, transaction_pb2.Transaction), f"{path.name}#txn")
    for frag in m.fragments:
        for kind, cls in (
            ("row_ids", rowids_pb2.RowIdSequence),
            ("last_updated_at_versions", rowids_pb2.RowDatasetVersionSequence),
            ("created_at_versions", rowids_pb2.RowDatasetVersionSequence),
        ):
            if frag.HasField(f"external_{kind}"):
                ext = getattr(frag, f"external_{kind}")
                raw = (path.parent.parent / ext.path).read_bytes()[ext.offset : ext.offset + ext.size]
                chk.check(cls.FromString(raw), f"{path.name}#{kind}")
    return m


def check_data_file(path: Path, chk: Checker) -> None:
    buf = path.read_bytes()
    cm_start, cmo, gbo, n_gb, n_cols, major, minor, magic = struct.unpack("<QQQIIHH4s", buf[-40:])
    assert magic == b"LANC" and (major, minor) in {(0, 3), (2, 0), (2, 1), (2, 2)}, (major, minor)
    assert len(buf) == gbo + 16 * n_gb + 40
    gb = np.frombuffer(buf, "<u8", 2 * n_gb, gbo).reshape(-1, 2)
    fd_pos, fd_size = (int(x) for x in gb[0])
    chk.check(file_pb2.FileDescriptor.FromString(buf[fd_pos : fd_pos + fd_size]), f"{path.name}#gb0")
    cols = np.frombuffer(buf, "<u8", 2 * n_cols, cmo).reshape(-1, 2)
    for i, (p, s) in enumerate(cols):
        assert cm_start <= p and p + s <= cmo
        col = file2_pb2.ColumnMetadata.FromString(buf[int(p) : int(p + s)])
        chk.check(col, f"{path.name}#col{i}")
        tag = "2.0" if (major, minor) in {(0, 3), (2, 0)} else f"{major}.{minor}"
        for page in col.pages:
            assert page.encoding.WhichOneof("location") == "direct"
            chk.seen[f"page:{tag}:" + any_pb2.Any.FromString(page.encoding.direct.encoding).type_url] += 1
            if tag != "2.0":
                layout = encodings_v2_1_pb2.PageLayout()
                any_pb2.Any.FromString(page.encoding.direct.encoding).Unpack(layout)
                kind = layout.WhichOneof("layout")
                chk.seen[f"layout:{tag}:{kind}"] += 1
                if kind == "mini_block_layout":
                    chk.seen[f"large_chunk:{tag}:{layout.mini_block_layout.has_large_chunk}"] += 1


def check_dataset(uri: Path, chk: Checker) -> None:
    manifests = sorted((uri / "_versions").glob("*.manifest"))
    assert manifests
    for mf in manifests:
        check_manifest(mf, chk)
    for txn in sorted((uri / "_transactions").glob("*.txn")):
        chk.check(transaction_pb2.Transaction.FromString(txn.read_bytes()), txn.name)
    lance_files = sorted(uri.glob("data/*.lance")) + sorted(uri.glob("_indices/*/*.lance"))
    assert lance_files
    for f in lance_files:
        check_data_file(f, chk)


def _table(version: str) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(N)
    nint = pa.array([None if i % 7 == 0 else int(i * 3) for i in range(N)], pa.int32())
    lst = pa.array(
        [None if i % 11 == 0 else [] if i % 13 == 0 else list(range(i % 5)) for i in range(N)],
        pa.list_(pa.int32()),
    )
    cols: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.int64()),
        "nint": nint,
        "s_low": pa.array([["red", "green", "blue", "cyan"][i % 4] for i in range(N)]),
        "s_high": pa.array([f"value-{i:08d}-{i * 7919 % 10007}" for i in range(N)]),
        "lst": lst,
        "st": pa.StructArray.from_arrays(
            [pa.array(ids.astype(np.int32)), pa.array([f"s{i % 3}" for i in range(N)])], ["a", "b"]
        ),
        "emb": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(N * 128, dtype=np.float32)), 128
        ),
        "big": pa.array([f"{i:06d}" + "x" * 294 + rng.bytes(4).hex() for i in range(N)]),
        "flag": pa.array(ids % 3 == 0),
        "f64": pa.array(rng.random(N)),
        "fsb": pa.array([rng.bytes(16) for _ in range(N)], pa.binary(16)),
        "const": pa.array(np.full(N, 7, np.int32)),
        "allnull": pa.nulls(N, pa.int32()),
        "ts": pa.array(ids * 1_000_000, pa.timestamp("us")),
    }
    if version != "2.0":
        cols["nst"] = pa.StructArray.from_arrays(
            [pa.array(ids), pa.array(rng.random(N).astype(np.float32))],
            ["x", "y"],
            mask=pa.array(ids % 5 == 0),
        )
        cols["lst_long"] = pa.array(
            [None if i % 9 == 0 else [f"{i}-" + "y" * 300] * (i % 3) for i in range(N)],
            pa.list_(pa.string()),
        )
    if version == "2.2":
        cols["mp"] = pa.array(
            [[(f"k{i % 4}", i), ("z", -i)] if i % 6 else [] for i in range(N)],
            pa.map_(pa.string(), pa.int32()),
        )
    return pa.table(cols)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Checker:
    root = tmp_path_factory.mktemp("protos")
    chk = Checker()
    for v in ("2.0", "2.1", "2.2"):
        uri = root / f"ds_{v}"
        lance.write_dataset(_table(v), str(uri), data_storage_version=v)
        check_dataset(uri, chk)

    small = pa.table({"id": pa.array(np.arange(6000), pa.int64()), "x": pa.array(np.arange(6000) % 100)})
    # deletions (.arrow, then .bin), a btree index and V1 naming
    uri = root / "ds_delete"
    ds = lance.write_dataset(small, str(uri), enable_v2_manifest_paths=False)
    ds.delete("x < 10")
    ds.create_scalar_index("id", "BTREE")
    ds.delete("id >= 100 and id < 5800")
    check_dataset(uri, chk)

    # stable row ids, with a delete and an update
    uri = root / "ds_rowids"
    ds = lance.write_dataset(small, str(uri), enable_stable_row_ids=True, max_rows_per_file=2500)
    ds.delete("id % 7 = 3")
    ds.update({"x": "x + 1"}, where="id < 40")
    check_dataset(uri, chk)

    # very large binary values (FullZip with per-value zstd)
    uri = root / "ds_blobish"
    rng = np.random.default_rng(3)
    lance.write_dataset(
        pa.table({"b": pa.array([rng.bytes(1000) * 40 for _ in range(8)], pa.large_binary())}),
        str(uri),
    )
    check_dataset(uri, chk)
    return chk


def test_no_unknown_fields(checked: Checker) -> None:
    assert checked.problems == []


def test_new_fields_are_exercised(checked: Checker) -> None:
    seen = checked.seen
    # pylance-14 additions we had to declare ourselves
    assert seen["lance.table.Manifest.transaction_section"] > 0
    assert seen["lance.encodings21.MiniBlockLayout.has_large_chunk"] > 0
    assert seen["large_chunk:2.2:True"] > 0 and seen["large_chunk:2.2:False"] == 0
    assert seen["large_chunk:2.1:False"] > 0 and seen["large_chunk:2.1:True"] == 0
    assert seen["lance.encodings21.ConstantLayout.inline_value"] > 0
    # every page layout and type URL we rely on showed up
    for v in ("2.1", "2.2"):
        for kind in ("mini_block_layout", "full_zip_layout", "constant_layout"):
            assert seen[f"layout:{v}:{kind}"] > 0, (v, kind)
    assert seen["page:2.0:/lance.encodings.ArrayEncoding"] > 0
    assert seen["page:2.2:/lance.encodings21.PageLayout"] > 0
    assert seen["Any:lance.encodings.ColumnEncoding"] > 0
    assert seen["Any:lance.table.BTreeIndexDetails"] > 0
    assert seen["lance.table.IndexSection"] > 0
    assert seen["lance.table.DeletionFile"] > 0
    assert seen["lance.table.RowIdSequence"] > 0
    assert seen["lance.table.RowDatasetVersionSequence"] > 0
    assert seen["lance.encodings21.MiniBlockLayout.dictionary"] > 0
    for name in ("Fsst", "Rle", "General", "FixedSizeList", "OutOfLineBitpacking", "InlineBitpacking"):
        assert seen[f"lance.encodings21.{name}"] > 0, name
    for name in ("Nullable", "Binary", "Dictionary", "List", "FixedSizeList", "SimpleStruct"):
        assert seen[f"lance.encodings.{name}"] > 0, name
