# SPDX-License-Identifier: Apache-2.0
"""numpy twins against their compiled kernels (cuda_kernels._jitcache "Twins").

Every call a lance_gpu read makes to a twinned kernel, over pylance-written data of several
shapes, is recorded and replayed on the compiled kernel and on its twin: results and the
bytes written into output arguments must be the same.  The same calls with corrupted
input bytes must give the kernel's result, or ``NotImplemented`` (the kernel then runs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cuda_kernels import _jitcache, _twins
from cuda_kernels._jitcache import TwinnedKernel

lance = pytest.importorskip("lance")


def _table(n: int, rng: np.random.Generator) -> pa.Table:
    words = np.array([f"word-{i:03d}-{'z' * (i % 9)}" for i in range(300)])
    text = [
        "".join(rng.choice(list("abcdefgh éü€😀\u00ff\x7f{}"), size=int(rng.integers(0, 40)))) for _ in range(n)
    ]
    offsets = np.concatenate(([0], np.cumsum(rng.integers(0, 5, n)))).astype(np.int32)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "small": pa.array(rng.integers(-5, 5, n).astype(np.int32)),
            "cat": pa.array(rng.integers(0, 1000, n)),  # dictionary-encoded int64 (a fixed-width gather)
            "x": pa.array(rng.random(n)),
            "s": pa.array(words[rng.integers(0, 300, n)]),
            "text": pa.array(text, mask=rng.random(n) < 0.1),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
            "u8": pa.array(rng.integers(0, 200, n).astype(np.uint8)),
            "flag": pa.array(rng.random(n) < 0.3),
            "tags": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 100, int(offsets[-1])).astype(np.int16))),
            "user": pa.StructArray.from_arrays(
                [pa.array([f"user{i % 700}" for i in range(n)]), pa.array(rng.random(n).astype(np.float32))], names=["name", "score"]
            ),
        }
    )


Call = tuple[TwinnedKernel, tuple[Any, ...]]


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> list[Call]:
    """The twinned-kernel calls of full reads (compiled path) of pylance-written datasets."""
    import lance_gpu

    rng = np.random.default_rng(7)
    recorded: list[Call] = []
    original = TwinnedKernel.__call__

    def record(self: TwinnedKernel, *args: Any) -> Any:
        recorded.append((self, copy.deepcopy(args)))
        return self.dispatcher(*args)

    paths = []
    # the small one: pages of one short chunk, which ``native.gather_ranges`` leaves to its compiled loop
    for version, n in (("2.0", 5000), ("2.1", 20_000), ("2.2", 20_000), ("2.1", 600)):
        path = str(tmp_path_factory.mktemp("twins") / f"d{version}.lance")
        lance.write_dataset(_table(n, rng), path, data_storage_version=version, max_rows_per_file=n // 2)
        paths.append(path)
    TwinnedKernel.__call__ = record  # type: ignore[method-assign]
    try:
        for path in paths:
            got = lance_gpu.dataset(path, device="cpu").to_table()
            assert got.equals(lance.dataset(path).to_table())
    finally:
        TwinnedKernel.__call__ = original  # type: ignore[method-assign]
    return recorded


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and (isinstance(a, bool | np.bool_) == isinstance(b, bool | np.bool_))


def _outputs(kernel: TwinnedKernel, args: tuple[Any, ...], result: Any) -> list[Any]:
    """What a call produced: its result and every array argument after the call.  FSST
    writes each symbol with an 8-byte store, so its ``out`` is compared up to the end."""
    if kernel.__qualname__ == "_fsst_chunks_one_pass":
        args = (*args[:11], args[11][: result[2]], *args[12:])  # ``out``, up to the returned position
    return [result, *(a for a in args if isinstance(a, np.ndarray))]


def _run(kernel: TwinnedKernel, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    mine = copy.deepcopy(args)
    result = fn(*mine)
    if result is NotImplemented:
        return result, []
    return result, _outputs(kernel, mine, result)


def test_reads_use_every_twin(calls: list[Call]) -> None:
    names = {k.__qualname__ for k, _ in calls}
    for expected in ("chunk_layout", "chunk_headers", "_gather_ranges_into", "inline_bitpack_blocks",
                     "_fsst_chunks_one_pass", "_check_blocks_cpu", "_unpack_blocks_serial", "_utf8_valid_cpu",
                     "_check_variable_cpu", "_binary_lengths", "_binary_copy_range", "_unpack_range_swar",
                     "ool_chunk_plan", "ool_chunk_assemble", "_max_level", "_defs_le", "_gather_range",
                     "_unravel_count_range", "_unravel_fill_range", "variable_chunks", "_copy_ranges"):
        assert expected in names, names


def test_twins_equal_kernels_on_real_pages(calls: list[Call]) -> None:
    assert calls
    for kernel, args in calls:
        want_result, want = _run(kernel, kernel.dispatcher, args)
        got_result, got = _run(kernel, kernel.twin, args)
        assert got_result is not NotImplemented, f"{kernel!r} declined valid input"
        assert _same(want_result, got_result), (kernel, want_result, got_result)
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            assert _same(w, g), (kernel, i)


# Kernels that validate their input themselves, and which of their arguments come from a
# file (the others run on checked input only; the rest of their arguments are the caller's).
_SELF_CHECKING = {"chunk_layout": [0], "variable_chunks": [0], "ool_chunk_plan": [2], "chunk_headers": [0], "inline_bitpack_blocks": [0], "_fsst_chunks_one_pass": [0],
                  "_check_blocks_cpu": [2, 3], "_utf8_valid_cpu": [0], "_check_variable_cpu": [0, 1],
                  "_binary_lengths": [0, 2], "_gather_range": [1], "_unravel_count_range": [0, 2]}


def test_twins_on_corrupt_input_match_or_defer(calls: list[Call]) -> None:
    rng = np.random.default_rng(11)
    seen: dict[str, int] = {}
    deferred = compared = 0
    for kernel, args in calls:
        name = kernel.__qualname__
        if name not in _SELF_CHECKING or seen.get(name, 0) >= 6:
            continue
        seen[name] = seen.get(name, 0) + 1
        which = [i for i in _SELF_CHECKING[name] if args[i].size]
        if not which:
            continue
        for _ in range(8):
            bad = list(copy.deepcopy(args))
            i = which[int(rng.integers(len(which)))]
            arr = bad[i].view(np.uint8).reshape(-1)
            spots = rng.integers(0, arr.size, size=int(rng.integers(1, 4)))
            arr[spots] = rng.choice(np.array([0, 0x80, 0xC3, 0xED, 0xFF, 7], np.uint8), size=spots.size)
            bad_args = tuple(bad)
            got_result, got = _run(kernel, kernel.twin, bad_args)
            if got_result is NotImplemented:
                deferred += 1
                continue
            want_result, want = _run(kernel, kernel.dispatcher, bad_args)
            compared += 1
            assert _same(want_result, got_result), (kernel, want_result, got_result)
            for w, g in zip(want, got, strict=True):
                assert _same(w, g), kernel
    assert deferred and compared, (deferred, compared)


@pytest.mark.parametrize(
    "raw",
    [b"", b"plain ascii", "héllo wörld €😀".encode(), b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82",
     b"ok\xff", b"\xf0\x9f\x98\x80tail", b"a" * 50 + b"\x80"],
)
def test_utf8_twin_matches_kernel(raw: bytes) -> None:
    from cuda_kernels import utf8

    data = np.frombuffer(raw + b"pad", np.uint8)
    kernel = utf8._utf8_valid_cpu.dispatcher
    for lo, hi in ((0, len(raw)), (0, max(len(raw) - 1, 0)), (min(1, len(raw)), len(raw))):
        assert _twins.utf8_valid(data, lo, hi, 1) == kernel(data, lo, hi, 1), (raw, lo, hi)


def test_utf8_twin_on_random_bytes() -> None:
    from cuda_kernels import utf8

    rng = np.random.default_rng(5)
    alphabet = np.frombuffer("aé€😀".encode() + bytes([0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5]), np.uint8)
    kernel = utf8._utf8_valid_cpu.dispatcher
    for _ in range(300):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(0, 30)))]
        assert _twins.utf8_valid(data, 0, data.size, 1) == kernel(data, 0, data.size, 1), bytes(data)


def test_twins_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jitcache, "_twins_on", [])
    monkeypatch.setenv(_jitcache.TWINS_ENV, "0")
    assert not _jitcache.twins_enabled()
    monkeypatch.setattr(_jitcache, "_twins_on", [])
    monkeypatch.setenv(_jitcache.TWINS_ENV, "1")
    assert _jitcache.twins_enabled() == (_jitcache.cache_dir() is not None)


def _fsst_chunk_args(rng: np.random.Generator, cap: int) -> tuple[Any, ...]:
    """``native._fsst_chunks_one_pass`` arguments over random chunks whose symbols (and escaped
    bytes) are pieces of UTF-8 text cut anywhere, so that strings are UTF-8 or not."""
    from cuda_kernels.utf8 import symbol_next

    text = np.frombuffer("aé€😀b".encode() + bytes([0x80, 0xC3, 0xED, 0xA0, 0xF4, 0x90]), np.uint8)
    nsym = int(rng.integers(1, 40))
    sym_lens = rng.integers(1, 9, 255).astype(np.uint8)
    symbols = np.zeros(255, np.uint64)
    for c in range(nsym):
        at = int(rng.integers(0, text.size - 8))
        for k in range(int(sym_lens[c])):
            symbols[c] |= np.uint64(text[at + k]) << np.uint64(8 * k)
    weights = np.where(np.arange(text.size) < text.size - 6, 30.0, 1.0)  # invalid bytes rarer
    buffers, starts, sizes, counts = [], [], [], []
    at = 0
    for _ in range(int(rng.integers(1, 6))):
        strings = []
        for _ in range(int(rng.integers(0, 12))):
            codes: list[int] = []
            for _ in range(int(rng.integers(0, 6))):
                if rng.random() < 0.2:
                    codes += [255, int(rng.choice(text, p=weights / weights.sum()))]
                else:
                    codes.append(int(rng.integers(0, nsym)))
            strings.append(bytes(codes))
        offs = np.cumsum([0, *map(len, strings)]) + 4 * (len(strings) + 1)
        chunk = offs.astype("<u4").tobytes() + b"".join(strings)
        buffers.append(chunk)
        starts.append(at)
        sizes.append(len(chunk))
        counts.append(len(strings))
        at += len(chunk)
    counts_a = np.array(counts, np.int64)
    first = np.concatenate(([0], np.cumsum(counts_a)[:-1])).astype(np.int64)
    data = np.frombuffer(b"".join(buffers), np.uint8)
    out_offsets = np.zeros(int(counts_a.sum()) + 1, np.int64)
    return (data, np.array(starts, np.int64), np.array(sizes, np.int64), counts_a, first, 4, symbols, sym_lens,
            symbol_next(symbols, sym_lens, nsym), nsym, out_offsets, np.zeros(cap, np.uint8), 0, 0,
            np.full(1, -1, np.int64))


def test_fsst_twin_finds_the_first_non_utf8_string() -> None:
    from lance_gpu.cpu import native

    kernel = native._fsst_chunks_one_pass
    rng = np.random.default_rng(3)
    verdicts = set()
    for trial in range(300):
        args = _fsst_chunk_args(rng, 1 << 12 if trial % 3 else int(rng.integers(0, 400)))
        want_result, want = _run(kernel, kernel.dispatcher, args)
        got_result, got = _run(kernel, kernel.twin, args)
        assert got_result is not NotImplemented
        assert _same(want_result, got_result), (want_result, got_result)
        for w, g in zip(want, got, strict=True):
            assert _same(w, g), (trial, w, g)
        verdicts.add((int(want_result[0]), int(want[-1][0]) >= 0))
    assert {(0, True), (0, False), (1, False)} <= verdicts, verdicts


def test_first_bad_utf8_string_against_each_string_decoded() -> None:
    from lance_gpu.cpu import twins

    rng = np.random.default_rng(13)
    pieces = np.frombuffer("aé€😀".encode() + bytes([0x80, 0xC3, 0xED, 0xA0, 0xF4, 0x90, 0xE2, 0x82]), np.uint8)
    kinds = set()
    for _ in range(2000):
        buf = pieces[rng.integers(0, pieces.size, int(rng.integers(0, 24)))] if rng.random() < 0.3 else np.frombuffer(
            "".join(rng.choice(list("aé€😀"), size=int(rng.integers(0, 8)))).encode(), np.uint8)
        cuts = np.sort(rng.integers(0, buf.size + 1, int(rng.integers(0, 6))))
        lengths = np.diff(np.concatenate(([0], cuts, [buf.size]))).astype(np.int64)
        want = -1
        for i, (lo, n) in enumerate(zip((np.cumsum(lengths) - lengths).tolist(), lengths.tolist(), strict=True)):
            try:
                bytes(buf[lo : lo + n]).decode("utf-8")
            except UnicodeDecodeError:
                want = i
                break
        got = twins._first_bad_utf8(buf, lengths)
        assert got == want, (bytes(buf), lengths, got, want)
        kinds.add((want >= 0, want >= 0 and _decodes(buf)))
    assert kinds == {(False, False), (True, False), (True, True)}, kinds  # valid; bad stream; cut characters


def _decodes(buf: np.ndarray) -> bool:
    try:
        bytes(buf).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
