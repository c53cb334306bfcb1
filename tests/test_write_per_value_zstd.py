# SPDX-License-Identifier: Apache-2.0
"""Very large binary / string values: per-value ``General{ZSTD}`` inside full-zip pages,
chosen where pylance 14 chooses it, framed as pylance frames it, read back by pylance."""

from __future__ import annotations

import glob
import os
import struct

import numpy as np
import pyarrow as pa
import pytest
import zstandard

import lance_gpu
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.reader import parse_layout

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

TYPES = [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]


def _pages(uri):
    """(reader, page, layout) of the first page of every column of the first data file."""
    path = sorted(glob.glob(os.path.join(uri, "data", "*.lance")))[0]
    reader = LanceFileReader(path)
    out = []
    for c in range(reader.num_columns):
        page = reader.column(c).pages[0]
        out.append((reader, page, parse_layout(page, DecodeContext(path, c))))
    return out


def _chain(enc) -> str:
    parts = []
    while enc is not None and enc.WhichOneof("compression"):
        kind = enc.WhichOneof("compression")
        m = getattr(enc, kind)
        if kind == "variable":
            parts.append(f"variable{m.offsets.flat.bits_per_value}")
            break
        if kind == "general":
            scheme = {1: "lz4", 2: "zstd"}[m.compression.scheme]
            parts.append(f"general-{scheme}-level{m.compression.level}")
        else:
            parts.append(kind)
        enc = getattr(m, "values", None)
    return ">".join(parts)


def _signature(layout):
    kind = layout.WhichOneof("layout")
    m = getattr(layout, kind)
    if kind != "full_zip_layout":
        return (kind, _chain(m.value_compression))
    return (kind, _chain(m.value_compression), m.bits_rep, m.bits_def, m.WhichOneof("details"),
            getattr(m, m.WhichOneof("details")), m.num_items, m.num_visible_items, tuple(m.layers))


def _write_both(tmp_path, tbl, version):
    ours, theirs = str(tmp_path / f"ours_{version}"), str(tmp_path / f"pylance_{version}")
    lance_gpu.write_dataset(tbl, ours, data_storage_version=version)
    lance.write_dataset(tbl, theirs, data_storage_version=version)
    return ours, theirs


def _big(rng, n: int, size: int, kind: pa.DataType) -> list:
    """Hex text (compressible about 2:1) of ``size`` characters."""
    vals = [rng.bytes((size + 1) // 2).hex()[:size] for _ in range(n)]
    return vals if pa.types.is_string(kind) or pa.types.is_large_string(kind) else [v.encode() for v in vals]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("t", TYPES, ids=str)
def test_large_values_layout_matches_pylance(tmp_path, version, t):
    rng = np.random.default_rng(0)
    big = _big(rng, 6, 40_000, t)
    empty = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else b""
    tbl = pa.table({
        "v": pa.array(big, t),
        "v_null": pa.array([big[0], None, empty, big[1], None, big[2]], t),
    })
    ours, theirs = _write_both(tmp_path, tbl, version)
    a = [_signature(layout) for _r, _p, layout in _pages(ours)]
    b = [_signature(layout) for _r, _p, layout in _pages(theirs)]
    assert a == b
    obits = 64 if t in (pa.large_binary(), pa.large_string()) else 32
    assert a[0] == ("full_zip_layout", f"general-zstd-level0>variable{obits}", 0, 0, "bits_per_offset", obits, 6, 6, (1,))
    assert lance.dataset(ours).to_table().equals(tbl)
    assert lance_gpu.dataset(ours, device="cpu").to_table().equals(tbl)
    assert lance_gpu.dataset(theirs, device="cpu").to_table().equals(tbl)


def test_per_value_framing(tmp_path):
    """Each valid value (an empty one too): ``u32|u64 length | u64 LE raw size | zstd frame``;
    a null is its control word alone."""
    rng = np.random.default_rng(1)
    big = _big(rng, 2, 40_000, pa.large_binary())
    tbl = pa.table({"v": pa.array([big[0], None, b"", big[1]], pa.large_binary())})
    ours, _theirs = _write_both(tmp_path, tbl, "2.2")
    reader, page, layout = _pages(ours)[0]
    fz = layout.full_zip_layout
    assert (fz.bits_def, fz.bits_per_offset) == (1, 64)
    data = reader.read_buffers([(page.buffer_offsets[0], page.buffer_sizes[0])])[0].tobytes()
    pos, got = 0, []
    for _ in range(4):
        ctrl = data[pos]
        pos += 1
        if ctrl:
            got.append(None)
            continue
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        (raw,) = struct.unpack_from("<Q", data, pos)
        frame = data[pos + 8 : pos + n]
        assert frame[:4] == b"\x28\xb5\x2f\xfd"
        got.append(zstandard.ZstdDecompressor().decompress(frame, max_output_size=raw))
        assert len(got[-1]) == raw
        pos += n
    assert pos == len(data)
    assert got == [big[0], None, b"", big[1]]


@pytest.mark.parametrize("size,zstd", [(32 * 1024, False), (32 * 1024 + 1, True)])
def test_threshold_is_longest_value_over_32_kib(tmp_path, size, zstd):
    """pylance: per-value compression when the longest value is *longer* than 32 KiB (and the
    page holds 32 KiB of values); a page of one such value among tiny ones too.  Below it,
    strings get FSST and binaries plain Variable (pylance never FSSTs binary columns)."""
    rng = np.random.default_rng(2)
    values = _big(rng, 1, size, pa.binary()) + [b"x"] * 50
    tbl = pa.table({"b": pa.array(values, pa.binary()), "s": pa.array([v.decode() for v in values], pa.string())})
    ours, theirs = _write_both(tmp_path, tbl, "2.2")
    a = [_signature(layout) for _r, _p, layout in _pages(ours)]
    b = [_signature(layout) for _r, _p, layout in _pages(theirs)]
    assert a == b
    assert a[0][1].startswith("general-zstd") == zstd
    assert lance.dataset(ours).to_table().equals(tbl)


def test_general_compression_metadata_on_wide_strings(tmp_path):
    """``lance-encoding:compression`` naming a general scheme makes full-zip values (here
    300-byte strings) per-value zstd; pylance names ZSTD even where lz4 was asked for."""
    rng = np.random.default_rng(3)
    n = 300
    schema = pa.schema([
        pa.field("z", pa.string(), metadata={"lance-encoding:compression": "zstd"}),
        pa.field("l", pa.string(), metadata={"lance-encoding:compression": "lz4"}),
    ])
    tbl = pa.table({
        "z": [rng.bytes(150).hex() for _ in range(n)],
        "l": [rng.bytes(150).hex() for _ in range(n)],
    }, schema=schema)
    ours, theirs = _write_both(tmp_path, tbl, "2.2")
    a = [_signature(layout) for _r, _p, layout in _pages(ours)]
    b = [_signature(layout) for _r, _p, layout in _pages(theirs)]
    assert a == b
    assert a[0][1] == a[1][1] == "general-zstd-level0>variable32"
    assert lance.dataset(ours).to_table().equals(tbl)
