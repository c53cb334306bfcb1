# SPDX-License-Identifier: Apache-2.0
"""The fused FSST decoder over Variable mini-block chunk buffers (lance_gpu.cpu.native).

Both of its paths (one pass into a growing buffer with one numba thread, lengths pass +
scan + parallel write with more) must give the decoded strings exactly, and turn every
kind of bad input into a status code rather than a crash or a wrong result.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
import pytest

from lance_gpu.cpu import native

ESC = 255


def _table(symbols: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    sym = np.zeros(256, np.uint64)
    lens = np.zeros(256, np.uint8)
    for i, s in enumerate(symbols):
        sym[i] = int.from_bytes(s.ljust(8, b"\0"), "little")
        lens[i] = len(s)
    return sym, lens


def _encode(s: bytes, symbols: list[bytes]) -> bytes:
    """Greedy longest-match FSST encoding (enough for tests)."""
    out = bytearray()
    i = 0
    while i < len(s):
        best = -1
        for c, sym in enumerate(symbols):
            if s.startswith(sym, i) and (best < 0 or len(sym) > len(symbols[best])):
                best = c
        if best < 0:
            out += bytes([ESC, s[i]])
            i += 1
        else:
            out.append(best)
            i += len(symbols[best])
    return bytes(out)


def _chunks(compressed: list[bytes], per_chunk: int, offset_bytes: int = 4):
    """Lay strings out as Variable chunk buffers: offsets[count + 1] then bytes, padded to 8."""
    data = bytearray()
    starts, sizes, counts = [], [], []
    for lo in range(0, len(compressed), per_chunk):
        part = compressed[lo : lo + per_chunk]
        head = (len(part) + 1) * offset_bytes
        offs = [head]
        for c in part:
            offs.append(offs[-1] + len(c))
        buf = b"".join(o.to_bytes(offset_bytes, "little") for o in offs) + b"".join(part)
        buf += b"\x48" * (-len(buf) % 8)
        starts.append(len(data))
        sizes.append(len(buf))
        counts.append(len(part))
        data += buf
    arr = lambda x: np.array(x, np.int64)  # noqa: E731
    return np.frombuffer(bytes(data), np.uint8), arr(starts), arr(sizes), arr(counts)


def _decode(data, starts, sizes, counts, sym, lens, nsym, threads, offset_bytes=4):
    result = {}

    def run():  # numba's thread count is per thread: set it in a thread of our own
        numba.set_num_threads(threads)
        result["r"] = native.fsst_decode_chunks(data, starts, sizes, counts, offset_bytes, sym, lens, nsym)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return result["r"]


SYMBOLS = [b"alpha ", b"beta", b"ga", b"m", b"12345678", b"x"]
THREADS = [1, min(2, numba.config.NUMBA_NUM_THREADS)]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("offset_bytes", [4, 8])
def test_round_trip_many_chunks(threads: int, offset_bytes: int) -> None:
    rng = np.random.default_rng(3)
    words = [b"alpha ", b"beta", b"gamma", b"x", b"\xff\x00", b"12345678", b""]
    strings = [b"".join(words[j] for j in rng.integers(0, len(words), rng.integers(0, 6))) for _ in range(70_000)]
    sym, lens = _table(SYMBOLS)
    comp = [_encode(s, SYMBOLS) for s in strings]
    data, starts, sizes, counts = _chunks(comp, 1024, offset_bytes)
    status, chunk, offsets, out, utf8 = _decode(data, starts, sizes, counts, sym, lens, len(SYMBOLS), threads, offset_bytes)
    assert (status, chunk) == (0, -1)
    assert utf8 is False  # b"\xff\x00" among the words
    expect = np.cumsum([0] + [len(s) for s in strings])
    np.testing.assert_array_equal(offsets, expect)
    assert out.tobytes() == b"".join(strings)


def test_one_pass_grows_its_buffer_when_strings_expand_eightfold() -> None:
    # Every code is one byte and emits eight: far beyond the 4x first estimate.
    strings = [b"12345678" * 40] * 4000
    sym, lens = _table(SYMBOLS)
    comp = [_encode(s, SYMBOLS) for s in strings]
    data, starts, sizes, counts = _chunks(comp, 256)
    status, _chunk, offsets, out, _utf8 = _decode(data, starts, sizes, counts, sym, lens, len(SYMBOLS), 1)
    assert status == 0
    assert out.size == 4000 * 320 and int(offsets[-1]) == out.size
    assert out.tobytes() == b"".join(strings)


def test_empty_and_single() -> None:
    sym, lens = _table(SYMBOLS)
    for strings in ([b""], [b"m"], [b""] * 5):
        data, starts, sizes, counts = _chunks([_encode(s, SYMBOLS) for s in strings], 4)
        status, _c, offsets, out, _utf8 = _decode(data, starts, sizes, counts, sym, lens, len(SYMBOLS), 1)
        assert status == 0 and out.tobytes() == b"".join(strings)
        assert offsets.tolist() == np.cumsum([0] + [len(s) for s in strings]).tolist()


@pytest.mark.parametrize("threads", THREADS)
def test_bad_input_gives_status_codes(threads: int) -> None:
    sym, lens = _table(SYMBOLS)
    n = 70_000  # big enough for the parallel path
    good = [_encode(b"alpha beta", SYMBOLS)] * n

    # A string that ends in an escape byte (the next string's first code follows).
    bad = list(good)
    bad[n - 5] = bytes([0, ESC])
    data, starts, sizes, counts = _chunks(bad, 1024)
    status, chunk, _o, _d, _u = _decode(data, starts, sizes, counts, sym, lens, len(SYMBOLS), threads)
    assert status == -1 and chunk == (n - 5) // 1024

    # A code beyond the symbol table.
    bad = list(good)
    bad[7] = bytes([200])
    data, starts, sizes, counts = _chunks(bad, 1024)
    status, chunk, _o, _d, _u = _decode(data, starts, sizes, counts, sym, lens, len(SYMBOLS), threads)
    assert (status, chunk) == (-2, 0)

    # Offsets running backwards, and past the chunk buffer.
    data, starts, sizes, counts = _chunks(good, 1024)
    for pos, value in ((2 * 4, 3), (1024 * 4, 1 << 20)):
        broken = data.copy()
        broken[int(starts[3]) + pos : int(starts[3]) + pos + 4] = np.frombuffer(value.to_bytes(4, "little"), np.uint8)
        status, chunk, _o, _d, _u = _decode(broken, starts, sizes, counts, sym, lens, len(SYMBOLS), threads)
        assert (status, chunk) == (native.FSST_BAD_OFFSETS, 3)

    # A chunk whose offsets do not fit in it.
    status, chunk, _o, _d, _u = _decode(data, starts, sizes.copy() * 0 + 8, counts, sym, lens, len(SYMBOLS), threads)
    assert status == native.FSST_BAD_OFFSETS


# Symbols that cut characters: "é" is C3 A9, "日" E6 97 A5, so symbols and escapes end and
# start inside characters and the UTF-8 automaton must carry its state across them.
UTF8_SYMBOLS = [b"caf\xc3", b"\xa9 ", b"\xe6\x97", b"\xa5x", b"na\xc3\xafve ", b"ab"]


def _utf8_case(strings: list[bytes], threads: int, per_chunk: int = 64):
    sym, lens = _table(UTF8_SYMBOLS)
    comp = [_encode(s, UTF8_SYMBOLS) for s in strings]
    data, starts, sizes, counts = _chunks(comp, per_chunk)
    status, chunk, offsets, out, utf8 = _decode(data, starts, sizes, counts, sym, lens, len(UTF8_SYMBOLS), threads)
    assert (status, chunk) == (0, -1)
    assert out.tobytes() == b"".join(strings)
    return utf8


def _is_utf8(s: bytes) -> bool:
    try:
        s.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("threads", THREADS)
def test_utf8_verdict_of_the_decode_loop(threads: int) -> None:
    rng = np.random.default_rng(5)
    good = ["café ", "日x", "naïve ", "ab", "", "ü", "\U0001f600", "日本"]
    strings = ["".join(good[j] for j in rng.integers(0, len(good), rng.integers(0, 5))).encode() for _ in range(70_000)]
    assert _utf8_case(strings, threads) is True
    bad_cases = [
        b"caf\xc3",  # a character cut at the end of a string (the next string starts with A9)
        b"\xa9 ab",  # a string starting on a continuation byte
        b"\xe6\x97",  # a three-byte character missing its last byte
        b"\xc0\xaf",  # an overlong form
        b"\xed\xa0\x80",  # a surrogate
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"ab\xff",
    ]
    for bad in bad_cases:
        assert not _is_utf8(bad)
        for where in (0, 1000, len(strings) - 1):
            mutated = list(strings)
            mutated[where] = bad
            assert _utf8_case(mutated, threads) is False, (bad, where)
    # a character split over two strings: each string alone is not UTF-8
    split = list(strings)
    split[10], split[11] = b"ab\xe6\x97", b"\xa5x"
    assert _utf8_case(split, threads) is False


def test_copied_ranges_report_utf8_from_the_copy_loop() -> None:
    """native.ranges_to_variable (mini-block Variable, full-zip values) validates the bytes it
    copies, group by group; a cut character, a bad byte or a value starting inside a
    character anywhere (first group, a group boundary, the last value) is found."""
    rng = np.random.default_rng(9)
    good = ["café ", "日x", "naïve ", "ab", "", "\U0001f600", "long ascii text " * 40]
    values = ["".join(good[j] for j in rng.integers(0, len(good), rng.integers(0, 5))).encode() for _ in range(20_000)]

    def run(vals: list[bytes]) -> bool:
        gap = b"\x00\xff"  # bytes between the ranges, never copied
        src = gap.join(vals)
        starts = np.cumsum([0] + [len(v) + len(gap) for v in vals[:-1]]).astype(np.int64)
        offsets, out, utf8 = native.ranges_to_variable(np.frombuffer(src, np.uint8), starts, np.array([len(v) for v in vals], np.int64))
        assert out.tobytes() == b"".join(vals) and offsets[-1] == out.size
        return utf8

    assert run(values) is True
    total = np.cumsum([len(v) for v in values])
    at_group_edge = int(np.searchsorted(total, native.UTF8_GROUP_BYTES))
    for where in (0, at_group_edge, at_group_edge + 1, len(values) - 1):
        for bad in (b"\xff", b"ab\xe6\x97", b"\xa9x", b"\xed\xa0\x80"):
            mutated = list(values)
            mutated[where] = bad
            assert run(mutated) is False, (where, bad)
        split = list(values)
        split[where - 1 if where else 0], split[where if where else 1] = b"x\xe6\x97", b"\xa5"
        assert run(split) is False, where
