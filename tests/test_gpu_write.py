# SPDX-License-Identifier: Apache-2.0
"""Writing Lance files from device memory (issue 28): the GPU encoder's data files are byte
for byte the CPU encoder's for the same rows, pylance reads every file written, and device
inputs follow the CPU writer's errors and commit rules.

Device tests run under the CUDA simulator::

    NUMBA_ENABLE_CUDASIM=1 LANCE_GPU_TEST_SIM_DEVICE=1 python3 -m pytest -m gpu tests/test_gpu_write.py

Inputs are tiny (the simulator runs every device thread as a Python thread) but cross the
encoders' boundaries: more than one 1024-value FastLanes block, more than one mini-block
chunk, nulls, an all-null and a constant column, 100+ values for the dictionary test.
"""

from __future__ import annotations

import decimal
import enum
import os
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pytest

import lance_gpu
from lance_gpu.errors import GpuUnavailableError, SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.gpu.device_table import DeviceTable

lance = pytest.importorskip("lance")

N = 1100


def _device_column(arr: pa.Array):
    """A DeviceColumn holding exactly ``arr``'s buffers (null slots keep their bytes)."""
    from lance_gpu.gpu import _array
    from lance_gpu.gpu.columns import DeviceColumn

    valid = None if arr.null_count == 0 else _array.upload(arr.is_valid().to_numpy(zero_copy_only=False))
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(1, np.uint8)
        return DeviceColumn(arr.type, len(arr), valid, _array.upload(data), _array.upload(offs))
    if pa.types.is_struct(arr.type):
        children = [_device_column(arr.field(i)) for i in range(arr.type.num_fields)]
        return DeviceColumn(arr.type, len(arr), valid, children=children)
    if pa.types.is_list(arr.type) or pa.types.is_map(arr.type):
        offs = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        child = _device_column(arr.values)  # a map's: its entries struct
        return DeviceColumn(arr.type, len(arr), valid, offsets=_array.upload(offs), children=[child])
    if pa.types.is_fixed_size_list(arr.type):
        values = arr.values.slice(arr.offset * arr.type.list_size, len(arr) * arr.type.list_size)
        inner = _device_column(values)
        return DeviceColumn(arr.type, len(arr), valid, inner.data, item_validity=inner.validity)
    if pa.types.is_boolean(arr.type):
        bits = np.unpackbits(np.frombuffer(arr.buffers()[1], np.uint8), bitorder="little")[arr.offset : arr.offset + len(arr)]
        return DeviceColumn(arr.type, len(arr), valid, _array.upload(np.ascontiguousarray(bits)))
    w = arr.type.bit_width // 8
    buf = arr.buffers()[1]
    raw = np.frombuffer(buf, np.uint8)[arr.offset * w : (arr.offset + len(arr)) * w] if buf is not None else np.zeros(len(arr) * w, np.uint8)
    return DeviceColumn(arr.type, len(arr), valid, _array.upload(np.ascontiguousarray(raw)))


def _device_dict(table: pa.Table) -> dict:
    return {name: _device_column(table.column(name).combine_chunks()) for name in table.column_names}


def _data_files(uri: Path) -> list[bytes]:
    return [(uri / "data" / f).read_bytes() for f in sorted(os.listdir(uri / "data"))]


def _table() -> pa.Table:
    """Columns that exercise every page kind the device encoder makes."""
    rng = np.random.default_rng(7)
    n = N
    return pa.table({
        "packed": pa.array(rng.integers(0, 900, n).astype(np.int32), mask=rng.random(n) < 0.1),  # bit-packed + def
        "plain": pa.array(rng.standard_normal(n).astype(np.float32)),  # flat (nothing to pack)
        "neg": pa.array(rng.integers(-(2**40), 2**40, n)),  # 64-bit, high cardinality: flat
        "flags": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.2),  # booleans with nulls
        "gone": pa.nulls(n, pa.int32()),  # all null: ConstantLayout
        "same": pa.array(np.full(n, 7, np.int16)),  # 2.2: inline constant; 2.1: RLE
        "runs": pa.array(np.repeat(np.arange(11, dtype=np.int32), n // 11), mask=np.arange(n) % 50 == 0),  # RLE + def
        "when": pa.array(rng.integers(0, 10**6, n).astype("datetime64[us]")),
        "name": pa.array([None if i % 13 == 0 else f"user-{v}" for i, v in enumerate(rng.integers(0, 10**9, n))]),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 80).astype(np.float32)), 80),
        "xyz": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 3).astype(np.float32)), 3),  # mini-block
    })


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_device_pages_are_the_cpu_encoders_bytes(tmp_path: Path, version: str) -> None:
    from lance_gpu.write import device_pages

    table = _table()
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version=version)
    made_on_host = {k: v - before.get(k, 0) for k, v in device_pages.host_fallbacks.items() if v != before.get(k, 0)}
    assert made_on_host == {}, "every page here is made on the device"
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)
    assert lance_gpu.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
def test_many_pages_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small pages: columns cut into several pages at the CPU writer's rows, and rows of
    several appended batches buffered and joined on the device -- the same files."""
    from lance_gpu.file.writer import container as file_writer

    monkeypatch.setattr(file_writer, "PAGE_BYTES", 700)
    table = _table().slice(0, 240).drop_columns(["emb"])
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu")
    lance_gpu.write_dataset(table, tmp_path / "cpu")
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)
    monkeypatch.setattr(file_writer, "PAGE_BYTES", 1 << 20)
    parts = [table.slice(0, 100), table.slice(100, 40), table.slice(140)]
    batches = [b for p in parts for b in p.to_batches()]
    from lance_gpu.write.device_input import DeviceBatch

    device = [DeviceBatch(table.schema, [_device_column(b.column(i)) for i in range(b.num_columns)], b.num_rows) for b in batches]
    lance_gpu.write_dataset(iter(device), tmp_path / "gpu2", schema=table.schema)
    lance_gpu.write_dataset(iter(batches), tmp_path / "cpu2", schema=table.schema)
    assert _data_files(tmp_path / "gpu2") == _data_files(tmp_path / "cpu2")


@pytest.mark.gpu
@pytest.mark.parametrize("sample", [None, 64])
def test_dictionaries_from_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: int | None) -> None:
    """64-bit values in 2.2, 128-bit decimals, strings and binaries get the CPU encoder's page dictionary
    (items in order of first occurrence, u32 indices) from the device -- counted exactly on a
    small page, from the sample on a big one (``sample``: a smaller sample makes 300 values
    a big page for both encoders).  Values the sample did not see are found on the device
    (read back 50 at a time here): "rare" still gets its dictionary, "wide" (one value at
    the sampled positions, 236 others elsewhere) is found to have too many -- no dictionary,
    as the CPU encoder decides.  Every page is made on the device; the same file."""
    from lance_gpu.file.encodings.dictionary import device as dictionary_device
    from lance_gpu.file.writer import pages
    from lance_gpu.write import device_pages

    if sample is not None:
        monkeypatch.setattr(pages, "DICT_SAMPLE", sample)
    monkeypatch.setattr(dictionary_device, "MISSES_PER_ROUND", 50)
    n = 300
    rare = np.arange(n, dtype=np.int64) % 5
    rare[7] = 99  # not at a sampled position (every ~4.7th value of 300 with 64 samples)
    sampled = np.zeros(n, np.bool_)
    sampled[np.linspace(0, n - 1, 64).astype(np.int64)] = True
    wide = np.where(sampled, 0, np.arange(n, dtype=np.int64) + 1000)
    rare_text = [f"category-{(i * 31) % 4}" for i in range(n)]
    rare_text[11] = "not-sampled"
    table = pa.table({
        "few": pa.array((np.arange(n, dtype=np.int64) * 7919) % 5 - 2),
        "dec": pa.array([None if i % 17 == 0 else (i % 3) * 10**20 for i in range(n)], pa.decimal128(38, 0)),
        "rare": pa.array(rare),
        "wide": pa.array(wide),
        "cat": pa.array([None if i % 9 == 0 else s for i, s in enumerate(rare_text)]),
        "bin": pa.array([bytes([i % 3]) * 9 for i in range(n)]),
        "wide_text": pa.array([f"v{v}" for v in wide]),
    })
    from lance_gpu.file import encodings

    built: list[int] = []
    real = encodings.ENCODERS["dictionary"].device
    assert real is not None

    def spy(*args):
        got = real(*args)
        built.append(-1 if got is None else got[0].shape[0])
        return got

    monkeypatch.setitem(encodings.ENCODERS, "dictionary", encodings.Encoder(None, spy))
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version="2.2")
    made_on_host = {k: v - before.get(k, 0) for k, v in device_pages.host_fallbacks.items() if v != before.get(k, 0)}
    # device dictionaries: "few" (5 items), "dec" (3 and the null slots' 0), "rare" (6);
    # "wide": over the cap once the misses are counted (sampled), or at once (counted exactly)
    assert sorted(built) == ([-1, 3, 5, 6] if sample is not None else [3, 5, 6])
    assert made_on_host == {}
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version="2.2")
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
def test_fsst_from_the_device(tmp_path: Path) -> None:
    """Strings of 32 KiB and more get FSST: the symbol table trained on the host from the
    CPU encoder's sample (a random ~16 KiB of whole strings, gathered on the device), the
    compression on the device -- the same bytes, smaller than the strings."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(11)
    words = ["alpha", "beta", "gamma", "delta", "lance", "device", "write", "column"]
    rows = 700
    text = [None if i % 23 == 0 else " ".join(rng.choice(words, 9)) + f" #{i}" for i in range(rows)]
    table = pa.table({"text": pa.array(text)})
    raw = pa.compute.sum(pa.compute.binary_length(table.column("text"))).as_py()
    assert raw >= 32 * 1024
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version="2.1")
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version="2.1")
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert len(_data_files(tmp_path / "gpu")[0]) < raw  # compressed
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_lists_from_the_device(tmp_path: Path, version: str) -> None:
    """Structs, lists (with null and empty lists and null items), lists of structs, lists
    of lists, maps, structs of lists, lists without a single value: the levels
    made as the CPU encoder makes them, the values gathered and encoded on the device, the
    repetition index -- the same bytes."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(5)
    n = 400

    def rows(make):
        out = []
        for i in range(n):
            k = int(rng.integers(0, 5))
            out.append(None if i % 11 == 0 else [None if (i + j) % 7 == 0 else make() for j in range(k)])
        return out

    point = pa.struct([("x", pa.int32()), ("label", pa.string()), ("ok", pa.bool_())])
    table = pa.table({
        "point": pa.array(
            [None if i % 6 == 0 else {"x": None if i % 4 == 0 else i, "label": f"p{i}", "ok": i % 3 == 0} for i in range(n)],
            point,
        ),
        "nums": pa.array(rows(lambda: int(rng.integers(0, 3000))), pa.list_(pa.int32())),
        "words": pa.array(rows(lambda: f"w{int(rng.integers(0, 10**6))}"), pa.list_(pa.string())),
        "dense": pa.array([[float(i), float(i) / 2] for i in range(n)], pa.list_(pa.float64())),
        "events": pa.array(
            [None if i % 10 == 0 else [{"t": i + j, "tag": None if j == 1 else f"e{j}"} for j in range(i % 4)] for i in range(n)],
            pa.list_(pa.struct([("t", pa.int64()), ("tag", pa.string())])),
        ),
        "grid": pa.array([None if i % 8 == 0 else [[i, None], [], None] if i % 3 else [] for i in range(n)], pa.list_(pa.list_(pa.int16()))),
        "attrs": pa.array([None if i % 5 == 0 else [("k", i), ("z", -i)] for i in range(n)], pa.map_(pa.string(), pa.int32())),
        "holder": pa.array([{"ids": None if i % 6 == 0 else list(range(i % 3))} for i in range(n)], pa.struct([("ids", pa.list_(pa.int32()))])),
        "nothing": pa.array([None if i % 2 else [] for i in range(n)], pa.list_(pa.int32())),
    })
    if version == "2.1":  # maps need 2.2: the CPU writer's error for device data too

        with pytest.raises(UnsupportedFeatureError, match="map columns"):
            lance_gpu.write_dataset(_device_dict(table.select(["attrs"])), tmp_path / "maps", data_storage_version=version)
        table = table.drop_columns(["attrs"])
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_lists_of_fixed_size_lists_from_the_device(tmp_path: Path, version: str) -> None:
    """Lists of embeddings: narrow rows in mini-block chunks, wide rows full-zip with the
    repetition in their control words and the row index; null and empty lists, null rows --
    the values gathered and encoded on the device, the CPU encoder's bytes."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(12)
    n = 90

    def vectors(dim: int) -> pa.Array:
        rows = []
        for i in range(n):
            k = i % 4
            rows.append(None if i % 9 == 0 else [None if (i + j) % 5 == 0 else rng.standard_normal(dim).astype(np.float32).tolist() for j in range(k)])
        return pa.array(rows, pa.list_(pa.list_(pa.float32(), dim)))

    table = pa.table({"points": vectors(3), "embeddings": vectors(72)})
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_lists_of_fixed_size_lists_with_null_items_from_the_device(tmp_path: Path, version: str) -> None:
    """Lists (and structs) of fixed-size lists whose items are null in valid rows -- narrow
    rows (mini-block, the items' validity packed per chunk) and wide ones (full-zip, zipped
    with each row), beside null rows and null and empty lists (the values gathered on the
    device, a null row's items made null and null items zero as pyarrow's take leaves
    them) and without hidden entries (nothing gathered): every page made on the device, the
    CPU encoder's bytes."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(31)
    n = 80

    def vectors(dim: int, hidden: bool, t: pa.DataType | None = None) -> pa.Array:
        item = (lambda v: bool(v % 2)) if t is not None and pa.types.is_boolean(t) else float
        rows = []
        for i in range(n):
            if hidden and i % 9 == 0:
                rows.append(None)
                continue
            k = 1 + i % 3 if not hidden else i % 4
            rows.append([
                None if (i + j) % 5 == 0 else [None if rng.random() < 0.2 else item(v) for v in rng.integers(0, 99, dim)]
                for j in range(k)
            ])
        return pa.array(rows, pa.list_(pa.list_(t or pa.float32(), dim)))

    table = pa.table({
        "points": vectors(3, True),
        "plain_points": vectors(3, False),
        "embeddings": vectors(70, True),
        "ints": vectors(4, True, pa.int16()),
        "flags": vectors(5, True, pa.bool_()),  # items one byte each on the device, bit-packed
        "pair": pa.StructArray.from_arrays([vectors(2, True), pa.array(np.arange(n))], ["v", "i"], mask=pa.array(np.arange(n) % 7 == 3)),
    })
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_fullzip_pages_from_the_device(tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Full-zip pages: long strings (plain, and FSST-compressed once 32 KiB), long binaries,
    nullable embeddings (control words), lists of long strings (repetition in the control
    words and the row index) -- the same bytes."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(9)
    n = 60
    words = ["gpu", "lance", "write", "zip", "page"]
    long_text = [None if i % 7 == 0 else " ".join(rng.choice(words, 160)) for i in range(n)]
    table = pa.table({
        "text": pa.array(long_text),  # ~0.8 KiB each, over 32 KiB: FSST
        "short_long": pa.array([None if i % 5 == 0 else "x" * (300 + i) for i in range(n)]),  # under 32 KiB: plain
        "blob": pa.array([bytes(rng.integers(0, 256, 260 + i, dtype=np.uint8)) for i in range(n)]),
        "emb": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(n * 70).astype(np.float32)), 70, mask=pa.array(np.arange(n) % 4 == 0)
        ),
        "docs": pa.array([None if i % 9 == 0 else ["y" * (260 + j) for j in range(i % 3)] for i in range(n)]),
    })
    assert sum(len(t) for t in long_text if t) >= 32 * 1024
    from lance_gpu.file import encodings

    fsst_calls: list[int] = []
    cpu, real = encodings.ENCODERS["fsst"]
    assert real is not None
    monkeypatch.setitem(encodings.ENCODERS, "fsst", encodings.Encoder(cpu, lambda *a: fsst_calls.append(1) or real(*a)))
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    gpu_files = _data_files(tmp_path / "gpu")
    assert gpu_files == _data_files(tmp_path / "cpu")
    assert fsst_calls == [1], "the long strings were FSST-compressed on the device"
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_former_host_fallbacks_from_the_device(tmp_path: Path, version: str) -> None:
    """Pages that used to go to the CPU encoder, now made on the device, byte for byte the
    CPU encoder's: fixed-size lists of booleans (bits packed on the device; mini-block, and
    full-zip at 2048 bits a row), fixed-size lists with null items (their validity packed per
    mini-block chunk, or zipped with each full-zip row; all-null items storing no values;
    null items only under null rows adding no validity), fixed-size lists of fixed-size lists
    (mini-block and full-zip) and JSON columns (a host
    ``arrow.json`` column of a ``DeviceTable`` becomes JSONB on its way up; the device
    encodes the documents)."""
    from lance_gpu.write import device_pages

    rng = np.random.default_rng(21)
    n = 70
    rows_null = pa.array(np.arange(n) % 9 == 4)

    def fsl(values: np.ndarray, dim: int, item_nulls=None, row_nulls=None, t=None) -> pa.Array:
        vals = pa.array(values, t, mask=item_nulls)
        return pa.FixedSizeListArray.from_arrays(vals, dim, mask=row_nulls)

    only_under_null_rows = np.zeros(n * 3, np.bool_)
    only_under_null_rows[4 * 3 + 1] = True  # row 4 is null
    table = pa.table({
        "bits": fsl(rng.random(n * 5) < 0.5, 5, row_nulls=rows_null),
        "wide_bits": fsl(rng.random(n * 2048) < 0.5, 2048),
        "holes": fsl(rng.standard_normal(n * 3).astype(np.float32), 3, rng.random(n * 3) < 0.2, rows_null),
        "bit_holes": fsl(rng.random(n * 4) < 0.5, 4, rng.random(n * 4) < 0.3),
        "hidden": fsl(np.arange(n * 3, dtype=np.int16), 3, only_under_null_rows, rows_null),
        "wide_holes": fsl(rng.standard_normal(n * 80).astype(np.float32), 80, rng.random(n * 80) < 0.1, rows_null),
        "wide_gone": fsl(np.zeros(n * 70, np.float32), 70, np.ones(n * 70, np.bool_)),
        "grid": pa.FixedSizeListArray.from_arrays(fsl(rng.standard_normal(n * 12).astype(np.float32), 4), 3, mask=rows_null),
        "cube": pa.FixedSizeListArray.from_arrays(fsl(rng.integers(0, 9, n * 320).astype(np.int16), 40), 8),
        "doc": pa.array([None if i % 6 == 0 else f'{{"id": {i}, "tags": ["a", "b{i % 3}"], "ok": {str(i % 2 == 0).lower()}}}' for i in range(n)], pa.json_(pa.string())),
    })
    device = _device_dict(table.drop_columns(["doc", "cube"]))
    frame = DeviceTable(table.column_names, [*device.values(), table.column("cube"), table.column("doc")], n)
    table = table.select(frame.names)
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(frame, tmp_path / "gpu", data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    back = lance.dataset(tmp_path / "gpu").to_table()
    assert back.drop_columns(["doc"]).equals(table.drop_columns(["doc"]))
    assert back.column("doc").to_pylist() == lance.dataset(tmp_path / "cpu").to_table().column("doc").to_pylist()
    assert lance_gpu.dataset(tmp_path / "gpu").to_table().equals(lance_gpu.dataset(tmp_path / "cpu").to_table())
    # nested fixed-size lists with null items: a device column holds one layer's item validity
    holes = pa.FixedSizeListArray.from_arrays(fsl(np.zeros(n * 4, np.float32), 2, np.arange(n * 4) % 5 == 0), 2)

    with pytest.raises(UnsupportedFeatureError, match="one layer"):
        lance_gpu.write_dataset(DeviceTable(["h"], [holes], n), tmp_path / "holes", data_storage_version=version)


@pytest.mark.gpu
def test_rle_chunks_planned_on_the_device(tmp_path: Path) -> None:
    """RLE pages of many chunks: a stretch of short runs (chunks shrink until their entries
    fit), runs longer than 255 (split), a chunk boundary inside a run, the last chunk what is
    left -- planned from the run starts on the device, the CPU encoder's bytes."""
    from lance_gpu.file.encodings import rle

    rng = np.random.default_rng(4)
    short = np.repeat(rng.integers(0, 50, 3000), 2)  # 6,000 values in runs of 2
    long = np.repeat(rng.integers(0, 1000, 12), rng.integers(256, 700, 12))  # runs over 255
    values = np.concatenate([long[:2500], short, long[2500:], [7, 7, 8]])
    n = values.size
    assert rle.run_count(values) < 0.5 * n
    table = pa.table({
        "wide": pa.array(values.astype(np.int64)),
        "narrow": pa.array((values % 200).astype(np.uint8), mask=np.arange(n) % 1000 == 3),
        "half": pa.array(values.astype(np.int16)),
    })
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", data_storage_version="2.1")
    lance_gpu.write_dataset(table, tmp_path / "cpu", data_storage_version="2.1")
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
def test_nested_pages_from_many_batches_and_long_level_runs(tmp_path: Path) -> None:
    """Lists, maps and structs of lists buffered from several batches are joined on the
    device (offsets moved by kernels, children joined field by field), and rows whose levels
    would overflow a mini-block chunk (65,535) are split in halves as the CPU writer splits
    them -- every page made on the device, the CPU writer's bytes."""
    from lance_gpu.write import device_pages
    from lance_gpu.write.device_input import DeviceBatch

    n = 240
    table = pa.table({
        "nums": pa.array([None if i % 7 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())),
        "words": pa.array([[f"w{i}", None] if i % 3 else [] for i in range(n)], pa.list_(pa.string())),
        "attrs": pa.array([None if i % 5 == 0 else [("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int32())),
        "holder": pa.array([{"ids": None if i % 6 == 0 else list(range(i % 3))} for i in range(n)], pa.struct([("ids", pa.list_(pa.int32()))])),
    })
    batches = [b for part in (table.slice(0, 70), table.slice(70, 1), table.slice(71)) for b in part.to_batches()]
    device = [DeviceBatch(table.schema, [_device_column(b.column(i)) for i in range(b.num_columns)], b.num_rows) for b in batches]
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(iter(device), tmp_path / "gpu", schema=table.schema)
    lance_gpu.write_dataset(iter(batches), tmp_path / "cpu", schema=table.schema)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)

    rows = 70_000  # two values with 69,998 empty lists between them: one chunk would hold them all
    sparse = pa.table({"l": pa.array([[1, 2] if i in (0, rows - 1) else [] for i in range(rows)], pa.list_(pa.int16()))})
    lance_gpu.write_dataset(_device_dict(sparse), tmp_path / "gpu2")
    lance_gpu.write_dataset(sparse, tmp_path / "cpu2")
    assert device_pages.host_fallbacks == before
    assert _data_files(tmp_path / "gpu2") == _data_files(tmp_path / "cpu2")
    assert lance.dataset(tmp_path / "gpu2").to_table().equals(sparse)


@pytest.mark.gpu
def test_general_compressed_string_chunks_go_to_the_cpu_encoder(tmp_path: Path) -> None:
    """Strings whose metadata names zstd, on a page of 32 KiB of them, are chunk-compressed by
    the CPU encoder (no device zstd): counted as a host fallback, the CPU encoder's bytes."""
    from lance_gpu.write import device_pages

    schema = pa.schema([pa.field("s", pa.string(), metadata={"lance-encoding:compression": "zstd"})])
    table = pa.table({"s": [f"compress_me_please-{i}" for i in range(4096)]}, schema=schema)
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", schema=schema)
    made_on_host = {k: v - before.get(k, 0) for k, v in device_pages.host_fallbacks.items() if v != before.get(k, 0)}
    assert made_on_host == {"general-compressed mini-block chunks": 1}
    lance_gpu.write_dataset(table, tmp_path / "cpu", schema=schema)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_field_metadata_steers_the_device_encoder(tmp_path: Path, version: str) -> None:
    """``lance-encoding:compression`` (``none``, ``fsst``), ``structural-encoding``
    (``miniblock`` / ``fullzip``) and ``dict-size-ratio`` on flat and nested leaves: the
    device encoder decides as the CPU encoder does (these fields used to go to it)."""
    from lance_gpu.write import device_pages

    def meta(**kw: str) -> dict:
        keys = {"compression": "lance-encoding:compression", "structural": "lance-encoding:structural-encoding", "ratio": "lance-encoding:dict-size-ratio"}
        return {keys[k]: v for k, v in kw.items()}

    rng = np.random.default_rng(8)
    n = 300
    runs = np.repeat(np.arange(10, dtype=np.int32), n // 10)
    cats = [f"cat-{i % 4}" for i in range(n)]
    fields = [
        ("runs_plain", pa.int32(), runs, meta(compression="none")),  # no RLE: flat
        ("same_plain", pa.int16(), np.full(n, 3, np.int16), meta(compression="none")),  # no constant (2.2)
        ("same_zip", pa.int16(), np.full(n, 3, np.int16), meta(structural="fullzip")),  # full-zip, no constant
        ("cats_plain", pa.string(), cats, meta(compression="none")),  # no dictionary
        ("cats_ratio", pa.int64(), (np.arange(n) % 7).astype(np.int64), meta(ratio="0.01")),  # no dictionary (2.2)
        ("short_fsst", pa.string(), [f"row {i} of the table" for i in range(n)], meta(compression="fsst")),  # forced FSST
        ("bin_fsst", pa.binary(), [b"bytes-%d" % i for i in range(n)], meta(compression="fsst")),
        ("text_zip", pa.string(), [None if i % 9 == 0 else f"t{i}" for i in range(n)], meta(structural="fullzip")),
        ("wide_mini", pa.binary(300), [bytes([i % 256]) * 300 for i in range(n)], meta(structural="miniblock")),
        ("zstd_short", pa.string(), [f"z{i}" for i in range(n)], meta(compression="zstd")),  # short page: as the default
    ]
    schema = pa.schema([pa.field(name, t, metadata=m) for name, t, _v, m in fields] + [
        pa.field("emb_mini", pa.list_(pa.float32(), 70), metadata=meta(structural="miniblock")),
        pa.field("nested", pa.list_(pa.field("item", pa.int32(), metadata=meta(compression="none")))),
    ])
    emb = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 70).astype(np.float32)), 70)
    nested = pa.array([None if i % 5 == 0 else [i % 3] * (i % 4) for i in range(n)], pa.list_(pa.int32()))
    table = pa.Table.from_arrays([*[pa.array(v, t) for _name, t, v, _m in fields], emb, nested], schema=schema)
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(_device_dict(table), tmp_path / "gpu", schema=schema, data_storage_version=version)
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "cpu", schema=schema, data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
def test_device_columns_keep_item_validity() -> None:
    """A fixed-size-list device column keeps its items' validity through upload, take,
    slice and the copy back to Arrow (it used to be dropped: null items came back valid)."""
    from lance_gpu.gpu.columns import DeviceColumn
    from lance_gpu.gpu.device_table import DeviceTable

    arr = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3, 4, None, 6], pa.float32()), 2, mask=pa.array([False, False, True]))
    col = DeviceColumn.from_arrow(arr)
    assert col.to_arrow().equals(arr)
    taken = DeviceTable(["f"], [col], len(arr)).take(np.array([1, 0], np.int64))  # gathered by combining
    assert taken.column("f").to_arrow().equals(arr.take(pa.array([1, 0])))
    assert col.slice(1, 3).to_arrow().equals(arr.slice(1, 2))


@pytest.mark.gpu
def test_append_overwrite_and_fragments_from_the_device(tmp_path: Path) -> None:
    small = _table().slice(0, 200)
    uri = tmp_path / "ds"
    ds = lance_gpu.write_dataset(_device_dict(small), uri)
    ds.insert(_device_dict(small.select(list(reversed(small.column_names)))))  # columns in another order
    assert lance.dataset(uri).to_table().equals(pa.concat_tables([small, small]))
    # an append whose types do not match fails before anything is committed
    bad = _device_dict(small)
    bad["packed"] = _device_column(pa.array(np.arange(200, dtype=np.int64)))
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(bad, uri, mode="append")
    assert lance.dataset(uri).version == 2
    with pytest.raises(ValueError):  # the CPU writer's class for the same mistake
        lance_gpu.write_dataset(small.set_column(0, "packed", pa.array(np.arange(200))), uri, mode="append")
    lance_gpu.write_dataset(_device_dict(small.slice(0, 50)), uri, mode="overwrite")
    assert lance.dataset(uri).to_table().equals(small.slice(0, 50))
    frags = lance_gpu.fragment.write_fragments(_device_dict(small), tmp_path / "frags", mode="create")
    assert sum(f.physical_rows for f in frags) == 200


@pytest.mark.gpu
def test_a_failed_device_write_commits_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device encoder that fails part-way (here the string chunker, after other pages were
    written) leaves the dataset as it was and no data file behind."""
    from lance_gpu.file import encodings

    small = _table().slice(0, 120)
    uri = tmp_path / "ds"
    lance_gpu.write_dataset(small, uri)
    files_before = sorted(os.listdir(uri / "data"))

    def broken(*_args):
        raise MemoryError("out of device memory (simulated)")

    monkeypatch.setitem(encodings.ENCODERS, "variable", encodings.Encoder(None, broken))
    with pytest.raises(MemoryError):
        lance_gpu.write_dataset(_device_dict(small), uri, mode="append")
    assert lance.dataset(uri).version == 1
    assert sorted(os.listdir(uri / "data")) == files_before
    assert lance.dataset(uri).to_table().equals(small)


@pytest.mark.gpu
def test_a_device_table_with_host_columns(tmp_path: Path) -> None:
    """A ``DeviceTable`` (the GPU reader's output) may hold host Arrow columns too: they are
    uploaded and written like the rest -- an Arrow dictionary column, which no device column
    holds, stays on the host for the CPU encoder (it used to fail the upload with a bare
    TypeError)."""
    from lance_gpu.gpu.columns import DeviceColumn

    table = pa.table({
        "n": pa.array(np.arange(50, dtype=np.int32)),
        "s": pa.array([None if i % 4 == 0 else f"s{i}" for i in range(50)]),
        "l": pa.array([[f"a{i}", None] if i % 3 else None for i in range(50)], pa.list_(pa.string())),
        "d": pa.array([None if i % 7 == 0 else f"k{i % 3}" for i in range(50)]).dictionary_encode(),  # stays on the host
    })
    host = [table.column(name) for name in ("s", "l", "d")]
    frame = DeviceTable(table.column_names, [_device_column(table.column("n").combine_chunks()), *host], 50)
    assert isinstance(frame.columns[0], DeviceColumn)
    lance_gpu.write_dataset(frame, tmp_path / "gpu")
    lance_gpu.write_dataset(table, tmp_path / "cpu")
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(table)


@pytest.mark.gpu
def test_bad_device_input_gets_the_cpu_writers_errors(tmp_path: Path) -> None:
    from numba import cuda


    uneven = {"a": cuda.to_device(np.arange(5)), "b": cuda.to_device(np.arange(4))}
    with pytest.raises(ValueError, match="different lengths"):
        lance_gpu.write_dataset(uneven, tmp_path / "x")
    with pytest.raises(ValueError, match="same length"):  # the host writer, same mistake
        lance_gpu.write_dataset({"a": np.arange(5), "b": np.arange(4)}, tmp_path / "y")
    with pytest.raises(UnsupportedFeatureError):
        lance_gpu.write_dataset({"z": cuda.to_device(np.zeros(3, np.complex64))}, tmp_path / "z")
    assert not (tmp_path / "x").exists() and not (tmp_path / "z").exists()


class _TypeId(enum.IntEnum):
    """The ``pylibcudf.TypeId`` members the fake uses (libcudf's numbering)."""

    INT32 = 3
    INT64 = 4
    OTHER = 99


class _PlcType:
    def __init__(self, type_id: _TypeId) -> None:
        self._id = type_id

    def id(self) -> _TypeId:
        return self._id


def _padded_bitmap(buf: pa.Buffer | None):
    """A device copy of an Arrow validity bitmap, padded to 64 bytes as libcudf allocates
    null masks (``bitmask_allocation_size_bytes``)."""
    from numba import cuda

    if buf is None:
        return None
    raw = np.frombuffer(buf, np.uint8)
    out = np.zeros(max(64, -(-raw.size // 64) * 64), np.uint8)
    out[: raw.size] = raw
    return cuda.to_device(out)


class _PlcColumn:
    """What ``pylibcudf.Column`` exposes (``python/pylibcudf/pylibcudf/column.pyi`` of
    ``rapidsai/cudf``), over simulator device copies of an Arrow array's *unsliced*
    buffers -- libcudf's layout: ``offset()`` rows into the buffers and ``size()`` rows from
    there; the null mask a bitmap of the unsliced rows (padded to 64 bytes); BOOL8 one byte
    a value; strings: the characters as ``data()``, the offsets column as the one child;
    lists: children (offsets, items), the items their own view; structs: one child per
    field, unsliced (the parent's offset adds to theirs)."""

    def __init__(self, arr: pa.Array, offset: int, size: int, type_id: _TypeId = _TypeId.OTHER) -> None:
        from numba import cuda

        self._type, self._offset, self._size = _PlcType(type_id), offset, size
        t = arr.type
        bufs = arr.buffers()
        self._mask = _padded_bitmap(bufs[0])
        bits = None if bufs[0] is None else np.unpackbits(np.frombuffer(bufs[0], np.uint8), bitorder="little")
        self._nulls = 0 if bits is None else int(size - bits[offset : offset + size].sum())
        self._data = None
        self._children: list[_PlcColumn] = []
        if pa.types.is_struct(t):
            # pyarrow's field(i) is sliced by the parent's offset: take it back off
            fields = [arr.field(i) for i in range(t.num_fields)]
            self._children = [_PlcColumn(f, f.offset - arr.offset, arr.offset + len(arr)) for f in fields]
        elif pa.types.is_list(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
            wide = pa.types.is_large_string(t)
            offs = np.frombuffer(bufs[1], np.int64 if wide else np.int32)[: arr.offset + len(arr) + 1]
            kind = _TypeId.INT64 if wide else _TypeId.INT32
            self._children = [_PlcColumn.of_values(offs.copy(), kind)]
            if pa.types.is_list(t):
                self._children.append(_PlcColumn(arr.values, arr.values.offset, len(arr.values)))
            elif bufs[2] is not None and bufs[2].size:
                self._data = cuda.to_device(np.frombuffer(bufs[2], np.uint8).copy())
        elif pa.types.is_boolean(t):
            raw = np.unpackbits(np.frombuffer(bufs[1], np.uint8), bitorder="little")[: arr.offset + len(arr)]
            self._data = cuda.to_device(np.ascontiguousarray(raw))
        else:
            width = t.bit_width // 8
            self._data = cuda.to_device(np.frombuffer(bufs[1], np.uint8)[: (arr.offset + len(arr)) * width].copy())

    @classmethod
    def of_values(cls, values: np.ndarray, type_id: _TypeId) -> _PlcColumn:
        return cls(pa.array(values), 0, len(values), type_id)

    def type(self) -> _PlcType:
        return self._type

    def size(self) -> int:
        return self._size

    def offset(self) -> int:
        return self._offset

    def null_count(self) -> int:
        return self._nulls

    def data(self):
        return self._data

    def null_mask(self):
        return self._mask

    def children(self) -> list[_PlcColumn]:
        return list(self._children)

    def num_children(self) -> int:
        return len(self._children)


class _CudfDtype:
    """A cuDF extension dtype (``ListDtype``, ``StructDtype``, ``Decimal64Dtype``,
    ``CategoricalDtype``): its ``name`` and ``to_arrow()``."""

    def __init__(self, name: str, arrow: pa.DataType) -> None:
        self.name = name
        self._arrow = arrow

    def to_arrow(self) -> pa.DataType:
        return self._arrow

    def __str__(self) -> str:
        return self.name


def _cudf_dtype(t: pa.DataType):
    if pa.types.is_string(t):
        return np.dtype(object)
    if pa.types.is_list(t):
        return _CudfDtype("list", t)
    if pa.types.is_struct(t):
        return _CudfDtype("struct", t)
    if pa.types.is_decimal(t):
        return _CudfDtype(f"decimal{t.bit_width}", t)
    if pa.types.is_dictionary(t):
        return _CudfDtype("category", t)
    return np.dtype(t.to_pandas_dtype())


class _FakeSeries:
    """What the cuDF adapter may use of a ``cudf.Series``: ``dtype``, ``len()``,
    ``null_count``, ``to_pylibcudf()`` (zero copy) -- and ``to_arrow()``, a host copy the
    adapter may take only for category columns (counted)."""

    host_copies: ClassVar[list[str]] = []

    def __init__(self, name: str, arr: pa.Array) -> None:
        self.name = name
        self._arr = arr
        self.dtype = _cudf_dtype(arr.type)
        self.null_count = arr.null_count

    def __len__(self) -> int:
        return len(self._arr)

    def to_pylibcudf(self) -> tuple[_PlcColumn, dict]:
        return _PlcColumn(self._arr, self._arr.offset, len(self._arr)), {"name": self.name}

    def to_arrow(self) -> pa.Array:
        _FakeSeries.host_copies.append(self.name)
        return self._arr


class DataFrame:
    """A stand-in for ``cudf.DataFrame`` (cuDF is not installed here): rows ``offset :
    offset + length`` of ``table``, as ``frame.iloc[offset : offset + length]`` gives them
    (each column a view with that offset into the unsliced buffers)."""

    __module__ = "cudf.core.dataframe"

    def __init__(self, table: pa.Table, offset: int = 0, length: int | None = None) -> None:
        self._t = table.slice(offset, length)
        self.columns = table.column_names

    def __getitem__(self, name: str) -> _FakeSeries:
        chunks = self._t.column(name).chunks
        assert len(chunks) == 1
        return _FakeSeries(name, chunks[0])


def _cudf_table(n: int) -> pa.Table:
    """Every cuDF column kind the adapter takes from device buffers, with nulls at every
    level (a category column too: the one kind taken through ``to_arrow()``)."""
    rng = np.random.default_rng(3)
    dec = [None if i % 11 == 0 else decimal.Decimal(int(v)).scaleb(-2) for i, v in enumerate(rng.integers(-(10**9), 10**9, n))]
    items = pa.array(rng.integers(0, 40, 4 * n).astype(np.int32), mask=rng.random(4 * n) < 0.1).slice(5)  # items with an offset
    lengths = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.table({
        "x": pa.array(rng.integers(0, 50, n).astype(np.int32), mask=rng.random(n) < 0.2),
        "y": pa.array(rng.random(n)),
        "ok": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "when": pa.array(rng.integers(0, 10**9, n).astype("datetime64[us]")),
        "s": pa.array([None if i % 7 == 0 else f"s{v}" for i, v in enumerate(rng.integers(0, 10**6, n))]),
        "d128": pa.array(dec, pa.decimal128(20, 2)),
        "d64": pa.array(dec, pa.decimal64(18, 2)),
        "d32": pa.array([None if v is None else v.scaleb(-6).quantize(decimal.Decimal("0.01")) for v in dec], pa.decimal32(9, 2)),
        "ints": pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(np.arange(n) % 9 == 1)),
        "tags": pa.array([None if i % 10 == 3 else [None if (i + j) % 4 == 0 else f"t{(i + j) % 13}" for j in range(i % 3)] for i in range(n)]),
        "pt": pa.array([None if i % 8 == 2 else {"a": i % 5, "b": None if i % 6 == 0 else f"p{i}"} for i in range(n)]),
        "pts": pa.array([[{"a": j, "b": [j, None]} for j in range(i % 3)] for i in range(n)]),
        "cat": pa.array([f"c{i % 4}" for i in range(n)]).dictionary_encode(),
    })


def _as_lance(table: pa.Table) -> pa.Table:
    """What the adapter makes of cuDF's types: decimal32 / decimal64 as decimal128."""
    from lance_gpu.write.device_input import _lance_type

    return table.cast(pa.schema([f.with_type(_lance_type(f.type)) for f in table.schema]))


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_a_cudf_frame_through_the_buffer_adapter(tmp_path: Path, version: str) -> None:
    """A cuDF frame -- a row slice, so every column is a view with an offset into its
    buffers, as ``frame.iloc[a:b]`` gives -- read through ``to_pylibcudf()``: numbers,
    booleans, timestamps, strings, decimals (32 and 64 bits widened to decimal128 on the
    device), lists, structs and their nestings, all with nulls, made into device columns
    without a host copy (only the category column goes through ``to_arrow()``); every page
    made on the device, the CPU encoder's bytes for the same rows; pylance and we read the
    rows back."""
    from lance_gpu.write import device_pages

    base = _cudf_table(300)
    lo, n = 37, 200
    want = _as_lance(base.slice(lo, n))
    _FakeSeries.host_copies.clear()
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(DataFrame(base, lo, n), tmp_path / "gpu", data_storage_version=version)
    assert _FakeSeries.host_copies == ["cat"]
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(want, tmp_path / "cpu", data_storage_version=version)
    assert _data_files(tmp_path / "gpu") == _data_files(tmp_path / "cpu")
    assert lance.dataset(tmp_path / "gpu").to_table().equals(want.combine_chunks())
    assert lance_gpu.dataset(tmp_path / "gpu").to_table().equals(want.combine_chunks())


@pytest.mark.parametrize("t", [pa.decimal32(9, 2), pa.decimal64(18, 2)])
def test_narrow_decimals_from_the_host_are_refused_as_pylance_refuses_them(tmp_path: Path, t: pa.DataType) -> None:
    """Lance stores decimal128 and decimal256 only: pylance refuses decimal32 / decimal64
    Arrow columns ("Unsupported data type"), and so does the CPU writer (it wrote files
    pylance could not open); nothing is written.  (A cuDF frame's narrow decimals are
    widened to decimal128 by the device adapter: see the cuDF frame test.)"""
    table = pa.table({"d": pa.array([decimal.Decimal("1.25"), None], t)})
    with pytest.raises(Exception, match="Unsupported data type") as theirs:
        lance.write_dataset(table, tmp_path / "pylance")
    with pytest.raises(UnsupportedFeatureError, match="Unsupported data type") as ours:
        lance_gpu.write_dataset(table, tmp_path / "ours")
    assert isinstance(theirs.value, OSError) and isinstance(ours.value, OSError)  # pylance's builtin
    assert not (tmp_path / "ours").exists()


@pytest.mark.gpu
def test_cudf_adapter_layouts() -> None:
    """The adapter's device columns against the rows they view: struct fields sliced by
    their parent's offset, list items their own view, large-string (INT64) offsets, an
    all-empty string column (no offsets child, no data), all-null masks."""
    from lance_gpu.write.device_input import _cudf_column

    strings = pa.array(["ab", None, "", "cde", "f"], pa.large_string()).slice(1)
    col = _cudf_column("s", _FakeSeries("s", strings))
    assert col.to_arrow().equals(strings.cast(pa.string()))  # the dtype (object) says string, as cuDF's to_arrow() does
    empty = _cudf_column("e", _FakeSeries("e", pa.array(["", "", ""])))
    assert empty.to_arrow().to_pylist() == ["", "", ""]
    nested = pa.array([{"a": None, "b": [1, None]}, None, {"a": 2, "b": []}, {"a": 3, "b": None}]).slice(1, 3)
    assert _cudf_column("n", _FakeSeries("n", nested)).to_arrow().equals(nested)
    gone = pa.nulls(4, pa.int64()).slice(1)
    assert _cudf_column("g", _FakeSeries("g", gone)).to_arrow().to_pylist() == [None] * 3
    from lance_gpu.write.device_input import _plc_column

    kept = _PlcColumn(pa.array(np.arange(5, dtype=np.int64)), 0, 5)
    kept._mask = _padded_bitmap(pa.py_buffer(np.packbits(np.ones(5, np.bool_), bitorder="little")))  # a mask without nulls
    got = _plc_column("k", kept, pa.int64(), 0, 5)
    assert got.validity is None and got.to_arrow().to_pylist() == [0, 1, 2, 3, 4]


def test_device_data_without_a_gpu_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No usable GPU: device inputs raise GpuUnavailableError (nothing written); host inputs
    keep the CPU writer."""
    import lance_gpu._device as device_mod

    monkeypatch.setattr(device_mod, "gpu_unusable_reason", lambda: "no CUDA device is visible")
    frame = DeviceTable(["a"], [pa.array([1, 2, 3])], 3)
    with pytest.raises(GpuUnavailableError, match="no CUDA device"):
        lance_gpu.write_dataset(frame, tmp_path / "d")
    with pytest.raises(GpuUnavailableError, match="no CUDA device"):  # a cuDF frame: refused before any buffer is read
        lance_gpu.write_dataset(DataFrame(pa.table({"a": [1, 2, 3]})), tmp_path / "d")
    with pytest.raises(GpuUnavailableError, match="no CUDA device"):  # a CUDA DLPack tensor is device data
        lance_gpu.write_dataset({"a": _DLPackTensor(np.arange(3), 2)}, tmp_path / "d")
    with pytest.raises(ImportError):  # what pylance-style callers catch
        lance_gpu.fragment.write_fragments(frame, tmp_path / "f", mode="create")
    assert not (tmp_path / "d").exists()
    lance_gpu.write_dataset(pa.table({"a": [1, 2, 3]}), tmp_path / "h")
    assert lance.dataset(tmp_path / "h").count_rows() == 3


class _DLPackTensor:
    """A DLPack producer over a NumPy array that reports ``device_type`` (1: CPU, 2: CUDA --
    under the CUDA simulator device memory is host memory, so a "CUDA" producer's buffer
    is the NumPy array's)."""

    def __init__(self, values: np.ndarray, device_type: int) -> None:
        self._values = values
        self._device_type = device_type

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._device_type, 0)

    def __dlpack__(self, stream=None, **_kwargs):
        return self._values.__dlpack__()


def _dlpack_table() -> tuple[pa.Table, dict[str, np.ndarray]]:
    rng = np.random.default_rng(17)
    n = 300
    arrays = {
        "id": np.arange(n, dtype=np.int64),
        "score": rng.standard_normal(n).astype(np.float32),
        "ok": rng.random(n) < 0.5,
        "emb": rng.standard_normal((n, 8)).astype(np.float32),
    }
    table = pa.table({
        "id": arrays["id"], "score": arrays["score"], "ok": arrays["ok"],
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(arrays["emb"].reshape(-1)), 8),
    })
    return table, arrays


def test_host_dlpack_columns_take_the_cpu_writer(tmp_path: Path) -> None:
    """DLPack producers in host memory (a CPU torch tensor, ...) are host columns: 1-d as
    their values, 2-d as fixed-size lists -- the files of the same Arrow table."""
    table, arrays = _dlpack_table()
    data = {k: _DLPackTensor(v, 1) for k, v in arrays.items()}
    lance_gpu.write_dataset(data, tmp_path / "dl")
    lance_gpu.write_dataset(table, tmp_path / "arrow")
    assert _data_files(tmp_path / "dl") == _data_files(tmp_path / "arrow")
    assert lance.dataset(tmp_path / "dl").to_table().equals(table)
    torch = pytest.importorskip("torch")
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    lance_gpu.write_dataset(tensors, tmp_path / "torch")
    assert _data_files(tmp_path / "torch") == _data_files(tmp_path / "arrow")
    with pytest.raises(ValueError, match="device memory"):  # one column on the device, the rest on the host
        lance_gpu.write_dataset({"id": arrays["id"], "x": _DLPackTensor(arrays["score"], 2)}, tmp_path / "mixed")
    assert not (tmp_path / "mixed").exists()


@pytest.mark.gpu
def test_cuda_dlpack_columns_encode_on_the_device(tmp_path: Path) -> None:
    """DLPack producers in CUDA memory are device columns (``cupy.from_dlpack`` on a GPU;
    the simulator reads their host-backed buffer): every page made on the device, the files
    of the same Arrow table."""
    from lance_gpu.write import device_pages

    table, arrays = _dlpack_table()
    data = {k: _DLPackTensor(v, 2) for k, v in arrays.items()}
    before = dict(device_pages.host_fallbacks)
    lance_gpu.write_dataset(data, tmp_path / "dl")
    assert device_pages.host_fallbacks == before
    lance_gpu.write_dataset(table, tmp_path / "arrow")
    assert _data_files(tmp_path / "dl") == _data_files(tmp_path / "arrow")
    assert lance.dataset(tmp_path / "dl").to_table().equals(table)
