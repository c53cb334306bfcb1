# SPDX-License-Identifier: Apache-2.0
"""JSON columns read as text: the compiled JSONB printer (``lance_gpu.file._jsonb_text``)
gives the reference decoder's bytes (``decode_jsonb`` + ``json.dumps``), and pylance's."""

from __future__ import annotations

import struct
from pathlib import Path

import hypothesis.strategies as st
import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import lance_gpu
from lance_gpu.errors import CorruptFileError
from lance_gpu.file._jsonb_text import MAX_DEPTH, jsonb_array_to_text
from lance_gpu.file.jsonb import encode_jsonb, float_text, jsonb_to_text, reference_jsonb_to_text

# integers of every JSONB width (1/2/4/8 bytes, signed and unsigned) and their edges
_EDGES = [0, 1, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
          -1, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
_INTS = st.one_of(st.sampled_from(_EDGES), st.integers(-(2**63), 2**64 - 1), st.integers(-300, 300))
_FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, -0.0, 1e20, 1e-7, 5e-324, 1.7976931348623157e308]))
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(['"', "\\", "\n\t\r\b\f", "\x00\x1f\x7f", "é€😀", "\u2028"])
_SCALARS = st.none() | st.booleans() | _INTS | _FLOATS | _TEXT
_DOCS = st.recursive(_SCALARS, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(_TEXT, kids, max_size=5), max_leaves=30)


def _column(docs: list, offset: int = 0) -> pa.Array:
    raw = [None if d is _NULL_ROW else encode_jsonb(d) for d in docs]
    return pa.array([b"pad"] * offset + raw, pa.large_binary()).slice(offset)


_NULL_ROW = object()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_DOCS | st.just(_NULL_ROW), max_size=12), st.integers(0, 2))
def test_compiled_printer_gives_the_reference_bytes(docs: list, offset: int) -> None:
    column = _column(docs, offset)
    got = jsonb_array_to_text(column)
    assert got is not None
    want = reference_jsonb_to_text(column, "p")
    assert got.equals(want), (got, want)


def test_numbers_of_every_width_and_float_forms() -> None:
    docs = [*_EDGES, [0.1, 2.5, 1.0, -0.0, 1e20, 1e-20, 123456789.125, float("nan"), float("inf")], {"k": -(2**63)}]
    column = _column(docs)
    got = jsonb_array_to_text(column)
    assert got is not None
    assert got.to_pylist() == reference_jsonb_to_text(column, "p").to_pylist()
    assert got.to_pylist()[:3] == ["0", "1", "255"]
    floats = [1e-5, -1.6441465273575595e-05, 1e-7, 1e15, 1e16, 1e300, 5e-324, 0.0001]
    got = jsonb_array_to_text(_column([floats])).to_pylist()
    assert got == ["[0.00001,-0.000016441465273575595,1e-7,1000000000000000.0,1e+16,1e+300,5e-324,0.0001]"]
    # a float64 holding an infinity or NaN (not the special tags) prints as json prints it
    specials = [b"\x60" + struct.pack(">d", v) for v in (float("inf"), float("-inf"), float("nan"))]
    docs_raw = [struct.pack(">II", 0x2 << 28, (0x2 << 28) | 9) + d for d in specials]
    column = pa.array(docs_raw, pa.large_binary())
    assert jsonb_array_to_text(column).to_pylist() == ["Infinity", "-Infinity", "NaN"] == reference_jsonb_to_text(column, "p").to_pylist()


def _object(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A JSONB object of string keys and string values, in the given order."""
    entries = [(0x1 << 28) | len(k) for k, _ in pairs] + [(0x1 << 28) | len(v) for _, v in pairs]
    return struct.pack(f">{1 + len(entries)}I", (0x4 << 28) | len(pairs), *entries) + b"".join(k for k, _ in pairs) + b"".join(v for _, v in pairs)


def test_what_the_printer_leaves_to_the_reference() -> None:
    # a repeated key (the reference keeps the last value), keys out of order, deep nesting
    repeated = pa.array([_object([(b"a", b"1"), (b"a", b"2")])], pa.large_binary())
    unordered = pa.array([_object([(b"b", b"1"), (b"a", b"2")])], pa.large_binary())
    deep = pa.array([encode_jsonb(_nest(MAX_DEPTH + 1))], pa.large_binary())
    for column in (repeated, unordered, deep):
        assert jsonb_array_to_text(column) is None
        assert jsonb_to_text(column, "p").equals(reference_jsonb_to_text(column, "p"))
    assert jsonb_to_text(repeated, "p").to_pylist() == ['{"a":"2"}']
    assert jsonb_to_text(unordered, "p").to_pylist() == ['{"b":"1","a":"2"}']


def _nest(depth: int) -> list:
    doc: list = []
    for _ in range(depth - 1):
        doc = [doc]
    return doc


@pytest.mark.parametrize(
    "raw",
    [
        b"\x80\x00",  # shorter than a header
        struct.pack(">I", 0x8 << 28 | 2) + struct.pack(">I", 0x2 << 28 | 2),  # entries past the end
        struct.pack(">II", 0x2 << 28, 0x1 << 28 | 2) + b"\xff\xfe",  # a string that is not UTF-8
        struct.pack(">II", 0x2 << 28, 0x2 << 28 | 4) + b"\x50\x00\x00\x01",  # 3-byte integer
        struct.pack(">II", 0x2 << 28, 0x7 << 28),  # entry type 7
        struct.pack(">II", 0x2 << 28, 0x1 << 28 | 1) + b"ab",  # trailing byte
    ],
)
def test_malformed_documents_raise_corrupt_file_error(raw: bytes) -> None:
    column = pa.array([encode_jsonb({"ok": 1}), raw], pa.large_binary())
    assert jsonb_array_to_text(column) is None
    with pytest.raises(CorruptFileError, match="JSON value 1"):
        jsonb_to_text(column, "p")


@pytest.mark.parametrize("storage", ["2.0", "2.1"])
def test_json_column_reads_as_pylance_reads_it(tmp_path: Path, storage: str) -> None:
    rng = np.random.default_rng(3)
    docs = []
    for i in range(3000):
        docs.append(None if i % 97 == 0 else
                    f'{{"id": {i}, "x": {rng.random()!r}, "neg": {-int(rng.integers(0, 2**40))}, '
                    f'"tags": ["a\\n", "é", {i % 7}], "o": {{"b": {i % 5}, "a": null, "t": true}}}}')
    uri = str(tmp_path / "j.lance")
    lance.write_dataset(pa.table({"j": pa.array(docs, pa.json_(pa.utf8()))}), uri, data_storage_version=storage)
    ours = lance_gpu.dataset(uri, device="cpu").to_table()
    theirs = lance.dataset(uri).to_table()
    assert ours.column("j").to_pylist() == theirs.column("j").to_pylist()


def test_floats_print_as_pylance_prints_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    values = np.concatenate([rng.random(400) * 10.0 ** rng.integers(-320, 308, 400), -rng.random(100) * 1e-5,
                             [1e-5, 1e-7, 1e15, 1e16, 1e21, 0.1, 2.5, 1.0, -0.0, 5e-324, 1.7976931348623157e308]])
    docs = [f"[{v!r}]" for v in values.tolist()]
    uri = str(tmp_path / "f.lance")
    lance.write_dataset(pa.table({"j": pa.array(docs, pa.json_(pa.utf8()))}), uri)
    ours = lance_gpu.dataset(uri, device="cpu").to_table()
    theirs = lance.dataset(uri).to_table()
    assert ours.column("j").to_pylist() == theirs.column("j").to_pylist()


def test_float_layout_matches_the_reference_over_random_bit_patterns() -> None:
    rng = np.random.default_rng(5)
    values = np.concatenate([rng.integers(0, 2**63, 20000, dtype=np.uint64).view(np.float64),
                             rng.random(5000) * 10.0 ** rng.integers(-8, 20, 5000), np.array([0.0, -0.0])])
    values = values[np.isfinite(values)]
    column = pa.array([encode_jsonb(float(v)) for v in values], pa.large_binary())
    assert jsonb_array_to_text(column).to_pylist() == [float_text(float(v)) for v in values]


def test_text_longer_than_the_first_buffer_grows_it() -> None:
    # control bytes print as six bytes each (\u0001): the text outgrows twice the JSONB
    docs = ["\x01" * 5000, [1.5, "\x02" * 3000, 2.25], None, {"k": "\x1f" * 7000, "z": 0.1}] * 5
    column = pa.array([encode_jsonb(d) for d in docs], pa.large_binary())
    got = jsonb_array_to_text(column)
    assert got is not None
    assert got.equals(reference_jsonb_to_text(column, "p"))
