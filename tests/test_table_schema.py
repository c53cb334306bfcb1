# SPDX-License-Identifier: Apache-2.0
"""Lance field lists <-> Arrow schemas, compared with what pylance 14 writes and reads."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from lance_gpu.io import LOCAL, resolve
from lance_gpu._proto import file_pb2, table_pb2
from lance_gpu.errors import CorruptFileError, SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.table.manifest import load_manifest
from lance_gpu.table.schema import LanceSchema, arrow_type_to_logical, column_index_map, logical_to_arrow_type

lance = pytest.importorskip("lance")
from lance.arrow import BFloat16Type  # noqa: E402

TYPES: dict[str, pa.DataType] = {
    "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(),
    "u8": pa.uint8(), "u16": pa.uint16(), "u32": pa.uint32(), "u64": pa.uint64(),
    "f16": pa.float16(), "f32": pa.float32(), "f64": pa.float64(), "b": pa.bool_(),
    "s": pa.string(), "ls": pa.large_string(), "bin": pa.binary(), "lbin": pa.large_binary(),
    "d128": pa.decimal128(10, 2), "d256": pa.decimal256(40, 5),
    "d32": pa.date32(), "d64": pa.date64(),
    "t32s": pa.time32("s"), "t32ms": pa.time32("ms"), "t64us": pa.time64("us"), "t64ns": pa.time64("ns"),
    "ts_s": pa.timestamp("s"), "ts_ms": pa.timestamp("ms"), "ts_us": pa.timestamp("us"),
    "ts_ns": pa.timestamp("ns"), "ts_utc": pa.timestamp("us", "UTC"),
    "ts_ny": pa.timestamp("ns", "America/New_York"), "ts_off": pa.timestamp("ms", "+05:30"),
    "dur_s": pa.duration("s"), "dur_ms": pa.duration("ms"), "dur_us": pa.duration("us"), "dur_ns": pa.duration("ns"),
    "fsb": pa.binary(16), "fsl": pa.list_(pa.float32(), 128), "fsl_i8": pa.list_(pa.int8(), 3),
    "fsl_bf16": pa.list_(BFloat16Type(), 8), "bf16": BFloat16Type(),
    "fsl_ts": pa.list_(pa.timestamp("us", "UTC"), 2), "fsl_dec": pa.list_(pa.decimal128(5, 1), 2),
    "fsl_fsb": pa.list_(pa.binary(2), 2), "fsl_fsl": pa.list_(pa.list_(pa.int32(), 2), 2),
    "fsl_st": pa.list_(pa.struct([("x", pa.int32())]), 2),
    "lst": pa.list_(pa.int32()), "llst": pa.large_list(pa.string()),
    "lst_named": pa.list_(pa.field("elem", pa.int32(), nullable=False, metadata={"m": "1"})),
    "lst_st": pa.list_(pa.struct([("x", pa.int64())])), "llst_st": pa.large_list(pa.struct([("x", pa.int64())])),
    "lst_lst": pa.list_(pa.list_(pa.int16())), "lst_fsl": pa.list_(pa.list_(pa.float32(), 2)),
    "st": pa.struct([("a", pa.int32()), pa.field("b", pa.list_(pa.string()), metadata={"inner": "x"})]),
    "st_empty": pa.struct([]), "st_null": pa.struct([("n", pa.null())]),
    "map": pa.map_(pa.string(), pa.int32()), "lst_map": pa.list_(pa.map_(pa.int64(), pa.list_(pa.string()))),
    "dict": pa.dictionary(pa.int32(), pa.string()), "dict_u8": pa.dictionary(pa.uint8(), pa.large_string()),
    "dict_int": pa.dictionary(pa.int16(), pa.int64()),
    "nul": pa.null(), "uuid": pa.uuid(), "json": pa.json_(),
}


def _column(f: pa.Field, n: int) -> pa.Array:
    t = f.type
    if not f.nullable:
        return pa.array([1] * n, t)
    if isinstance(t, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(t, pa.nulls(n, t.storage_type))
    return pa.nulls(n, t)


@pytest.fixture(scope="module")
def all_types(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Schema, Path]:
    fields = [
        pa.field(name, t, metadata={"note": name, "utf8": "é"} if i % 3 == 0 else None)
        for i, (name, t) in enumerate(TYPES.items())
    ]
    fields.append(pa.field("req", pa.int32(), nullable=False, metadata={"k": "v"}))
    schema = pa.schema(fields, metadata={"owner": "tests", "x": "y"})
    uri = tmp_path_factory.mktemp("schema") / "all"
    lance.write_dataset(pa.table([_column(f, 3) for f in schema], schema=schema), str(uri))
    return schema, uri


def test_manifest_schema_equals_pylance(all_types: tuple[pa.Schema, Path]) -> None:
    schema, uri = all_types
    mf = load_manifest(*resolve(uri))
    ours = LanceSchema.from_manifest(mf.manifest, mf.path).to_arrow()
    theirs = lance.dataset(str(uri)).schema
    assert ours.equals(theirs, check_metadata=True), "\n".join(
        f"{a} != {b}" for a, b in zip(ours, theirs) if not a.equals(b, check_metadata=True)
    )
    assert ours.metadata == {b"owner": b"tests", b"x": b"y"}


def test_arrow_to_lance_fields_match_pylance(all_types: tuple[pa.Schema, Path]) -> None:
    schema, uri = all_types
    written = list(load_manifest(*resolve(uri)).manifest.fields)
    ours = LanceSchema.from_arrow(schema)
    mine = ours.to_protos()
    assert len(mine) == len(written)
    for a, b in zip(mine, written, strict=True):
        assert a == b, f"\nours:\n{a}\npylance:\n{b}"
    assert ours.metadata == dict(load_manifest(*resolve(uri)).manifest.schema_metadata)


def test_round_trip_through_protos(all_types: tuple[pa.Schema, Path]) -> None:
    schema, _ = all_types
    ls = LanceSchema.from_arrow(schema, start_id=5)
    assert ls.field_ids == list(range(5, 5 + len(ls.field_ids)))
    again = LanceSchema.from_protos(ls.to_protos(), ls.metadata)
    assert again.to_arrow().equals(ls.to_arrow(), check_metadata=True)


def test_views_written_as_plain_types() -> None:
    ls = LanceSchema.from_arrow(pa.schema([("v", pa.string_view()), ("w", pa.binary_view())]))
    assert [f.logical_type for f in ls.walk()] == ["string", "binary"]


def test_logical_strings() -> None:
    assert arrow_type_to_logical(pa.timestamp("us")) == "timestamp:us:-"
    assert arrow_type_to_logical(pa.list_(pa.decimal128(5, 1), 2)) == "fixed_size_list:decimal:128:5:1:2"
    assert arrow_type_to_logical(pa.list_(BFloat16Type(), 4)) == "fixed_size_list:lance.bfloat16:4"
    assert logical_to_arrow_type("timestamp:ms:+05:30") == pa.timestamp("ms", "+05:30")
    assert logical_to_arrow_type("dict:string:int8:false") == pa.dictionary(pa.int8(), pa.string())
    assert logical_to_arrow_type("fixed_size_list:fixed_size_list:int32:2:3") == pa.list_(pa.list_(pa.int32(), 2), 3)
    with pytest.raises(ValueError):
        logical_to_arrow_type("quaternion")
    with pytest.raises(ValueError):
        logical_to_arrow_type("decimal:128:x:2")


def test_unsupported_arrow_types() -> None:
    for t in (pa.map_(pa.string(), pa.int32(), keys_sorted=True), pa.list_view(pa.int32()),
              pa.dense_union([pa.field("a", pa.int32())]), pa.list_(pa.list_(pa.int32()), 2)):
        with pytest.raises(UnsupportedFeatureError):
            LanceSchema.from_arrow(pa.schema([("c", t)]))


def test_bad_field_lists() -> None:
    f = file_pb2.Field
    with pytest.raises(CorruptFileError, match="m.manifest.*does not precede"):
        LanceSchema.from_protos([f(name="c", id=1, parent_id=0, logical_type="int32")], source="m.manifest")
    with pytest.raises(CorruptFileError, match="duplicate"):
        LanceSchema.from_protos([f(name="a", id=0, parent_id=-1, logical_type="int32"),
                                 f(name="b", id=0, parent_id=-1, logical_type="int32")])
    bad = LanceSchema.from_protos([f(name="q", id=0, parent_id=-1, logical_type="quaternion")], source="m.manifest")
    with pytest.raises(UnsupportedFeatureError, match="m.manifest.*quaternion"):
        bad.to_arrow()
    lst = LanceSchema.from_protos([f(name="l", id=0, parent_id=-1, logical_type="list")])
    with pytest.raises(UnsupportedFeatureError, match="child"):
        lst.to_arrow()


def test_projection() -> None:
    schema = pa.schema([
        ("id", pa.int64()),
        ("st", pa.struct([("a", pa.int32()), ("b", pa.struct([("x", pa.string()), ("y", pa.float32())])), ("c", pa.bool_())])),
        ("lst", pa.list_(pa.struct([("p", pa.int8()), ("q", pa.int8())]))),
        ("dotted.name", pa.int16()),
    ])
    ls = LanceSchema.from_arrow(schema)
    assert ls.field("st.b.y").id == 5
    assert ls.field(["st", "b"]).logical_type == "struct"
    assert ls.field("dotted.name").logical_type == "int16"
    p = ls.project(["st.b.y", "id", "st.a"])
    assert p.to_arrow() == pa.schema([
        ("st", pa.struct([("a", pa.int32()), ("b", pa.struct([("y", pa.float32())]))])),
        ("id", pa.int64()),
    ])
    assert [f.id for f in p.walk()] == [1, 2, 3, 5, 0]
    assert p.leaf_ids == [2, 5, 0]
    assert ls.project(["st.b", "st"]).to_arrow() == pa.schema([schema.field("st")])
    assert ls.project(["lst.item.p"]).to_arrow() == pa.schema([schema.field("lst")])
    assert ls.project(["dotted.name"]).names == ["dotted.name"]
    with pytest.raises(SchemaMismatchError, match="st.zz"):
        ls.project(["st.zz"])
    with pytest.raises(SchemaMismatchError):
        ls.field("nope")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_column_index_map(version: str, tmp_path: Path) -> None:
    cols = {
        "a": pa.array([1, 2], pa.int64()),
        "st": pa.array([{"x": 1, "l": [1]}, {"x": 2, "l": []}], pa.struct([("x", pa.int8()), ("l", pa.list_(pa.int32()))])),
        "fsl": pa.array([[1.0, 2.0]] * 2, pa.list_(pa.float32(), 2)),
        "s": pa.array(["p", "q"]),
    }
    uri = tmp_path / "cols"
    lance.write_dataset(pa.table(cols), str(uri), data_storage_version=version)
    mf = load_manifest(*resolve(uri))
    schema = LanceSchema.from_manifest(mf.manifest)
    (frag,) = mf.manifest.fragments
    (df,) = frag.files
    mapping = column_index_map(df, schema)
    data = (uri / "data" / df.path).read_bytes()
    num_columns = struct.unpack_from("<I", data, len(data) - 40 + 28)[0]
    if version == "2.0":
        # every field has its own column, parents included (struct header, list offsets)
        assert list(mapping) == schema.field_ids and sorted(mapping.values()) == list(range(num_columns))
    else:
        assert list(mapping) == schema.leaf_ids
        assert list(mapping.values()) == list(range(num_columns))


def test_column_index_map_edge_cases() -> None:
    df = table_pb2.DataFile(path="f.lance", fields=[0, -2, 2, 3], column_indices=[0, 1, -1, 2])
    assert column_index_map(df) == {0: 0, 3: 2}
    schema = LanceSchema.from_arrow(pa.schema([("a", pa.int32())]))
    assert column_index_map(df, schema) == {0: 0}
    assert column_index_map(table_pb2.DataFile(path="v1", fields=[4, 5])) == {4: 0, 5: 1}
    with pytest.raises(CorruptFileError, match="f.lance"):
        column_index_map(table_pb2.DataFile(path="f.lance", fields=[0, 1], column_indices=[0]))
    with pytest.raises(CorruptFileError, match="twice"):
        column_index_map(table_pb2.DataFile(path="f.lance", fields=[0, 1], column_indices=[0, 0]))


def _manifest(fields: list[file_pb2.Field], metadata: dict[str, bytes] | None = None) -> table_pb2.Manifest:
    m = table_pb2.Manifest()
    m.fields.extend(fields)
    for k, v in (metadata or {}).items():
        m.schema_metadata[k] = v
    return m


def test_manifest_schemas_share_their_field_tree(all_types: tuple[pa.Schema, Path]) -> None:
    """Manifests of equal fields (every version of a dataset, a commit's new version) give
    schemas sharing one field tree and one Arrow schema, each naming its own manifest; other
    fields or other schema metadata give other schemas."""
    _schema, uri = all_types
    mf = load_manifest(*resolve(uri))
    again = table_pb2.Manifest()
    again.CopyFrom(mf.manifest)
    a = LanceSchema.from_manifest(mf.manifest, "v1.manifest")
    b = LanceSchema.from_manifest(again, "v2.manifest")
    assert (a.source, b.source) == ("v1.manifest", "v2.manifest")
    assert a.fields is not b.fields and all(x is y for x, y in zip(a.fields, b.fields, strict=True))
    assert a == b and a.by_id == b.by_id and a.metadata == b.metadata and a.metadata is not b.metadata
    # (extension types here: converted anew each time, see the next test)
    assert b.to_arrow().equals(lance.dataset(str(uri)).schema, check_metadata=True)

    f = file_pb2.Field
    base = [f(name="a", id=0, parent_id=-1, logical_type="int32"), f(name="b", id=1, parent_id=-1, logical_type="string")]
    plain = LanceSchema.from_manifest(_manifest(base), "p")
    renamed = LanceSchema.from_manifest(_manifest([base[0], f(name="c", id=1, parent_id=-1, logical_type="string")]), "r")
    tagged = LanceSchema.from_manifest(_manifest(base, {"k": b"v"}), "t")
    assert plain.to_arrow().names == ["a", "b"] and renamed.to_arrow().names == ["a", "c"]
    same = LanceSchema.from_manifest(_manifest(base), "p2")
    assert same.to_arrow() is plain.to_arrow() and same.to_arrow(physical=True) is plain.to_arrow(physical=True)
    assert plain.fields[0] is not renamed.fields[0]
    assert plain.to_arrow().metadata is None and tagged.to_arrow().metadata == {b"k": b"v"}
    # a field list that cannot be converted names each manifest it came from
    bad = [f(name="q", id=0, parent_id=-1, logical_type="quaternion")]
    for source in ("one.manifest", "two.manifest"):
        with pytest.raises(UnsupportedFeatureError, match=source):
            LanceSchema.from_manifest(_manifest(bad), source).to_arrow()
    with pytest.raises(CorruptFileError, match=r"dup\.manifest"):
        LanceSchema.from_manifest(_manifest([base[0], base[0]]), "dup.manifest")


class _LateType(pa.ExtensionType):
    def __init__(self) -> None:
        super().__init__(pa.int64(), "lance_gpu_tests.late")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _LateType:
        return cls()


def test_manifest_schema_sees_extension_types_registered_later() -> None:
    """A schema naming an extension type is converted anew each time: a type registered
    after the first conversion appears in the next one (the field tree is still shared)."""
    f = file_pb2.Field(name="e", id=0, parent_id=-1, logical_type="int64", extension_name="lance_gpu_tests.late")
    first = LanceSchema.from_manifest(_manifest([f]), "m").to_arrow()
    assert first.field("e").type == pa.int64()
    pa.register_extension_type(_LateType())
    try:
        later = LanceSchema.from_manifest(_manifest([f]), "m").to_arrow()
        assert isinstance(later.field("e").type, _LateType)
    finally:
        pa.unregister_extension_type("lance_gpu_tests.late")
    assert LanceSchema.from_manifest(_manifest([f]), "m").to_arrow().field("e").type == pa.int64()


def test_file_schema_bytes_start_the_file_descriptor(all_types: tuple[pa.Schema, Path]) -> None:
    """A data file's FileDescriptor is the schema's kept part and then its row count: the
    bytes of the whole message serialized at once, for every row count."""
    schema, _uri = all_types
    for ls in (LanceSchema.from_arrow(schema), LanceSchema.from_arrow(pa.schema([("a", pa.int64())]))):
        for rows in (0, 1, 16, 127, 128, 300, 1 << 40):
            whole = file_pb2.FileDescriptor(schema=file_pb2.Schema(fields=ls.to_protos(), metadata=ls.metadata), length=rows)
            assert ls.file_schema_bytes() + file_pb2.FileDescriptor(length=rows).SerializeToString() == whole.SerializeToString()
        assert ls.file_schema_bytes() is ls.file_schema_bytes()


def test_derived_values_are_made_once_per_field_tree() -> None:
    """``LanceSchema.derived`` makes a value once for schemas of one field tree (those
    ``from_manifest`` hands out for equal manifests) and keeps it under the caller's key; a
    make that raises keeps nothing.  Data files' column ids and the writer's per-field
    columns are kept so."""
    f = file_pb2.Field
    fields = [f(name="a", id=0, parent_id=-1, logical_type="int32"), f(name="b", id=1, parent_id=-1, logical_type="string")]
    one = LanceSchema.from_manifest(_manifest(fields), "one")
    two = LanceSchema.from_manifest(_manifest(fields), "two")
    made: list[str] = []

    def make() -> list[int]:
        made.append("x")
        return [1, 2]

    assert one.derived(("test", 1), make) is two.derived(("test", 1), make) and made == ["x"]
    assert two.derived(("test", 2), make) == [1, 2] and made == ["x", "x"]

    def fail() -> int:
        raise ValueError("no")

    for _ in range(2):
        with pytest.raises(ValueError):
            one.derived(("failing",), fail)
    other = LanceSchema.from_manifest(_manifest([fields[0]]), "other")
    assert other.derived(("test", 1), make) == [1, 2] and made == ["x", "x", "x"]

    from lance_gpu.write.dataset_writer import _data_file

    a, b = _data_file("f.lance", one, 2, 10), _data_file("g.lance", two, 2, 20)
    assert list(a.fields) == list(b.fields) == [0, 1] and list(a.column_indices) == [0, 1]
    assert (a.path, a.file_size_bytes, b.path, b.file_size_bytes) == ("f.lance", 10, "g.lance", 20)
