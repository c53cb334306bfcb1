"""Offsets / UTF-8 validation (cuda_kernels.utf8, CPU) against Python's own UTF-8 decoder."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuda_kernels.utf8 as utf8_mod
from cuda_kernels import CorruptInputError, check_variable
from cuda_kernels.errors import ERR_BAD_UTF8, ERR_OUT_OF_BOUNDS

# bytes that make every kind of sequence (and every kind of mistake) likely
_ALPHABET = [0x41, 0x42, 0xC2, 0xC3, 0xA9, 0xE0, 0xE6, 0x97, 0xA5, 0xED, 0xA0, 0x9F, 0xF0, 0xF4, 0x90, 0x8F, 0x80, 0xBF, 0xC0, 0xC1, 0xF5, 0xFF]


def _encode(values):
    offsets = np.zeros(len(values) + 1, np.int64)
    offsets[1:] = np.cumsum([len(v) for v in values])
    return offsets, np.frombuffer(b"".join(values), np.uint8)


def _first_bad(values):
    for i, v in enumerate(values):
        try:
            v.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return None


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.lists(st.sampled_from(_ALPHABET), max_size=20).map(bytes), min_size=1, max_size=6))
def test_utf8_matches_python(values, chunk):
    saved = utf8_mod._CHUNK
    utf8_mod._CHUNK = chunk  # bytes per parallel chunk: tiny chunks exercise every chunk seam
    try:
        _check_against_python(values)
    finally:
        utf8_mod._CHUNK = saved


def _check_against_python(values):
    offsets, data = _encode(values)
    bad = _first_bad(values)
    if bad is None:
        check_variable(offsets, data, True)
        check_variable(offsets.astype(np.int32), data, True)
    else:
        with pytest.raises(CorruptInputError) as info:
            check_variable(offsets, data, True)
        assert info.value.code == ERR_BAD_UTF8
        assert 0 <= info.value.index < len(values)
    check_variable(offsets, data, False)  # binary: any bytes


@pytest.mark.parametrize(
    "text",
    ["", "plain ascii " * 20, "héllo wörld", "日本語テキスト" * 30, "😀 emoji \U0010FFFF", "\u07ff\u0800\uffff\U00010000"],
)
def test_valid_text(text):
    values = [text.encode(), b"", text[::-1].encode()]
    check_variable(*_encode(values), True)


@pytest.mark.parametrize(
    "bad",
    [b"\x80", b"\xc3", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"abcdefgh\xff", b"\xe6\x97"],
)
def test_invalid_sequences(bad):
    with pytest.raises(CorruptInputError, match="invalid utf-8"):
        check_variable(*_encode([b"x" * 40, bad, b"y"]), True)


def test_value_boundary_inside_a_character():
    e = "é".encode()
    with pytest.raises(CorruptInputError) as info:
        check_variable(*_encode([e[:1], e[1:]]), True)
    assert info.value.index == 0
    check_variable(*_encode([e[:1], e[1:]]), False)


@pytest.mark.parametrize("offsets", [[0, 3, 2, 4], [0, 2, 9], [-1, 2, 4], [5, 2, 4]])
def test_bad_offsets(offsets):
    with pytest.raises(CorruptInputError) as info:
        check_variable(np.array(offsets, np.int64), np.frombuffer(b"abcd", np.uint8), False)
    assert info.value.code == ERR_OUT_OF_BOUNDS


def test_empty():
    check_variable(np.zeros(1, np.int64), np.zeros(0, np.uint8), True)
    check_variable(np.zeros(0, np.int64), np.zeros(0, np.uint8), True)


def _run_automaton(value: bytes) -> int:
    state = 0
    for b in value:
        state = int(utf8_mod.BYTE_NEXT[state * 256 + b])
    return state


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_ALPHABET), max_size=12).map(bytes))
def test_automaton_matches_python(value):
    """The byte automaton the fused decoders run ends at 0 exactly on well-formed UTF-8."""
    assert (_run_automaton(value) == 0) == (_first_bad([value]) is None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=8).map(bytes), min_size=1, max_size=6),
       st.lists(st.integers(0, 5), max_size=10))
def test_symbol_automaton_is_the_byte_automaton_over_whole_symbols(symbols, codes):
    sym = np.array([int.from_bytes(s.ljust(8, b"\0"), "little") for s in symbols], np.uint64)
    lens = np.array([len(s) for s in symbols], np.uint8)
    table = utf8_mod.symbol_next(sym, lens, len(symbols))
    assert table[len(symbols)] == utf8_mod.UTF8_ERROR  # a code past the table
    state = 0
    out = b""
    for c in codes:
        c %= len(symbols)
        state = int(table[state * 256 + c])
        out += symbols[c]
    assert state == _run_automaton(out)


def test_fsst_decode_reports_utf8_from_its_loop():
    from cuda_kernels.fsst import fsst_decode

    symbols = [b"caf\xc3", b"\xa9 ", b"\xe6\x97"]
    sym = np.array([int.from_bytes(s.ljust(8, b"\0"), "little") for s in symbols], np.uint64)
    lens = np.array([len(s) for s in symbols], np.uint8)
    # "café " | "日" as symbol + escape | a cut character | an escaped 0xFF
    comp = bytes([0, 1, 2, 255, 0xA5, 2, 255, 0xFF])
    offs = np.array([0, 2, 5, 6, 8], np.int64)
    o, d, ok = fsst_decode(sym, lens, np.frombuffer(comp, np.uint8), offs, n_symbols=3, utf8=True)
    assert d.tobytes() == "café 日".encode() + b"\xe6\x97\xff" and ok is False
    o, d, ok = fsst_decode(sym, lens, np.frombuffer(comp, np.uint8), offs[:3], n_symbols=3, utf8=True)
    assert ok is True and o.tolist() == [0, 6, 9]
