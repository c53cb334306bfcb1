"""FSST decode (CPU) against a pure-Python reference decoder."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import CorruptInputError, fsst_decode
from cuda_kernels.errors import ERR_BAD_CODE, ERR_OUT_OF_BOUNDS, ERR_TRUNCATED
from cuda_kernels.fsst import fsst_decoded_lengths


def make_table(symbol_bytes):
    """Symbol list (bytes of 1..8) -> (symbols u64[256], lengths u8[256], n)."""
    symbols = np.zeros(256, dtype=np.uint64)
    lengths = np.zeros(256, dtype=np.uint8)
    for i, s in enumerate(symbol_bytes):
        symbols[i] = int.from_bytes(s, "little")
        lengths[i] = len(s)
    return symbols, lengths, len(symbol_bytes)


def ref_decode(symbol_bytes, codes):
    """Pure-Python decoder of one compressed string."""
    out = bytearray()
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 255:
            out.append(codes[i + 1])
            i += 2
        else:
            out += symbol_bytes[c]
            i += 1
    return bytes(out)


def greedy_encode(symbol_bytes, data):
    """Simple encoder (longest symbol match, else escape) used to build test inputs."""
    by_len = sorted(range(len(symbol_bytes)), key=lambda i: -len(symbol_bytes[i]))
    codes = bytearray()
    i = 0
    while i < len(data):
        for c in by_len:
            s = symbol_bytes[c]
            if data.startswith(s, i):
                codes.append(c)
                i += len(s)
                break
        else:
            codes += bytes([255, data[i]])
            i += 1
    return bytes(codes)


def pack_strings(strings):
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in strings])
    buf = np.frombuffer(b"".join(strings), dtype=np.uint8) if strings else np.zeros(0, dtype=np.uint8)
    return offsets, buf.copy()


def unpack_strings(offsets, buf):
    data = buf.tobytes()
    return [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


SYMBOLS = [b"the", b" ", b"e", b"ing", b"tion", b"abcdefgh", b"\x00\xff", b"q", b"12345678", b"xy"]


def test_worked_example():
    symbols, lengths, n = make_table([b"ab", b"c"])
    offs, out = fsst_decode(symbols, lengths, np.array([0, 1, 255, ord("z"), 0], dtype=np.uint8), [0, 5], n_symbols=n)
    assert offs.tolist() == [0, 6]
    assert out.tobytes() == b"abczab"


def test_roundtrip_text_with_escapes():
    symbols, lengths, n = make_table(SYMBOLS)
    texts = [
        b"the thing is the question",
        b"",
        b"abcdefghabcdefgh12345678",
        b"\xff\xfe unknown bytes \x01",
        b"e",
        b"tion" * 50,
        bytes(range(256)),
    ]
    comp = [greedy_encode(SYMBOLS, t) for t in texts]
    assert any(255 in c for c in comp)  # escapes are exercised
    in_offs, buf = pack_strings(comp)
    out_offs, out = fsst_decode(symbols, lengths, buf, in_offs, n_symbols=n)
    assert out_offs.dtype == np.int64 and out.dtype == np.uint8
    assert unpack_strings(out_offs, out) == texts
    np.testing.assert_array_equal(
        fsst_decoded_lengths(symbols, lengths, buf, in_offs, n_symbols=n), [len(t) for t in texts]
    )


def test_escape_of_255_and_only_escapes():
    symbols, lengths, n = make_table([b"a"])
    codes = bytes([255, 255, 255, 0, 0, 255, 7])
    offs, out = fsst_decode(symbols, lengths, np.frombuffer(codes, np.uint8), [0, len(codes)], n_symbols=n)
    assert out.tobytes() == bytes([255, 0]) + b"a" + bytes([7])


def test_empty_inputs():
    symbols, lengths, n = make_table(SYMBOLS)
    offs, out = fsst_decode(symbols, lengths, np.zeros(0, np.uint8), np.array([0]), n_symbols=n)
    assert offs.tolist() == [0] and out.size == 0
    offs, out = fsst_decode(symbols, lengths, np.zeros(0, np.uint8), np.zeros(4, np.int64), n_symbols=n)
    assert offs.tolist() == [0, 0, 0, 0] and out.size == 0


def test_int32_offsets_and_unused_prefix():
    symbols, lengths, n = make_table(SYMBOLS)
    comp = [greedy_encode(SYMBOLS, t) for t in (b"the", b"xyq")]
    in_offs, buf = pack_strings(comp)
    buf = np.concatenate([np.full(5, 254, np.uint8), buf])  # garbage never referenced
    in_offs = (in_offs + 5).astype(np.int32)
    offs, out = fsst_decode(symbols, lengths, buf, in_offs, n_symbols=n)
    assert unpack_strings(offs, out) == [b"the", b"xyq"]


def test_large_parallel_path():
    rng = np.random.default_rng(5)
    symbols, lengths, n = make_table(SYMBOLS)
    texts = []
    for _ in range(6000):
        k = rng.integers(0, 12)
        texts.append(b"".join(SYMBOLS[j] if j < len(SYMBOLS) else bytes([int(j)]) for j in rng.integers(0, 14, k)))
    comp = [greedy_encode(SYMBOLS, t) for t in texts]
    in_offs, buf = pack_strings(comp)
    offs, out = fsst_decode(symbols, lengths, buf, in_offs, n_symbols=n)
    assert unpack_strings(offs, out) == texts


def test_random_code_streams_match_reference():
    rng = np.random.default_rng(11)
    sym = [bytes(rng.integers(0, 256, rng.integers(1, 9)).astype(np.uint8)) for _ in range(255)]
    symbols, lengths, n = make_table(sym)
    strings = []
    for _ in range(300):
        codes = bytearray(rng.integers(0, 256, rng.integers(0, 40)).astype(np.uint8).tobytes())
        if codes and codes[-1] == 255:
            codes.append(int(rng.integers(0, 256)))
        # make sure an escape never swallows the final byte incorrectly
        i = 0
        while i < len(codes):
            if codes[i] == 255 and i + 1 >= len(codes):
                codes.append(1)
            i += 2 if codes[i] == 255 else 1
        strings.append(bytes(codes))
    in_offs, buf = pack_strings(strings)
    offs, out = fsst_decode(symbols, lengths, buf, in_offs)
    assert unpack_strings(offs, out) == [ref_decode(sym, s) for s in strings]


@settings(max_examples=60, deadline=None)
@given(
    sym=st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=20),
    texts=st.lists(st.binary(max_size=60), max_size=20),
)
def test_hypothesis_roundtrip(sym, texts):
    symbols, lengths, n = make_table(sym)
    comp = [greedy_encode(sym, t) for t in texts]
    in_offs, buf = pack_strings(comp)
    offs, out = fsst_decode(symbols, lengths, buf, in_offs, n_symbols=n)
    assert unpack_strings(offs, out) == texts
    assert unpack_strings(offs, out) == [ref_decode(sym, c) for c in comp]


# ---------------------------------------------------------------- corrupt input


def _corrupt(codes, n_symbols=2, offsets=None, comp_len=None):
    symbols, lengths, _ = make_table([b"ab", b"c"])
    buf = np.frombuffer(bytes(codes), dtype=np.uint8)
    if comp_len is not None:
        buf = buf[:comp_len]
    offs = np.array(offsets if offsets is not None else [0, len(codes)])
    return fsst_decode(symbols, lengths, buf, offs, n_symbols=n_symbols)


def test_corrupt_escape_at_end():
    with pytest.raises(CorruptInputError) as e:
        _corrupt([0, 1, 255])
    assert e.value.code == ERR_TRUNCATED


def test_corrupt_escape_at_end_of_inner_string():
    # the escape's "next byte" belongs to the next string: still corrupt
    with pytest.raises(CorruptInputError) as e:
        _corrupt([0, 255, 1], offsets=[0, 2, 3])
    assert e.value.code == ERR_TRUNCATED


def test_corrupt_code_beyond_symbol_table():
    with pytest.raises(CorruptInputError) as e:
        _corrupt([0, 2])
    assert e.value.code == ERR_BAD_CODE
    with pytest.raises(CorruptInputError):
        _corrupt([0, 254], n_symbols=254)
    _corrupt([0, 253], n_symbols=254)  # fine (symbol 253 is empty)


@pytest.mark.parametrize("offsets", [[0, 9], [2, 1], [-1, 2], [0, 2, 1]])
def test_corrupt_offsets(offsets):
    with pytest.raises(CorruptInputError) as e:
        _corrupt([0, 1, 0], offsets=offsets)
    assert e.value.code == ERR_OUT_OF_BOUNDS


def test_corrupt_symbol_table():
    symbols, lengths, _ = make_table([b"ab"])
    lengths[0] = 9
    with pytest.raises(CorruptInputError):
        fsst_decode(symbols, lengths, np.zeros(1, np.uint8), [0, 1], n_symbols=1)
    with pytest.raises(CorruptInputError):
        fsst_decode(symbols, lengths, np.zeros(1, np.uint8), [0, 1], n_symbols=256)
    with pytest.raises(CorruptInputError):
        fsst_decode(symbols[:3], lengths[:3], np.zeros(1, np.uint8), [0, 1], n_symbols=10)


def test_corrupt_input_is_a_value_error():
    assert issubclass(CorruptInputError, ValueError)
