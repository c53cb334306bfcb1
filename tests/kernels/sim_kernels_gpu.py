"""GPU kernels against their CPU twins, on small inputs.

NOT collected by a plain ``pytest tests/`` run (the file name does not match
``test_*.py``): ``test_kernels_simulator.py`` runs it in a subprocess with
``NUMBA_ENABLE_CUDASIM=1`` (the CUDA simulator must be switched on before
``numba.cuda`` is first imported, so it cannot share a process with the
other tests).  On a machine with a real GPU it can also be run directly::

    python -m pytest tests/kernels/sim_kernels_gpu.py -q                          # real GPU
    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/kernels/sim_kernels_gpu.py -q   # simulator

The simulator is slow (numba runs every CUDA thread of a kernel with a barrier as a Python
thread; the others one thread after another, ``cuda_kernels._simulator``), so inputs are kept tiny.
"""

import numpy as np
import pyarrow as pa
import pytest

from numba import config as numba_config
from numba import cuda

import cuda_kernels as ck
from cuda_kernels import CorruptInputError, _device
from cuda_kernels.bitunpack import _fl_full_block, _unpack_scatter_kernel, packed_words_per_block

if not cuda.is_available():
    pytest.skip("needs a CUDA GPU or NUMBA_ENABLE_CUDASIM=1", allow_module_level=True)

SIMULATOR = bool(numba_config.ENABLE_CUDASIM)
h = _device.to_host


def _rand_values(rng, n, w, dt):
    if w == 0:
        return np.zeros(n, dtype=dt)
    raw = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    return (raw >> np.uint64(64 - w)).astype(dt)


# ------------------------------------------------------------------ bitunpack


@pytest.mark.parametrize("dt", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_unpack_gpu_matches_cpu(dt):
    rng = np.random.default_rng(0)
    t = np.dtype(dt).itemsize * 8
    widths = sorted({0, 1, 3, t // 2 + 1, t - 1, t})
    packed, offsets, pos = [], [], 0
    for w in widths:
        p = ck.pack_blocks(_rand_values(rng, 1024, w, dt), w)
        packed.append(p)
        offsets.append(pos)
        pos += p.size
    words = np.concatenate(packed)
    offsets = np.array(offsets, dtype=np.int64)
    widths = np.array(widths, dtype=np.uint8)
    cpu = ck.unpack_blocks(words, offsets, widths)
    gpu = ck.unpack_blocks_gpu(cuda.to_device(words), cuda.to_device(offsets), cuda.to_device(widths))
    np.testing.assert_array_equal(h(gpu), cpu)
    # into a caller-provided output
    out = cuda.device_array(cpu.shape[0], dtype=dt)
    ck.unpack_blocks_gpu(words, offsets, widths, out=out)
    np.testing.assert_array_equal(h(out), cpu)


@pytest.mark.parametrize("dt", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_unpack_scatter_gpu_every_width(dt):
    """Every width 0..T of T-bit words, once as a whole block (the leaf of its width) and once
    cut short (the generic row loop), scattered with gaps into one output: the GPU matches the
    CPU twin, and the gaps keep their sentinel (nothing written outside a block's values)."""
    rng = np.random.default_rng(7)
    t = np.dtype(dt).itemsize * 8
    widths = np.array(list(range(t + 1)) * 2, np.int64)
    counts = np.array([1024] * (t + 1) + list(rng.integers(0, 1024, t + 1)), np.int64)
    packed, offsets, pos = [], [], 5  # the first block off word 0
    for w in widths:
        p = ck.pack_blocks(_rand_values(rng, 1024, int(w), dt), int(w))
        packed.append(p)
        offsets.append(pos)
        pos += p.size
    words = np.concatenate([np.zeros(5, dt), *packed])
    order = rng.permutation(widths.size)  # blocks land in another order, 3 values apart
    dst = np.zeros(widths.size, np.int64)
    dst[order] = np.concatenate([[0], np.cumsum(counts[order] + 3)[:-1]])
    size = int((dst + counts).max()) + 3
    sentinel = np.full(size, np.iinfo(dt).max // 3, dt)
    cpu = ck.unpack_blocks_scatter(words, np.array(offsets), widths, dst, counts, sentinel.copy())
    gpu = cuda.to_device(sentinel)
    ck.unpack_blocks_scatter_gpu(cuda.to_device(words), np.array(offsets), widths, dst, counts, gpu)
    np.testing.assert_array_equal(h(gpu), cpu)
    whole = ck.unpack_blocks_gpu(words, np.array(offsets[: t + 1]), widths[: t + 1])
    np.testing.assert_array_equal(h(whole), ck.unpack_blocks(words, np.array(offsets[: t + 1]), widths[: t + 1]))


def test_unpack_scatter_gpu_launch_slices(monkeypatch):
    """Blocks past a launch's 2 ** 31 threads go to the next launch: with the limit lowered
    to 3 blocks of 16-bit words per launch, 8 blocks take 3 launches and match the CPU."""
    from cuda_kernels import bitunpack

    monkeypatch.setattr(bitunpack, "_MAX_LAUNCH_THREADS", 3 * bitunpack._threads_per_block(16) + 5)
    rng = np.random.default_rng(3)
    widths = rng.integers(0, 17, 8)
    packed = [ck.pack_blocks(_rand_values(rng, 1024, int(w), np.uint16), int(w)) for w in widths]
    offsets = np.concatenate([[0], np.cumsum([p.size for p in packed])[:-1]]).astype(np.int64)
    words = np.concatenate(packed)
    np.testing.assert_array_equal(h(ck.unpack_blocks_gpu(words, offsets, widths)), ck.unpack_blocks(words, offsets, widths))


def test_unpack_gpu_corrupt_block_sets_flag():
    words = np.zeros(packed_words_per_block(5, 32), dtype=np.uint32)
    with pytest.raises(CorruptInputError):
        ck.unpack_blocks_gpu(words, np.array([1]), np.array([5]))
    with pytest.raises(CorruptInputError):
        ck.unpack_blocks_gpu(words, np.array([0]), np.array([33]))


def test_unpack_gpu_empty_and_kernel_cache():
    out = ck.unpack_blocks_gpu(np.zeros(0, np.uint16), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert out.shape[0] == 0
    assert _unpack_scatter_kernel.get(T=16) is _unpack_scatter_kernel.get(T=16)
    assert _unpack_scatter_kernel.get(T=16) is not _unpack_scatter_kernel.get(T=32)
    assert _fl_full_block.build({"T": 16}) is _fl_full_block.build({"T": 16})


# ------------------------------------------------------------------ fsst


def _table(syms):
    symbols = np.zeros(256, dtype=np.uint64)
    lengths = np.zeros(256, dtype=np.uint8)
    for i, s in enumerate(syms):
        symbols[i] = int.from_bytes(s, "little")
        lengths[i] = len(s)
    return symbols, lengths


def test_fsst_gpu_matches_cpu():
    rng = np.random.default_rng(1)
    syms = [bytes(rng.integers(0, 256, rng.integers(1, 9)).astype(np.uint8)) for _ in range(20)]
    symbols, lengths = _table(syms)
    strings = []
    for _ in range(40):
        codes = []
        for _ in range(rng.integers(0, 12)):
            if rng.random() < 0.2:
                codes += [255, int(rng.integers(0, 256))]
            else:
                codes.append(int(rng.integers(0, 20)))
        strings.append(bytes(codes))
    offs = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    comp = np.frombuffer(b"".join(strings), dtype=np.uint8)
    cpu = ck.fsst_decode(symbols, lengths, comp, offs, n_symbols=20)
    gpu = ck.fsst_decode_gpu(symbols, lengths, cuda.to_device(comp), cuda.to_device(offs), n_symbols=20)
    np.testing.assert_array_equal(h(gpu[0]), cpu[0])
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])
    # int32 offsets and device symbol table
    gpu = ck.fsst_decode_gpu(
        cuda.to_device(symbols), cuda.to_device(lengths), comp, offs.astype(np.int32), n_symbols=20
    )
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])


@pytest.mark.parametrize(
    ("codes", "offsets"),
    [([0, 255], [0, 2]), ([0, 5], [0, 2]), ([0, 1], [0, 3]), ([0, 255, 1], [0, 2, 3])],
)
def test_fsst_gpu_corrupt(codes, offsets):
    symbols, lengths = _table([b"ab", b"c"])
    with pytest.raises(CorruptInputError):
        ck.fsst_decode_gpu(symbols, lengths, np.array(codes, np.uint8), np.array(offsets), n_symbols=2)


def test_fsst_gpu_empty():
    symbols, lengths = _table([b"ab"])
    offs, data = ck.fsst_decode_gpu(symbols, lengths, np.zeros(0, np.uint8), np.zeros(3, np.int64), n_symbols=1)
    assert h(offs).tolist() == [0, 0, 0] and data.shape[0] == 0


# ------------------------------------------------------------------ rle / gather / compact


def test_rle_gpu_matches_cpu():
    rng = np.random.default_rng(2)
    for vdt in (np.int32, np.float64, np.uint8, "datetime64[ms]"):
        values = rng.integers(0, 100, 30).astype(vdt)
        runs = rng.integers(0, 6, 30).astype(np.uint8)
        np.testing.assert_array_equal(h(ck.rle_expand_gpu(values, runs)), ck.rle_expand(values, runs))
    assert ck.rle_expand_gpu(np.zeros(0, np.int64), np.zeros(0, np.uint8)).shape[0] == 0


def test_gather_fixed_gpu_matches_cpu():
    rng = np.random.default_rng(3)
    items = rng.random(20)
    idx = rng.integers(0, 20, 50)
    np.testing.assert_array_equal(h(ck.gather_fixed_gpu(items, idx)), ck.gather_fixed(items, idx))
    rows = np.arange(60, dtype=np.uint8).reshape(20, 3)
    np.testing.assert_array_equal(h(ck.gather_fixed_gpu(rows, idx)), ck.gather_fixed(rows, idx))
    for bad in (20, -1):
        with pytest.raises(CorruptInputError):
            ck.gather_fixed_gpu(items, np.array([0, bad]))


def test_gather_binary_gpu_matches_cpu():
    items = [b"", b"a", b"hello", b"\x00\x01", b"xyz" * 5]
    offs = np.concatenate([[0], np.cumsum([len(x) for x in items])]).astype(np.int64)
    data = np.frombuffer(b"".join(items), np.uint8)
    idx = np.array([4, 0, 2, 2, 1, 3, 0])
    cpu = ck.gather_binary(offs, data, idx)
    gpu = ck.gather_binary_gpu(offs, data, idx)
    np.testing.assert_array_equal(h(gpu[0]), cpu[0])
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])
    with pytest.raises(CorruptInputError):
        ck.gather_binary_gpu(offs, data, np.array([5]))
    with pytest.raises(CorruptInputError):
        ck.gather_binary_gpu(np.array([0, 2, 99]), data, np.array([1]))


@pytest.mark.parametrize("warp_copy", [None, True, False])
def test_gather_binary_gpu_by_warps_and_threads(warp_copy):
    """Items copied a warp each (lanes on consecutive bytes) or a thread each give the same
    bytes: lengths around the warp's width, empty items, repeated and reversed picks; the
    default chooses by the average length (these average past the threshold)."""
    rng = np.random.default_rng(7)
    lengths = [0, 1, 31, 32, 33, 64, 65, 100, 0, 7]
    items = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in lengths]
    offs = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.frombuffer(b"".join(items), np.uint8)
    idx = np.array([9, 7, 5, 5, 3, 0, 6, 2, 4, 1, 8])
    assert sum(lengths[i] for i in idx) >= ck.gather.WARP_COPY_MIN_AVERAGE * idx.size
    cpu = ck.gather_binary(offs, data, idx)
    gpu = ck.gather_binary_gpu(offs, data, idx, warp_copy=warp_copy)
    np.testing.assert_array_equal(h(gpu[0]), cpu[0])
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])
    with pytest.raises(CorruptInputError):
        ck.gather_binary_gpu(offs, data, np.array([0, 10]), warp_copy=warp_copy)


def _bytes_at(rng, n, offset, fill=None):
    """A device byte array of ``n`` bytes starting ``offset`` bytes past an 8-byte boundary."""
    base = _device.to_device(np.zeros(n + 16, np.uint8))
    skip = (offset - ck.segments._address(base)) % 8
    a = base[skip : skip + n]
    a.copy_to_device(np.full(n, fill, np.uint8) if fill is not None else rng.integers(0, 256, n).astype(np.uint8))
    return a


@pytest.mark.parametrize("bytes_per_thread", [1, 3, 16, None])
@pytest.mark.parametrize("kind", ["short", "strings", "long", "mixed", "edges"])
def test_copy_ranges_gpu_matches_cpu_at_edges(kind, bytes_per_thread):
    """The warp-tiled copy (whole destination words stored wide, lanes on consecutive words,
    a lane per range where ranges are short) against the CPU driver and numpy: empty ranges,
    one byte, every start and end offset within a word, ranges across 16-byte boundaries and
    at both ends of both arrays, many ranges, in order (strings) and permuted, unaligned arrays;
    device lengths under a bound (``max_total``), and a bound short of their total refused."""
    rng = np.random.default_rng(len(kind) * 7 + (bytes_per_thread or 0))
    for trial in range(3):
        nsrc = int(rng.integers(200, 2500))
        src = _bytes_at(rng, nsrc, trial + 3)
        if kind == "edges":  # first and last bytes of src, lengths 0..17 at every offset
            ln = np.array([n for n in range(18) for _ in range(2)], np.int64)
            ss = np.array([0 if i % 2 else nsrc - n for i, n in enumerate(ln)], np.int64)
        else:
            hi = {"short": 3, "strings": 24, "long": 700, "mixed": 400}[kind]
            ln = rng.integers(0, hi, int(rng.integers(1, 120)))
            if kind == "mixed":
                ln[rng.random(ln.size) < 0.8] %= 9
            ln = np.minimum(ln, nsrc)
            ss = np.array([rng.integers(0, nsrc - n + 1) for n in ln], np.int64)
        order = np.arange(ln.size) if kind in ("strings", "edges") else rng.permutation(ln.size)
        dd = np.empty(ln.size, np.int64)
        dd[order] = np.concatenate([[0], np.cumsum(ln[order])[:-1]]) + trial
        ndst = int(ln.sum()) + 2 * trial + 1
        host_src = h(src)
        want = np.full(ndst, 0xEE, np.uint8)
        for s, n, d in zip(ss, ln, dd, strict=True):
            want[d : d + n] = host_src[s : s + n]
        np.testing.assert_array_equal(ck.copy_ranges(host_src, ss, ln, np.full(ndst, 0xEE, np.uint8), dd), want)
        dst = _bytes_at(rng, ndst, 5 * trial, fill=0xEE)
        ck.copy_ranges_gpu(src, ss, ln, dst, dd, bytes_per_thread=bytes_per_thread)
        np.testing.assert_array_equal(h(dst), want, err_msg=f"{kind} trial {trial}")
        # device lengths with a bound on their total (the read's plain string bytes)
        dst = _bytes_at(rng, ndst, 5 * trial, fill=0xEE)
        ck.copy_ranges_gpu(src, _device.to_device(ss), _device.to_device(ln), dst, _device.to_device(dd),
                           max_total=int(ln.sum()) + 40, bytes_per_thread=bytes_per_thread)
        np.testing.assert_array_equal(h(dst), want, err_msg=f"{kind} trial {trial} (max_total)")
        if int(ln.sum()):  # a bound short of the real total: corrupt input, not a silent short copy
            with pytest.raises(CorruptInputError):
                ck.copy_ranges_gpu(src, _device.to_device(ss), _device.to_device(ln), dst, _device.to_device(dd),
                                   max_total=int(ln.sum()) - 1, bytes_per_thread=bytes_per_thread)


@pytest.mark.parametrize("bytes_per_thread", [1, 3, None])
def test_fill_patterns_gpu_matches_cpu_at_edges(bytes_per_thread):
    """The warp-tiled fill (whole destination words of patterns dividing 8 stored wide, other
    patterns and the edges byte by byte) against the CPU driver: empty and one-byte segments,
    every offset within a word, patterns of 1..16 bytes, an unaligned destination."""
    rng = np.random.default_rng(21 + (bytes_per_thread or 0))
    pats = rng.integers(0, 256, 48).astype(np.uint8)
    for trial in range(4):
        k = int(rng.integers(1, 40))
        nb = rng.integers(0, (2, 24, 200, 700)[trial], k)
        pl = rng.choice([1, 2, 3, 4, 5, 8, 16], k)
        ps = np.array([rng.integers(0, pats.size - n + 1) for n in pl], np.int64)
        dd = np.concatenate([[0], np.cumsum(nb)[:-1]]) + trial
        ndst = int(nb.sum()) + 9
        want = ck.fill_patterns(np.full(ndst, 0xEE, np.uint8), dd, nb, pats, ps, pl)
        dst = _bytes_at(rng, ndst, 3 + trial, fill=0xEE)
        ck.fill_patterns_gpu(dst, dd, nb, pats, ps, pl, bytes_per_thread=bytes_per_thread)
        np.testing.assert_array_equal(h(dst), want, err_msg=f"trial {trial}")
    with pytest.raises(CorruptInputError):
        ck.fill_patterns_gpu(_device.to_device(np.zeros(8, np.uint8)), [4], [8], pats, [0], [2])


@pytest.mark.parametrize("warp_copy", [True, False])
def test_gather_binary_gpu_from_unaligned_bytes(warp_copy):
    """Items gathered from a byte buffer that starts off a word boundary, at every offset
    within a word and of lengths 0..40, a warp or a thread each, match the CPU gather."""
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 41, 60)
    offs = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = _bytes_at(rng, int(offs[-1]), 3)
    idx = rng.integers(0, lengths.size, 90)
    cpu = ck.gather_binary(offs, h(data), idx)
    gpu = ck.gather_binary_gpu(offs, data, idx, warp_copy=warp_copy)
    np.testing.assert_array_equal(h(gpu[0]), cpu[0])
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])


def test_compaction_gpu_matches_cpu():
    rng = np.random.default_rng(4)
    deleted = np.array([3, 0, 9, 3])
    np.testing.assert_array_equal(h(ck.keep_mask_from_deleted_gpu(12, deleted)), ck.keep_mask_from_deleted(12, deleted))
    with pytest.raises(CorruptInputError):
        ck.keep_mask_from_deleted_gpu(12, np.array([12]))
    vals = rng.random(12)
    mask = ck.keep_mask_from_deleted(12, deleted)
    np.testing.assert_array_equal(h(ck.compact_fixed_gpu(vals, mask)), ck.compact_fixed(vals, mask))
    items = [bytes([i]) * (i % 4) for i in range(12)]
    offs = np.concatenate([[0], np.cumsum([len(x) for x in items])]).astype(np.int64)
    data = np.frombuffer(b"".join(items), np.uint8)
    cpu = ck.compact_binary(offs, data, mask)
    gpu = ck.compact_binary_gpu(offs, data, mask)
    np.testing.assert_array_equal(h(gpu[0]), cpu[0])
    np.testing.assert_array_equal(h(gpu[1]), cpu[1])


# ------------------------------------------------------------------ levels


def _raveled(arr):
    """ravel_levels input for the first leaf of a (list / struct) pyarrow array."""
    arrays = [arr]
    while True:
        a = arrays[-1]
        if isinstance(a, pa.ListArray):
            arrays.append(a.values)
        elif isinstance(a, pa.StructArray):
            arrays.append(a.field(0))
        else:
            break
    layers = []
    for a in reversed(arrays):
        validity = np.asarray(a.is_valid()) if a.null_count else None
        offsets = np.asarray(a.offsets) if isinstance(a, pa.ListArray) else None
        layers.append((validity, offsets))
    return ck.ravel_levels(layers, len(arr))


@pytest.mark.parametrize(
    ("rows", "typ"),
    [
        ([[1, 2], None, [], [3]], pa.list_(pa.int32())),
        ([[[1], None, []], None, [], [[None, 2]], [[]]], pa.list_(pa.list_(pa.int64()))),
        (
            [[{"a": [1, None]}, None, {"a": []}], None, [], [{"a": None}]],
            pa.list_(pa.struct([("a", pa.list_(pa.int64()))])),
        ),
        ([{"x": 1}, {"x": None}, None], pa.struct([("x", pa.int64())])),
        ([1, None, 3], pa.int64()),
    ],
)
def test_unravel_gpu_matches_cpu(rows, typ):
    rav = _raveled(pa.array(rows, typ))
    cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
    gpu = ck.unravel_levels_gpu(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
    assert (gpu.num_values, gpu.num_rows) == (cpu.num_values, cpu.num_rows)
    for lc, lg in zip(cpu.layers, gpu.layers):
        assert lc.kind == lg.kind and lc.length == lg.length
        assert (lc.validity is None) == (lg.validity is None)
        if lc.validity is not None:
            if lg.words:  # bitmask words: exactly the entries' bits, the rest of the last word 0
                words = h(lg.validity)
                assert words.dtype == np.uint32 and words.size == -(-lg.length // 32)
                bits = np.unpackbits(words.view(np.uint8), bitorder="little")
                np.testing.assert_array_equal(bits[: lg.length].astype(bool), lc.validity)
                assert not bits[lg.length :].any()
            else:
                np.testing.assert_array_equal(h(lg.validity), lc.validity)
        assert (lc.offsets is None) == (lg.offsets is None)
        if lc.offsets is not None:
            np.testing.assert_array_equal(h(lg.offsets), lc.offsets)


def _ravel_layers(arr):
    """(validity, offsets as Arrow holds them, entries) per layer, inner-most first, for the
    first leaf of ``arr``; each list's child cut to the rows its offsets span (as the
    writer's shredder cuts them), so a slice's offsets need not start at 0."""
    arrays = [arr]
    while True:
        a = arrays[-1]
        if isinstance(a, pa.ListArray):
            o = np.asarray(a.offsets)
            arrays.append(a.values.slice(int(o[0]), int(o[-1] - o[0])))
        elif isinstance(a, pa.StructArray):
            arrays.append(a.field(0))
        else:
            break
    layers = []
    for a in reversed(arrays):
        validity = np.asarray(a.is_valid()) if a.null_count else None
        offsets = np.asarray(a.offsets).astype(np.int64) if isinstance(a, pa.ListArray) else None
        layers.append((validity, offsets, len(a)))
    return layers


@pytest.mark.parametrize(
    ("rows", "typ"),
    [
        ([[1, 2], None, [], [3]], pa.list_(pa.int32())),
        ([[[1], None, []], None, [], [[None, 2]], [[]]], pa.list_(pa.list_(pa.int64()))),
        (
            [[{"a": [1, None]}, None, {"a": []}], None, [], [{"a": None}]],
            pa.list_(pa.struct([("a", pa.list_(pa.int64()))])),
        ),
        ([{"x": 1}, {"x": None}, None], pa.struct([("x", pa.int64())])),
        ([[300] * 600, None, [], [1]], pa.list_(pa.int16())),
        ([None, [], None], pa.list_(pa.int32())),
    ],
)
def test_ravel_gpu_matches_cpu(rows, typ):
    """The encoder's levels on the device: the CPU ravel's rep, def, kinds and value index
    (offsets that do not start at 0 included: a slice of the rows)."""
    for arr in (pa.array(rows, typ), pa.array([*rows, *rows], typ).slice(len(rows))):
        layers = _ravel_layers(arr)
        cpu = ck.ravel_levels([(v, None if o is None else o - o[0]) for v, o, _n in layers], len(arr))
        dev = [(None if v is None else cuda.to_device(v), None if o is None else cuda.to_device(o), n) for v, o, n in layers]
        gpu = ck.ravel_levels_gpu(dev, len(arr))
        assert gpu.num_levels == cpu.num_levels
        np.testing.assert_array_equal(gpu.layer_kinds, cpu.layer_kinds)
        for got, want in ((gpu.rep, cpu.rep), (gpu.def_, cpu.def_)):
            assert (got is None) == (want is None)
            if want is not None:
                np.testing.assert_array_equal(h(got), want)
        np.testing.assert_array_equal(h(gpu.value_index), cpu.value_index)


def test_ravel_gpu_bad_offsets():
    """Offsets that span more items than the child has raise (each layer states its entry
    count, so this is caught even where no validity would show it)."""
    leaf = (None, None, 3)
    lists = (None, cuda.to_device(np.array([0, 1, 5], np.int64)), 2)
    with pytest.raises(ValueError, match="entries"):
        ck.ravel_levels_gpu([leaf, lists], 2)


def test_unravel_gpu_corrupt_levels():
    kinds = [ck.ALL_VALID_ITEM, ck.NULL_AND_EMPTY_LIST]
    with pytest.raises(CorruptInputError):
        ck.unravel_levels_gpu(np.array([1, 0], np.uint16), np.array([0, 3], np.uint16), kinds)
    with pytest.raises(CorruptInputError):
        ck.unravel_levels_gpu(np.array([0, 1], np.uint16), np.array([0, 0], np.uint16), kinds)


_SEGMENT_CASES = [
    ([[1, 2], None, [], [3]], pa.list_(pa.int32())),
    ([[[1], None, []], None, [], [[None, 2]], [[]]], pa.list_(pa.list_(pa.int64()))),
    ([[{"a": [1, None]}, None, {"a": []}], None, [], [{"a": None}]], pa.list_(pa.struct([("a", pa.list_(pa.int64()))]))),
    ([{"x": 1}, {"x": None}, None], pa.struct([("x", pa.int64())])),
    ([1, None, 3], pa.int64()),
    ([[None], [1, 2, 3], None], pa.list_(pa.int16())),
]


def _random_rows(rng, typ, n):
    """Random rows of a (nested) list / struct / int type, nulls and empty lists included."""

    def value(t, depth):
        if rng.random() < 0.2:
            return None
        if pa.types.is_list(t):
            return [value(t.value_type, depth + 1) for _ in range(int(rng.integers(0, 4)))]
        if pa.types.is_struct(t):
            return {t.field(0).name: value(t.field(0).type, depth + 1)}
        return int(rng.integers(0, 100))

    return [value(typ, 0) for _ in range(n)]


def _segments_and_levels(raveled):
    """One shared uint16 level buffer (with gaps) and a LevelSegment per raveled leaf."""
    parts, segs, pos = [], [], 0
    for rav in raveled:
        rep_pos = def_pos = -1
        for which in ("rep", "def_"):
            lv = getattr(rav, which)
            if lv is None:
                continue
            parts.append(np.full(3, 7, np.uint16))  # a gap: segments need not touch
            pos += 3
            if which == "rep":
                rep_pos = pos
            else:
                def_pos = pos
            parts.append(np.asarray(lv, np.uint16))
            pos += len(lv)
        segs.append(ck.LevelSegment(rep_pos, def_pos, rav.num_levels, tuple(int(k) for k in rav.layer_kinds)))
    levels = np.concatenate(parts) if parts else np.zeros(1, np.uint16)
    return levels, segs


def _run_validity(lc, lg, in_run: bool):
    """The CPU's layer ``lc`` with all-valid validity where ``lg`` is a run's segment's layer
    without nulls given the run's bits (a null elsewhere in the run's layer), else as is."""
    if in_run and lc.validity is None and lg.validity is not None:
        assert lg.null_count == 0 and lg.words
        return lc._replace(validity=np.ones(lc.length, np.bool_))
    return lc


def _assert_unraveled_equal(cpu, gpu, in_run=False):
    assert (gpu.num_values, gpu.num_rows) == (cpu.num_values, cpu.num_rows)
    for lc, lg in zip(cpu.layers, gpu.layers, strict=True):
        assert lc.kind == lg.kind and lc.length == lg.length
        lc = _run_validity(lc, lg, in_run)
        assert (lc.validity is None) == (lg.validity is None)
        if lc.validity is not None:
            if lg.words:  # bitmask words: exactly the entries' bits (from the bit offset of a run's segment)
                words = h(lg.validity)
                assert words.dtype == np.uint32 and words.size == -(-(lg.bit_offset + lg.length) // 32)
                bits = np.unpackbits(words.view(np.uint8), bitorder="little")
                np.testing.assert_array_equal(bits[lg.bit_offset : lg.bit_offset + lg.length].astype(bool), lc.validity)
                if not in_run:  # (a run's later segments' bits follow)
                    assert not bits[lg.length :].any()
            else:
                np.testing.assert_array_equal(h(lg.validity), lc.validity)
        assert (lc.offsets is None) == (lg.offsets is None)
        if lc.offsets is not None:
            np.testing.assert_array_equal(h(lg.offsets), lc.offsets)


@pytest.mark.parametrize("seed", range(4))
def test_unravel_segments_gpu_matches_cpu_per_segment(seed):
    """Many leaves of different layer stacks, levels in one buffer: one segmented unravel
    equals unravel_levels of each leaf (fixed cases plus random rows and lengths)."""
    rng = np.random.default_rng(seed)
    cases = list(_SEGMENT_CASES)
    for typ in (pa.list_(pa.int32()), pa.struct([("x", pa.list_(pa.int8()))]), pa.list_(pa.list_(pa.int32())), pa.int32()):
        cases.append((_random_rows(rng, typ, int(rng.integers(0, 12))), typ))
    rng.shuffle(cases)
    raveled = [_raveled(pa.array(rows, typ)) for rows, typ in cases]
    levels, segs = _segments_and_levels(raveled)
    gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs)
    assert len(gpu) == len(segs)
    for rav, g in zip(raveled, gpu, strict=True):
        cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
        _assert_unraveled_equal(cpu, g)
        for lc, lg in zip(cpu.layers, g.layers, strict=True):  # null entries counted on the device
            assert lg.null_count == (0 if lc.validity is None else int((~np.asarray(lc.validity)).sum()))


@pytest.fixture
def garbage_allocations(monkeypatch):
    """Device allocations of the level unravel hold garbage (0xA5 bytes), not the zeros the
    simulator's allocations happen to hold: a word no thread writes shows."""
    real = _device.device_empty

    def filled(n, dtype):
        out = real(n, dtype)
        if out.size:
            out.copy_to_device(np.full(out.nbytes, 0xA5, np.uint8).view(out.dtype).reshape(out.shape))
        return out

    monkeypatch.setattr(ck.levels._device, "device_empty", filled)


@pytest.mark.parametrize("with_lists", [False, True], ids=["flat-only", "beside-lists"])
def test_unravel_segments_gpu_runs_share_one_mask(with_lists, garbage_allocations):
    """Segments of one run (a column's flat leaves of consecutive fragments, interleaved
    with other segments) write each layer's bits one after the other into one slot from a
    64-byte boundary: every segment's validity (at its bit offset) and null count equal the
    CPU unravel's, the run's slot is the concatenation of their bits with zeros after it, and
    segments outside runs still start at bit 0 of a word of their own."""
    from cuda_kernels import _device

    rng = np.random.default_rng(11)
    struct_t = pa.struct([("x", pa.int64())])
    cases, runs = [], []
    for k, n in enumerate((37, 0, 5, 64, 70, 1)):  # fragments' lengths around the word size
        cases.append(([None if rng.random() < 0.3 else int(v) for v in rng.integers(0, 9, n)], pa.int32()))
        runs.append(0)
        rows = [None if rng.random() < 0.2 else {"x": None if rng.random() < 0.3 else 1} for _ in range(n + k)]
        cases.append((rows, struct_t))
        runs.append(1)
        cases.append(([None if rng.random() < 0.5 else 1 for _ in range(n + 3)], pa.int8()))  # no run
        runs.append(-1)
    if with_lists:
        cases += list(_SEGMENT_CASES)
        runs += [-1] * len(_SEGMENT_CASES)
    raveled = [_raveled(pa.array(r, t)) for r, t in cases]
    levels, segs = _segments_and_levels(raveled)
    segs = [sg._replace(run=r) for sg, r in zip(segs, runs, strict=True)]
    gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs)
    wanted: dict[tuple[int, int], list] = {}
    for rav, g, run in zip(raveled, gpu, runs, strict=True):
        cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
        for m, (lc, lg) in enumerate(zip(cpu.layers, g.layers, strict=True)):
            lc = _run_validity(lc, lg, run >= 0)
            assert lg.length == lc.length and (lc.validity is None) == (lg.validity is None)
            assert lg.null_count == (0 if lc.validity is None else int((~np.asarray(lc.validity)).sum()))
            if run < 0 or lg.validity is None:
                assert lg.bit_offset == 0
            bit = None
            if lg.validity is not None:
                bits = np.unpackbits(h(lg.validity).view(np.uint8), bitorder="little")
                np.testing.assert_array_equal(bits[lg.bit_offset : lg.bit_offset + lg.length].astype(bool), lc.validity)
                bit = 8 * _device.allocation_of(lg.validity)[2] + lg.bit_offset
            if run >= 0:
                wanted.setdefault((run, m), []).append((bit, lg.length))
    assert {r for r, _m in wanted} == {0, 1}
    for (run, m), parts in wanted.items():
        firsts = [bit - sum(n for _b, n in parts[:k]) for k, (bit, _n) in enumerate(parts) if bit is not None]
        assert firsts and len(set(firsts)) == 1, (run, m)  # every segment's bits right after the ones before
        assert firsts[0] % 512 == 0, (run, m)  # the run's slot: from a 64-byte boundary


def test_unravel_segments_gpu_runs_into_callers_words():
    """``words_into``: two calls (two read units) write the runs of a column's flat leaves
    (an int, a struct's two layers; fragments with and without nulls, lengths around the
    word size) into one zeroed array of the caller's, each run's layers from the bits given
    (the second call's from a bit inside a word the first call's bits share): every
    segment's validity (given with nulls or not) and null count equal the CPU unravel's,
    the caller's words are the concatenation of all the segments' bits with zeros after
    them, and a segment outside the runs keeps a slot of its own."""
    rng = np.random.default_rng(7)
    struct_t = pa.struct([("x", pa.int64())])
    words = cuda.to_device(np.zeros(64, np.uint32))
    slots = {0: (0,), 1: (512, 1024)}  # run 0: an int (one layer), run 1: a struct (two)
    written = {0: 0, 1: 0}  # levels of each run written so far (by earlier calls)
    expect: dict[tuple[int, int], list[np.ndarray]] = {}
    for lengths in ((37, 0, 5), (70, 1, 33)):
        cases, runs = [], []
        for k, n in enumerate(lengths):
            p = 0.0 if k == 1 else 0.3  # the middle fragment without nulls (no definition levels)
            cases.append(([None if rng.random() < p else int(v) for v in rng.integers(0, 9, n)], pa.int32()))
            runs.append(0)
            cases.append(([None if rng.random() < p else {"x": None if rng.random() < p else 1} for _ in range(n + 2)], struct_t))
            runs.append(1)
            cases.append(([None if rng.random() < 0.5 else 1 for _ in range(n + 3)], pa.int8()))  # no run
            runs.append(-1)
        raveled = [_raveled(pa.array(r, t)) for r, t in cases]
        levels, segs = _segments_and_levels(raveled)
        segs = [sg._replace(run=r) for sg, r in zip(segs, runs, strict=True)]
        into = {r: tuple(b + written[r] for b in bits) for r, bits in slots.items()}
        gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs, words_into=(words, into))
        for rav, g, run in zip(raveled, gpu, runs, strict=True):
            cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
            for m, (lc, lg) in enumerate(zip(cpu.layers, g.layers, strict=True)):
                valid = np.ones(lc.length, np.bool_) if lc.validity is None else np.asarray(lc.validity)
                assert lg.null_count == int((~valid).sum())
                if run < 0:
                    assert lg.bit_offset == 0 and (lg.validity is None) == (lc.validity is None)
                    continue
                assert (lg.validity is not None) == bool(lc.length)
                if lc.length:
                    bit = 8 * _device.allocation_of(lg.validity)[2] + lg.bit_offset
                    assert _device.allocation_of(lg.validity)[0] == _device.allocation_of(words)[0]
                    assert bit == slots[run][m] + sum(x.size for x in expect.get((run, m), []))
                    got = np.unpackbits(h(lg.validity).view(np.uint8), bitorder="little")[lg.bit_offset : lg.bit_offset + lc.length]
                    np.testing.assert_array_equal(got.astype(bool), valid)
                expect.setdefault((run, m), []).append(valid)
        for r in written:
            written[r] += sum(rav.num_levels for rav, run in zip(raveled, runs, strict=True) if run == r)
    all_bits = np.unpackbits(h(words).view(np.uint8), bitorder="little").astype(bool)
    for (run, m), parts in expect.items():
        want = np.concatenate(parts)
        first = slots[run][m]
        np.testing.assert_array_equal(all_bits[first : first + want.size], want)
        assert not all_bits[first + want.size : first + 512].any(), (run, m)


@pytest.mark.parametrize("seed", range(3))
def test_unravel_segments_gpu_cudf_list_offsets_of_runs(seed):
    """``cudf=True``: the list layers of a run's segments (a column's leaves of consecutive
    fragments, interleaved with other segments; their null / empty kinds differing by
    fragment, empty fragments among them) are also written as one column's int32 offsets
    from 0: each segment's view at its row is its own offsets plus the entries before it,
    the view's last entry the run's inner total; every layer's validity bits are the run's,
    one slot per layer from a 64-byte boundary, a segment's at its row; every per-segment
    result is the CPU's."""
    from cuda_kernels import _device

    rng = np.random.default_rng(seed)
    types = [pa.list_(pa.int32()), pa.list_(pa.list_(pa.int16())), pa.struct([("x", pa.list_(pa.int8()))])]
    cases, runs = [], []
    for k in range(5):
        for r, typ in enumerate(types):
            n = 0 if (k == 2 and r == 0) else int(rng.integers(1, 12))
            rows = _random_rows(rng, typ, n)
            if k == 1 and r == 0:
                rows = [[1, 2] for _ in range(n)]  # no null / empty list: other layer kinds
            cases.append((rows, typ))
            runs.append(r)
        cases.append((_random_rows(rng, pa.list_(pa.int32()), 4), pa.list_(pa.int32())))  # no run
        runs.append(-1)
    raveled = [_raveled(pa.array(r, t)) for r, t in cases]
    levels, segs = _segments_and_levels(raveled)
    segs = [sg._replace(run=r) for sg, r in zip(segs, runs, strict=True)]
    gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs, cudf=True)
    seen: dict[tuple[int, int], list] = {}
    slots: dict[tuple[int, int], set] = {}
    for rav, g, run in zip(raveled, gpu, runs, strict=True):
        cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
        _assert_unraveled_equal(cpu, g, in_run=run >= 0)
        for m, lg in enumerate(g.layers):
            if run >= 0 and lg.validity is not None and rav.rep is not None:  # bits at the entries' run places
                slots.setdefault((run, m), set()).add(8 * _device.allocation_of(lg.validity)[2] + lg.bit_offset - lg.cudf_row)
            if run < 0 or lg.offsets is None or rav.rep is None:
                assert lg.cudf_offsets is None
                continue
            assert lg.cudf_offsets is not None
            seen.setdefault((run, m), []).append((h(lg.offsets), lg.cudf_row, h(lg.cudf_offsets)))
    assert {r for r, _m in seen} == {0, 1, 2}
    for (run, m), parts in seen.items():
        whole = parts[0][2]
        assert whole.dtype == np.int32 and whole[0] == 0
        row = shift = 0
        for own, at, view in parts:
            np.testing.assert_array_equal(view, whole)
            assert at == row, (run, m)
            np.testing.assert_array_equal(whole[row : row + own.size], own + shift, err_msg=f"{run}/{m}")
            row += own.size - 1
            shift += int(own[-1])
        assert whole.size == row + 1 and whole[-1] == shift, (run, m)
    assert slots
    for key, firsts in slots.items():  # one slot per run and layer, from a 64-byte boundary
        assert len(firsts) == 1 and next(iter(firsts)) % 512 == 0, key


def _entry_validity(rav, m):
    """Every entry's valid bit at layer ``m`` of a raveled leaf, as the levels say it (an
    entry under a null struct is not valid at a list layer that cannot be null either:
    ``_is_valid``), whatever the layer's kind."""
    tab = ck.levels.def_table(rav.layer_kinds)
    n = rav.num_levels
    r = np.full(n, tab.max_rep, np.int64) if rav.rep is None else np.asarray(rav.rep, np.int64)
    d = np.zeros(n, np.int64) if rav.def_ is None else np.asarray(rav.def_, np.int64)
    entry = (r >= tab.c[m]) & (tab.ltr[d] <= tab.c[m])
    valid = (d <= tab.below[m]) | ((tab.empty_level[m] > 0) & (d == tab.empty_level[m]))
    return valid[entry]


def _layer_column(cpu_layers, valid_parts, m):
    """The concatenation of layer ``m`` of several segments' CPU unravels as one column's:
    its int64 offsets from 0 (list layers; None for item layers) and its entries' valid
    bits (``valid_parts``: each segment's, :func:`_entry_validity`)."""
    offs, valid, shift = [np.zeros(1, np.int64)], [], 0
    for layers, bits in zip(cpu_layers, valid_parts, strict=True):
        lc = layers[m]
        valid.append(bits[m])
        if lc.offsets is not None:
            offs.append(np.asarray(lc.offsets, np.int64)[1:] + shift)
            shift += int(np.asarray(lc.offsets)[-1])
    return (np.concatenate(offs) if len(offs) > 1 or cpu_layers[0][m].offsets is not None else None), np.concatenate(valid)


@pytest.mark.parametrize("seed", range(3))
def test_unravel_segments_gpu_lists_into_callers_arrays(seed):
    """``lists_into``: three calls (three read units) write the runs of columns' leaves with
    repetition levels (list<int32>, list<list<int16>> with its inner list layer left to the
    call's own slots, struct<x: list<int8>>; null / empty lists and items, empty fragments,
    fragments without nulls) into one int32 and one zeroed uint32 array of the caller's,
    each layer from its row there (the entries of the earlier calls), offsets shifted by the
    inner layer's earlier entries: the caller's offsets are the column's offsets from 0 over
    every call, its bits the column's validity with zeros after them; every segment's
    ``cudf_offsets`` is the caller's slot and ``cudf_row`` its row there, its validity a view
    of the caller's words at its row (nulls or not), its per-segment results the CPU's.  A
    run past its slot's room raises and writes nothing past it."""
    rng = np.random.default_rng(seed)
    types = [pa.list_(pa.int32()), pa.list_(pa.list_(pa.int16())), pa.struct([("x", pa.list_(pa.int8()))])]
    nlay = [2, 3, 3]
    cap = 160  # entries a slot holds
    # (first entry, first bit) of each run's layer in the caller's arrays; (-1, -1): not placed
    place = {(r, m): (-1, -1) if (r, m) == (1, 1) else (200 * (3 * r + m), 512 * (3 * r + m)) for r in range(3) for m in range(nlay[r])}
    place[(2, 1)] = (-1, 512 * 7)  # struct<x: list<int8>>'s list layer: its bits placed, its offsets the call's own
    offsets = cuda.to_device(np.full(200 * 9, -7, np.int32))
    words = cuda.to_device(np.zeros(16 * 9, np.uint32))
    before = {key: 0 for key in place}  # entries of each run's layer written by earlier calls
    cpu_of: dict[int, list] = {0: [], 1: [], 2: []}
    valid_of: dict[int, list] = {0: [], 1: [], 2: []}
    for call in range(3):
        cases, runs = [], []
        for k in range(3):
            for r, typ in enumerate(types):
                n = 0 if (call, k, r) == (1, 0, 0) else int(rng.integers(1, 9))
                rows = [[1, 2] for _ in range(n)] if (k, r) == (1, 0) else _random_rows(rng, typ, n)
                cases.append((rows, typ))
                runs.append(r)
        cases.append((_random_rows(rng, pa.list_(pa.int32()), 4), pa.list_(pa.int32())))  # no run
        runs.append(-1)
        raveled = [_raveled(pa.array(rows, t)) for rows, t in cases]
        levels, segs = _segments_and_levels(raveled)
        segs = [sg._replace(run=r) for sg, r in zip(segs, runs, strict=True)]
        spec = {r: tuple((*place[(r, m)], cap, before[(r, m)], before.get((r, m - 1), 0) if m else 0) for m in range(nlay[r]))
                for r in range(3)}
        gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs, cudf=True, lists_into=(offsets, words, spec))
        rows_now = dict(before)
        for rav, g, run in zip(raveled, gpu, runs, strict=True):
            cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
            assert (g.num_values, g.num_rows) == (cpu.num_values, cpu.num_rows)
            if run < 0:
                _assert_unraveled_equal(cpu, g)
                continue
            cpu_of[run].append(cpu.layers)
            valid_of[run].append([_entry_validity(rav, m) for m in range(len(cpu.layers))])
            for m, (lc, lg) in enumerate(zip(cpu.layers, g.layers, strict=True)):
                assert lg.length == lc.length and lg.kind == lc.kind
                valid = valid_of[run][-1][m]
                if lc.validity is not None:
                    np.testing.assert_array_equal(valid, lc.validity)
                entry, bit = place[(run, m)]
                if lc.offsets is not None:
                    np.testing.assert_array_equal(h(lg.offsets), lc.offsets)
                    if entry >= 0:
                        assert lg.cudf_offsets is not None and lg.cudf_offsets.shape[0] == cap + 1
                        assert _device.allocation_of(lg.cudf_offsets)[0] == _device.allocation_of(offsets)[0]
                        assert _device.allocation_of(lg.cudf_offsets)[2] == 4 * entry
                        assert lg.cudf_row == rows_now[(run, m)]
                    else:  # the call's own run offsets from 0, at the segment's row in the call's run
                        own = h(lg.cudf_offsets)
                        assert _device.allocation_of(lg.cudf_offsets)[0] != _device.allocation_of(offsets)[0]
                        np.testing.assert_array_equal(own[lg.cudf_row : lg.cudf_row + lc.length + 1],
                                                      np.asarray(lc.offsets) + own[lg.cudf_row])
                if bit >= 0:
                    nullable = lc.kind in (3, 4, 6)
                    assert (lg.validity is not None) == bool(lc.length and (nullable or valid.all()))
                    if lg.validity is not None:
                        assert _device.allocation_of(lg.validity)[0] == _device.allocation_of(words)[0]
                        assert 8 * _device.allocation_of(lg.validity)[2] + lg.bit_offset == bit + rows_now[(run, m)]
                        got = np.unpackbits(h(lg.validity).view(np.uint8), bitorder="little")[lg.bit_offset : lg.bit_offset + lc.length]
                        np.testing.assert_array_equal(got.astype(bool), valid)
                        assert lg.null_count == (int((~valid).sum()) if nullable else 0)
                else:  # the call's own slot, as without lists_into
                    assert (lg.validity is None) == (lc.validity is None) or lg.null_count == 0
                rows_now[(run, m)] += lc.length
        before = rows_now
    host_offsets, host_bits = h(offsets), np.unpackbits(h(words).view(np.uint8), bitorder="little").astype(bool)
    for (run, m), (entry, bit) in place.items():
        want_offsets, want_valid = _layer_column(cpu_of[run], valid_of[run], m)
        total = want_valid.size
        assert total == before[(run, m)]
        if entry >= 0 and want_offsets is not None:
            np.testing.assert_array_equal(host_offsets[entry : entry + total + 1], want_offsets, err_msg=f"{run}/{m}")
            assert (host_offsets[entry + total + 1 : entry + 200] == -7).all()
        if bit >= 0:
            np.testing.assert_array_equal(host_bits[bit : bit + total], want_valid, err_msg=f"{run}/{m}")
            assert not host_bits[bit + total : bit + 512].any()
        if entry < 0:
            assert (host_offsets[200 * (3 * run + m) : 200 * (3 * run + m + 1)] == -7).all()
        if bit < 0:
            assert not host_bits[512 * (3 * run + m) : 512 * (3 * run + m + 1)].any()
    # a run past its room: an error, nothing written past the room
    rows = [[1, 2, None, 3]] * 6
    rav = _raveled(pa.array(rows, pa.list_(pa.int32())))
    levels, segs = _segments_and_levels([rav])
    small = cuda.to_device(np.full(16, -7, np.int32))
    bits = cuda.to_device(np.zeros(16, np.uint32))
    with pytest.raises(CorruptInputError):
        ck.unravel_segments_gpu(cuda.to_device(levels), [segs[0]._replace(run=0)], cudf=True,
                                lists_into=(small, bits, {0: ((-1, 0, 10, 0, 0), (0, 32, 4, 0, 10))}))
    got = h(small)
    np.testing.assert_array_equal(got[:5], [10, 14, 18, 22, 26])
    assert (got[5:] == -7).all()
    item_bits = np.unpackbits(h(bits).view(np.uint8), bitorder="little").astype(bool)
    assert item_bits[:10].tolist() == [True, True, False, True] * 2 + [True, True] and not item_bits[10:32].any()


@pytest.mark.parametrize("with_lists", [False, True], ids=["flat-only", "beside-lists"])
def test_unravel_segments_gpu_flat_leaves_by_words(with_lists, garbage_allocations):
    """Leaves without repetition levels (flat nullable columns, structs of them) are
    unravelled a validity word a thread, into words nothing zeroed: lengths around the word
    size (0, 1, 31, 32, 33, 100), null densities 0 / some / all, with and without list
    leaves in the same call; validity and null counts equal the CPU unravel's, and so do
    the values read back with them (``read_also``).  With flat leaves only there is one
    launch, the scatter: no flags launch, no scan, no zeroing or gather launch."""
    rng = np.random.default_rng(7)
    cases = []
    for n in (0, 1, 31, 32, 33, 100):
        for p in (0.0, 0.3, 1.0):
            valid = rng.random(n) >= p
            cases.append(([int(x) if ok else None for x, ok in zip(rng.integers(0, 9, n), valid, strict=True)], pa.int32()))
    rows = [None if rng.random() < 0.2 else {"x": None if rng.random() < 0.3 else 1} for _ in range(70)]
    cases.append((rows, pa.struct([("x", pa.int64())])))
    if with_lists:
        cases += list(_SEGMENT_CASES)
    raveled = [_raveled(pa.array(r, t)) for r, t in cases]
    levels, segs = _segments_and_levels(raveled)
    d_levels = cuda.to_device(levels)
    launches = []
    kernels = {"flags": ck.levels._unravel_segments_flags_kernel, "scatter": ck.levels._unravel_segments_scatter_kernel,
               "gather": ck.levels._gather_into_kernel, "fill": _device._fill_kernel}
    values = cuda.to_device(np.arange(100, 140, dtype=np.int64))
    positions = np.array([3, 39, 40, -1, 0], np.int64)
    try:
        for name, kernel in kernels.items():
            kernel.get = lambda _real=kernel.get, _name=name, **k: launches.append(_name) or _real(**k)
        gpu, also = ck.unravel_segments_gpu(d_levels, segs, read_also=(values, positions))
    finally:
        for kernel in kernels.values():
            del kernel.get
    assert launches == (["flags", "scatter"] if with_lists else ["scatter"]), launches
    assert also.tolist() == [103, 139, -1, -1, 100]
    for rav, g in zip(raveled, gpu, strict=True):
        cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
        _assert_unraveled_equal(cpu, g)
        for lc, lg in zip(cpu.layers, g.layers, strict=True):
            assert lg.null_count == (0 if lc.validity is None else int((~np.asarray(lc.validity)).sum()))
    # a bad definition level in the second word of a flat leaf names that leaf
    flat = [k for k, sg in enumerate(segs) if sg.rep_pos < 0 and sg.def_pos >= 0 and sg.num_levels > 40]
    k = flat[-1]
    bad = levels.copy()
    bad[segs[k].def_pos + 37] = 9
    with pytest.raises(CorruptInputError) as info:
        ck.unravel_segments_gpu(cuda.to_device(bad), segs)
    assert info.value.segment == k


def test_unravel_segments_gpu_list_leaves_by_words(garbage_allocations):
    """Leaves with repetition levels write their layers' validity as bitmask words too (set
    all-valid by the flags launch, null bits cleared by the scatter): item and list layers of
    0, 1, 31, 32, 33 and 100 entries (word boundaries), null densities 0 / some / all, side by
    side in one call (a layer's last word shares nothing with the next layer's), the bits
    past each layer's entries 0; words and null counts equal the CPU unravel's."""
    rng = np.random.default_rng(11)
    cases = []
    for n in (0, 1, 31, 32, 33, 100):
        for p in (0.0, 0.3, 1.0):
            items = [None if rng.random() < p else int(x) for x in rng.integers(0, 9, n)]
            rows, at = [], 0
            while at < n:  # lists of 0-4 items over the n items, some lists null
                k = int(rng.integers(0, 5))
                rows.append(items[at : at + k])
                at += k
                if rng.random() < p:
                    rows.append(None)
            cases.append((rows, pa.list_(pa.int32())))
            cases.append(([None if rng.random() < p else [[1]] * int(rng.integers(0, 3)) for _ in range(n)], pa.list_(pa.list_(pa.int8()))))
    raveled = [_raveled(pa.array(r, t)) for r, t in cases]
    levels, segs = _segments_and_levels(raveled)
    gpu = ck.unravel_segments_gpu(cuda.to_device(levels), segs)
    for rav, g in zip(raveled, gpu, strict=True):
        cpu = ck.unravel_levels(rav.rep, rav.def_, rav.layer_kinds, num_levels=rav.num_levels)
        assert all(lg.words for lg in g.layers if lg.validity is not None)
        _assert_unraveled_equal(cpu, g)
        for lc, lg in zip(cpu.layers, g.layers, strict=True):
            assert lg.null_count == (0 if lc.validity is None else int((~np.asarray(lc.validity)).sum()))


def test_unravel_segments_gpu_names_the_corrupt_segment():
    good = _raveled(pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())))
    kinds = tuple(int(k) for k in good.layer_kinds)
    levels, segs = _segments_and_levels([good, good])
    bad_def = segs[1].def_pos + 1
    levels[bad_def] = 9  # beyond the layers' max def
    with pytest.raises(CorruptInputError) as info:
        ck.unravel_segments_gpu(cuda.to_device(levels), segs)
    assert info.value.segment == 1
    levels, segs = _segments_and_levels([good])
    levels[segs[0].rep_pos] = 0  # the first level does not start a row
    with pytest.raises(CorruptInputError):
        ck.unravel_segments_gpu(cuda.to_device(levels), segs)
    assert ck.unravel_segments_gpu(cuda.to_device(levels), []) == []
    assert kinds


def test_bitmaps_gpu_match_cpu():
    rng = np.random.default_rng(5)
    valid = rng.random(21) < 0.5
    bm = ck.validity_to_bitmap(valid)
    np.testing.assert_array_equal(h(ck.validity_to_bitmap_gpu(valid)), bm)
    np.testing.assert_array_equal(
        h(ck.bitmap_to_validity_gpu(bm, 18, offset=3)), ck.bitmap_to_validity(bm, 18, offset=3)
    )


def test_gather_fixed_gpu_exotic_dtypes():
    idx = np.array([2, 0, 1, 1])
    for items in (
        np.array([1.5, 2.5, -1.0], dtype=np.float16),
        np.array(["2020-01-01", "2021-01-01", "1999-12-31"], dtype="datetime64[us]"),
        np.array([1 + 1j, 2 - 2j, 3j], dtype=np.complex128),
        np.arange(18, dtype=np.float32).reshape(3, 3, 2),
    ):
        got = h(ck.gather_fixed_gpu(items, idx))
        assert got.dtype == items.dtype
        np.testing.assert_array_equal(got, items[idx])


# ------------------------------------------------------------------ utf8


def test_check_variable_segments_gpu_matches_cpu():
    rng = np.random.default_rng(5)
    alphabet = np.array([0x41, 0xC3, 0xA9, 0xE6, 0x97, 0xA5, 0xED, 0xA0, 0xF0, 0x9F, 0x98, 0x80, 0xFF], np.uint8)
    for _ in range(6):
        values = [bytes(alphabet[rng.integers(0, alphabet.size, rng.integers(0, 7))]) for _ in range(24)]
        offsets = np.zeros(len(values) + 1, np.int64)
        offsets[1:] = np.cumsum([len(v) for v in values])
        data = np.frombuffer(b"".join(values) + b"\0", np.uint8)
        seg_slot = np.array([0, 8, 16], np.int64)
        seg_count = np.array([8, 8, 8], np.int64)
        seg_utf8 = np.array([True, False, True])
        want = -1
        for s, (lo, n, u) in enumerate(zip(seg_slot, seg_count, seg_utf8)):
            try:
                ck.check_variable(offsets[lo : lo + n + 1], data, bool(u))
            except CorruptInputError:
                want = s
                break
        got = ck.check_variable_segments_gpu(_device.to_device(offsets), _device.to_device(data), int(offsets[-1]), seg_slot, seg_count, seg_utf8)
        assert got == want


def test_check_variable_segments_gpu_writes_column_offsets_from_0():
    """``rebased``: the validation launch writes each column's offsets from 0 (its values'
    offsets less its first's), int32 or int64, the final one after each column's last value;
    segments left out (base -1) write nothing."""
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 6, 30)
    offsets = np.zeros(31, np.int64)
    offsets[1:] = np.cumsum(lengths)
    offsets += 5  # the values' bytes need not start at 0
    data = np.full(int(offsets[-1]) + 1, 0x41, np.uint8)
    # columns [0, 12) and [12, 30), as segments (pages) of 4 / 8 / 3 / 7 / 8 values; the
    # third column [30, 30) is empty; segment 3 left out
    seg_slot = np.array([0, 4, 12, 15, 22], np.int64)
    seg_count = np.array([4, 8, 3, 7, 8], np.int64)
    base = np.array([0, 0, 12, -1, 12], np.int64)
    end = np.array([12, 12, 30, 30, 30], np.int64)
    dst = np.array([0, 4, 13, 16, 23], np.int64)
    for dtype in (np.int32, np.int64):
        out = _device.to_device(np.full(32, -7, dtype))
        got = ck.check_variable_segments_gpu(_device.to_device(offsets), _device.to_device(data), int(offsets[-1]), seg_slot, seg_count,
                                             np.zeros(5, np.bool_), rebased=(out, base, end, dst))
        assert got == -1
        res = _device.to_host(out)
        assert res.dtype == dtype
        np.testing.assert_array_equal(res[:13], offsets[0:13] - offsets[0])
        np.testing.assert_array_equal(res[13:16], offsets[12:15] - offsets[12])
        assert (res[16:23] == -7).all()  # left out
        np.testing.assert_array_equal(res[23:32], offsets[22:31] - offsets[12])
    # with shifts (the bytes of a column's rows decoded by an earlier call): the same, plus
    # the shift, left where it was not written
    shift = np.array([100, 100, 7, 7, 7], np.int64)
    out = _device.to_device(np.full(32, -7, np.int32))
    ck.check_variable_segments_gpu(_device.to_device(offsets), _device.to_device(data), int(offsets[-1]), seg_slot, seg_count,
                                   np.zeros(5, np.bool_), rebased=(out, base, end, dst, shift))
    res = _device.to_host(out)
    np.testing.assert_array_equal(res[:13], offsets[0:13] - offsets[0] + 100)
    np.testing.assert_array_equal(res[13:16], offsets[12:15] - offsets[12] + 7)
    assert (res[16:23] == -7).all()
    np.testing.assert_array_equal(res[23:32], offsets[22:31] - offsets[12] + 7)


def test_check_variable_segments_gpu_bad_offsets():
    offsets = np.array([0, 2, 1, 4, 9], np.int64)
    data = np.frombuffer(b"abcdefgh", np.uint8)
    got = ck.check_variable_segments_gpu(_device.to_device(offsets), _device.to_device(data), 8, [0, 2], [2, 2], [False, False])
    assert got == 0


def test_pinned_uploads_round_trip_and_recycle_blocks():
    """Inside pinned_uploads, host arrays of any dtype and shape (empty, 2-D, larger than a
    block) reach the device intact; standard blocks are kept for the next scope, a large
    one is not."""
    from cuda_kernels._device import _PinnedUploads, _upload_state, pinned_uploads, to_device

    rng = np.random.default_rng(5)
    arrays = [
        np.arange(10, dtype=np.int64), np.zeros(0, np.int32), rng.integers(0, 255, (7, 3)).astype(np.uint8),
        rng.standard_normal(33).astype(np.float32), np.array([True, False, True]),
        rng.integers(0, 2**40, _PinnedUploads.BLOCK // 8 + 5).astype(np.int64),  # more than one block
        np.arange(5, dtype=np.uint16),
    ]
    with pinned_uploads() as scope:
        got = [to_device(a) for a in arrays]
        assert scope.uploads == sum(1 for a in arrays if a.size)
    for a, g in zip(arrays, got, strict=True):
        np.testing.assert_array_equal(h(g), a)
        assert h(g).shape == a.shape and h(g).dtype == a.dtype
    free = _upload_state.free
    assert free and all(p.size == _PinnedUploads.BLOCK for p, _d in free)
    kept = [id(p) for p, _d in free]
    with pinned_uploads():
        again = to_device(np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(h(again), np.arange(4))
    assert {id(p) for p, _d in _upload_state.free} == set(kept)  # the same block came back


# ------------------------------------------------------------------ pieces (combined columns)


def test_rebase_offsets_segments_match_cpu():
    """Pieces' offsets moved to where their bytes land (int32 and int64 out), arithmetic
    runs, single-value gathers; a source past its array is flagged."""
    from cuda_kernels.pieces import rebase_offsets_segments, rebase_offsets_segments_gpu

    src = np.array([5, 7, 7, 12, 100, 103, 110, 0, 4], np.int64)
    at = [0, 4, -1, 8]
    counts = [3, 2, 4, 1]
    base = [5, 100, 0, 0]
    shift = [0, 7, 10, 0]
    stride = [0, 0, 3, 0]
    dst = [0, 3, 5, 9]
    for dtype in (np.int32, np.int64):
        want = rebase_offsets_segments(src, at, counts, base, shift, stride, np.zeros(10, dtype), dst)
        got = h(rebase_offsets_segments_gpu(cuda.to_device(src), at, counts, base, shift, stride, cuda.to_device(np.zeros(10, dtype)), dst))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(want, [0, 2, 2, 7, 10, 10, 13, 16, 19, 4])
    with pytest.raises(CorruptInputError):
        rebase_offsets_segments_gpu(cuda.to_device(src), [8], [2], [0], [0], [0], cuda.to_device(np.zeros(4, np.int64)), [0])


@pytest.mark.parametrize("starts", [(0, 5, 37), (3, 33, 64), (0, 31, 32)])
def test_pack_bitmask_segments_match_cpu(starts):
    """Validity bytes, all-valid and all-null runs packed at any bit offset into shared
    words (OR-ed atomically), with per-column null counts."""
    from cuda_kernels.pieces import pack_bitmask_segments, pack_bitmask_segments_gpu

    rng = np.random.default_rng(len(starts) + starts[1])
    src = (rng.random(80) < 0.6).astype(np.uint8)
    at = [0, -1, 40]
    counts = [starts[1] - starts[0], starts[2] - starts[1], 30]
    column = [0, 0, 1]
    want_words = pack_bitmask_segments(src, at, counts, list(starts), column, np.zeros(4, np.uint32), np.zeros(2, np.int64))
    want_nulls = np.zeros(2, np.int64)
    pack_bitmask_segments(src, at, counts, list(starts), column, np.zeros(4, np.uint32), want_nulls)
    words = cuda.to_device(np.zeros(4, np.uint32))
    nulls = cuda.to_device(np.zeros(2, np.int64))
    pack_bitmask_segments_gpu(cuda.to_device(src), at, counts, list(starts), column, words, nulls)
    np.testing.assert_array_equal(h(words), want_words)
    np.testing.assert_array_equal(h(nulls), want_nulls)
    bits = np.unpackbits(want_words.view(np.uint8), bitorder="little")
    np.testing.assert_array_equal(bits[starts[0] : starts[1]], src[: counts[0]])
    assert bits[starts[1] : starts[2]].all()
    np.testing.assert_array_equal(bits[starts[2] : starts[2] + 30], src[40:70])
    assert want_nulls[1] == 30 - int(src[40:70].sum())
    allnull = cuda.to_device(np.zeros(1, np.uint32))
    n0 = cuda.to_device(np.zeros(1, np.int64))
    pack_bitmask_segments_gpu(cuda.to_device(src), [-2], [20], [3], [0], allnull, n0)
    assert h(allnull)[0] == 0 and h(n0)[0] == 20


def _words_of(bits: np.ndarray) -> np.ndarray:
    """Bool bits as uint32 words (Arrow's order), the last word zero-padded."""
    raw = np.packbits(bits.astype(bool), bitorder="little")
    out = np.zeros(-(-max(bits.size, 1) // 32) * 4, np.uint8)
    out[: raw.size] = raw
    return out.view(np.uint32)


@pytest.mark.parametrize("seed", range(6))
def test_copy_bitmask_segments_match_cpu_and_the_bytes(seed):
    """Bits of bitmask words moved from any source bit to any destination bit (0, 1, 31,
    32, 33 long and longer runs; all-valid and all-null runs between them), OR-ed into shared
    words, with per-column null counts: the GPU equals the CPU reference, which equals packing
    the same bits from bytes; the source's bits outside a segment never leak in."""
    from cuda_kernels.pieces import copy_bitmask_segments, copy_bitmask_segments_gpu, pack_bitmask_segments

    rng = np.random.default_rng(seed)
    nsrc = 150
    src_bits = rng.random(nsrc) < (0.0, 0.5, 1.0, 0.7, 0.3, 0.9)[seed]
    words = _words_of(src_bits)
    words[-1] |= np.uint32(0xFFFFFFFF) << np.uint32(nsrc % 32)  # set bits past the source's end: never read
    at, counts, dst, column = [], [], [], []
    pos = int(rng.integers(0, 40))
    for k, n in enumerate((0, 1, 31, 32, 33, 45)):
        at.append([int(rng.integers(0, nsrc - n + 1)), -1, -2][k % 3] if k % 2 == 0 else int(rng.integers(0, nsrc - n + 1)))
        counts.append(n)
        dst.append(pos)
        column.append(k % 2)
        pos += n
    nw = -(-pos // 32) + 1
    want, want_nulls = np.zeros(nw, np.uint32), np.zeros(2, np.int64)
    copy_bitmask_segments(words, at, counts, dst, column, want, want_nulls)
    ref, ref_nulls = np.zeros(nw, np.uint32), np.zeros(2, np.int64)
    pack_bitmask_segments(src_bits.astype(np.uint8), at, counts, dst, column, ref, ref_nulls)
    np.testing.assert_array_equal(want, ref)
    np.testing.assert_array_equal(want_nulls, ref_nulls)
    got, nulls = cuda.to_device(np.zeros(nw, np.uint32)), cuda.to_device(np.zeros(2, np.int64))
    copy_bitmask_segments_gpu(cuda.to_device(words), at, counts, dst, column, got, nulls)
    np.testing.assert_array_equal(h(got), want)
    np.testing.assert_array_equal(h(nulls), want_nulls)
    bits = np.unpackbits(h(got).view(np.uint8), bitorder="little")
    assert not bits[pos:].any()
    with pytest.raises(CorruptInputError):  # a source past its words
        copy_bitmask_segments_gpu(cuda.to_device(words[:1]), [10], [30], [0], [0], cuda.to_device(np.zeros(2, np.uint32)),
                                  cuda.to_device(np.zeros(1, np.int64)))


@pytest.mark.parametrize("seed", range(4))
def test_gather_rows_segments_match_cpu_and_take(seed):
    """Rows of 1, 4, 8 and 12 bytes gathered by shared host positions (any order, repeats)
    from their place in one source buffer to any byte of the output: the GPU equals the CPU
    reference, which equals numpy's take; a position past the rows is refused."""
    from cuda_kernels.pieces import gather_rows_segments, gather_rows_segments_gpu

    rng = np.random.default_rng(seed)
    src = rng.integers(0, 256, 1000, dtype=np.uint8)
    nrows = 20
    pos = np.concatenate([np.sort(rng.choice(nrows, 7, replace=False)), rng.integers(0, nrows, 5), [3, 3]]).astype(np.int64)
    at, first, width, nbytes, dst = [], [], [], [], []
    out_at = int(rng.integers(0, 9))
    for k, w in enumerate((1, 4, 8, 12)):
        f = [0, 7, 2, 0][k]
        n = [7, 7, 0, pos.size][k]
        at.append(k * 250)
        first.append(f)
        width.append(w)
        nbytes.append(n * w)
        dst.append(out_at)
        out_at += n * w + 3
    want = gather_rows_segments(src, pos, at, first, width, nbytes, np.zeros(out_at, np.uint8), dst)
    for a, f, w, nb, d in zip(at, first, width, nbytes, dst, strict=True):
        rows = src[a : a + nrows * w].reshape(nrows, w)
        np.testing.assert_array_equal(want[d : d + nb], rows[pos[f : f + nb // w]].reshape(-1))
    got = h(gather_rows_segments_gpu(cuda.to_device(src), pos, at, first, width, nbytes, cuda.to_device(np.zeros(out_at, np.uint8)), dst))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(CorruptInputError):
        gather_rows_segments_gpu(cuda.to_device(src[:40]), pos, [0], [0], [4], [4 * pos.size], cuda.to_device(np.zeros(80, np.uint8)), [0])


@pytest.mark.parametrize("seed", range(4))
def test_var_rows_by_position_match_cpu_and_take(seed):
    """A selection's variable-width rows (any order, repeats, empty rows) of two columns whose
    offsets share one int64 buffer, by shared host positions: the offsets rebased by
    position (each row moved by its run's delta, plain segments in the same launch) and the
    bytes copied to where those offsets say, a thread or a warp per row: the GPU equals the
    CPU reference, which equals the rows taken one by one (Arrow's take); a position past a
    column's offsets and bytes past the source are refused."""
    from cuda_kernels.pieces import gather_var_segments, gather_var_segments_gpu, rebase_offsets_segments, rebase_offsets_segments_gpu

    rng = np.random.default_rng(seed)
    lens = [rng.integers(0, (3, 40, 90, 0)[seed] + 1, 12) for _ in range(2)]
    offs = [np.concatenate([[0], np.cumsum(k)]).astype(np.int64) for k in lens]
    buf = np.concatenate([np.full(3, 99), offs[0], np.full(2, 99), offs[1]]).astype(np.int64)  # column c's offsets at item at[c]
    col_at = [3, 3 + offs[0].size + 2]
    data = rng.integers(0, 256, int(offs[0][-1] + offs[1][-1]) + 20, dtype=np.uint8)
    col_data = [5, 5 + int(offs[0][-1]) + 7]  # column c's bytes from byte col_data[c] of data
    pos = np.concatenate([rng.permutation(12)[:7], rng.integers(0, 12, 5), [4, 4]]).astype(np.int64)
    # three selections: rows pos[0:7] of column 0, pos[7:14] of column 0, all of pos of column 1;
    # each row moved so the selection's rows land one after the other from the segment's start
    segs = [(0, 0, 7), (0, 7, 7), (1, 0, pos.size)]
    at, data_at, first, counts, dfirst, delta, dst_off, dst_byte, want_offs, want_bytes = [], [], [], [], [], [], [], [], [], []
    row = byte = 0
    for c, f, n in segs:
        p = pos[f : f + n]
        k = offs[c][p + 1] - offs[c][p]
        before = np.concatenate([[0], np.cumsum(k)[:-1]]).astype(np.int64)
        at.append(col_at[c]); data_at.append(col_data[c]); first.append(f); counts.append(n); dfirst.append(len(delta) and sum(map(len, delta)))
        delta.append(before - offs[c][p])
        dst_off.append(row); dst_byte.append(byte)
        want_offs.append(byte + before)
        want_bytes.append(b"".join(data[col_data[c] + offs[c][q] : col_data[c] + offs[c][q + 1]].tobytes() for q in p))
        row += n + 1
        byte += int(k.sum()) + 3
    delta = np.concatenate(delta)
    # offsets: by position (shift: the segment's first byte), and a plain segment in the same launch
    want = rebase_offsets_segments(buf, [*at, col_at[1]], [*counts, 3], [0, 0, 0, 5], dst_byte + [100], [0] * 4, np.zeros(row + 3, np.int64),
                                   [*dst_off, row], pos=pos, first=[*first, -1], delta=delta, dfirst=[*dfirst, 0])
    for d, w, n in zip(dst_off, want_offs, counts, strict=True):
        np.testing.assert_array_equal(want[d : d + n], w)
    np.testing.assert_array_equal(want[row : row + 3], buf[col_at[1] : col_at[1] + 3] - 5 + 100)
    got = rebase_offsets_segments_gpu(cuda.to_device(buf), [*at, col_at[1]], [*counts, 3], [0, 0, 0, 5], dst_byte + [100], [0] * 4,
                                      cuda.to_device(np.zeros(row + 3, np.int32)), [*dst_off, row], pos=pos, first=[*first, -1],
                                      delta=delta, dfirst=[*dfirst, 0])
    np.testing.assert_array_equal(h(got), want)
    # bytes
    out_n = byte + 5
    want = gather_var_segments(buf, data, pos, delta, at, data_at, first, dfirst, counts, dst_byte, np.zeros(out_n, np.uint8))
    for b, w in zip(dst_byte, want_bytes, strict=True):
        assert want[b : b + len(w)].tobytes() == w
    for warp in (False, True):
        got = gather_var_segments_gpu(cuda.to_device(buf), cuda.to_device(data), pos, delta, at, data_at, first, dfirst, counts, dst_byte,
                                      cuda.to_device(np.zeros(out_n, np.uint8)), warp_copy=warp)
        np.testing.assert_array_equal(h(got), want)
    with pytest.raises(CorruptInputError):  # a position past the column's offsets
        rebase_offsets_segments_gpu(cuda.to_device(offs[0]), [0], [1], [0], [0], [0], cuda.to_device(np.zeros(1, np.int64)), [0],
                                    pos=[13], first=[0], delta=[0], dfirst=[0])
    with pytest.raises(CorruptInputError):
        gather_var_segments_gpu(cuda.to_device(offs[0]), cuda.to_device(data), [12], [0], [0], [0], [0], [0], [1], [0],
                                cuda.to_device(np.zeros(out_n, np.uint8)))
    if int(offs[0][-1]):
        with pytest.raises(CorruptInputError):  # bytes past the source
            gather_var_segments_gpu(cuda.to_device(buf), cuda.to_device(data[:1]), pos, delta, at, data_at, first, dfirst, counts,
                                    dst_byte, cuda.to_device(np.zeros(out_n, np.uint8)))


@pytest.mark.parametrize("seed", range(4))
def test_gather_bits_segments_match_cpu_and_the_packed_take(seed):
    """Validity gathered by shared host positions from bool bytes and from bitmask words
    (any source bit offset) to any destination bit, OR-ed into shared words, with per-column
    null counts: the GPU equals the CPU reference, which equals packing the taken bits; a
    position past the source is refused."""
    from cuda_kernels.pieces import gather_bits_segments, gather_bits_segments_gpu, pack_bitmask_segments

    rng = np.random.default_rng(seed)
    nsrc = 100
    valid = rng.random(nsrc) < (0.0, 0.5, 1.0, 0.8)[seed]
    words = _words_of(valid)
    as_bytes = valid.astype(np.uint8)
    pos = np.concatenate([np.sort(rng.choice(60, 40, replace=False)), rng.integers(0, 60, 9)]).astype(np.int64)
    # bytes from byte 5, bits from bit 7 (rows 0..59 of each source), a repeat of the bits at another place
    segs = [(5, 0, 33, 1, 0), (7, 0, 49, 0, 1), (7, 33, 16, 0, 1)]  # (at, first, counts, dst gap, bits)
    at, first, counts, dst, column, bits = [], [], [], [], [], []
    d = int(rng.integers(0, 40))
    for k, (a, f, n, gap, b) in enumerate(segs):
        d += gap
        at.append(a)
        first.append(f)
        counts.append(n)
        dst.append(d)
        column.append(k % 2)
        bits.append(b)
        d += n
    nw = -(-d // 32) + 1
    # one source buffer holding both: bytes at byte 5.., then (for bits) the words' bytes at byte 128
    buf = np.zeros(128 + words.nbytes, np.uint8)
    buf[5 : 5 + nsrc] = as_bytes
    buf[128:] = words.view(np.uint8)
    at = [a + (8 * 128 if b else 0) for a, b in zip(at, bits, strict=True)]
    want, want_nulls = np.zeros(nw, np.uint32), np.zeros(2, np.int64)
    gather_bits_segments(buf, pos, at, first, counts, dst, column, want, want_nulls, bits)
    ref, ref_nulls = np.zeros(nw, np.uint32), np.zeros(2, np.int64)
    for a, f, n, dd, c, b in zip(at, first, counts, dst, column, bits, strict=True):
        taken = valid[(a - 8 * 128 if b else a - 5) + pos[f : f + n]]
        pack_bitmask_segments(taken.astype(np.uint8), [0], [n], [dd], [c], ref, ref_nulls)
    np.testing.assert_array_equal(want, ref)
    np.testing.assert_array_equal(want_nulls, ref_nulls)
    got, nulls = cuda.to_device(np.zeros(nw, np.uint32)), cuda.to_device(np.zeros(2, np.int64))
    gather_bits_segments_gpu(cuda.to_device(buf), pos, at, first, counts, dst, column, got, nulls, bits)
    np.testing.assert_array_equal(h(got), want)
    np.testing.assert_array_equal(h(nulls), want_nulls)
    with pytest.raises(CorruptInputError):
        gather_bits_segments_gpu(cuda.to_device(buf[:4]), pos, [0], [0], [pos.size], [0], [0], cuda.to_device(np.zeros(4, np.uint32)),
                                 cuda.to_device(np.zeros(1, np.int64)), [1])


def test_and_bitmask_segments_match_cpu():
    """Struct children's masks AND-ed with their parents' words, the nulls that adds counted
    per column: the GPU equals the CPU reference and the bitwise AND; a segment outside the
    words is refused."""
    from cuda_kernels.pieces import and_bitmask_segments, and_bitmask_segments_gpu

    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**32, 12, dtype=np.uint64).astype(np.uint32)
    dst, src, counts, column = [4, 8, 10], [0, 4, 0], [3, 2, 0], [0, 1, 1]
    want = words.copy()
    want_nulls = np.zeros(2, np.int64)
    and_bitmask_segments(want, dst, src, counts, column, want_nulls)
    np.testing.assert_array_equal(want[4:7], words[4:7] & words[0:3])
    np.testing.assert_array_equal(want[8:10], words[8:10] & want[4:6])  # the CPU goes in order
    got = cuda.to_device(words)
    nulls = cuda.to_device(np.zeros(2, np.int64))
    and_bitmask_segments_gpu(got, dst[:1], src[:1], counts[:1], column[:1], nulls)  # a launch per depth
    and_bitmask_segments_gpu(got, dst[1:], src[1:], counts[1:], column[1:], nulls)
    np.testing.assert_array_equal(h(got), want)
    np.testing.assert_array_equal(h(nulls), want_nulls)
    lost = sum(bin(int(a)).count("1") - bin(int(b)).count("1") for a, b in zip(words[4:7], want[4:7], strict=True))
    assert want_nulls[0] == lost
    with pytest.raises(CorruptInputError):
        and_bitmask_segments_gpu(cuda.to_device(words), [11], [0], [2], [0], cuda.to_device(np.zeros(1, np.int64)))


@pytest.mark.parametrize(("offset", "n"), [(0, 0), (0, 1), (5, 31), (0, 32), (31, 33), (7, 70)])
def test_count_zero_bits_matches_cpu(offset, n):
    """Nulls of a word validity at a bit offset, the bits around it set and clear at random:
    only ``[offset, offset + n)`` counts; bits past the words are refused."""
    from cuda_kernels.pieces import count_zero_bits, count_zero_bits_gpu

    rng = np.random.default_rng(offset + n)
    bits = rng.random(offset + n + 40) < 0.5
    words = _words_of(bits)
    want = int(n - bits[offset : offset + n].sum())
    assert count_zero_bits(words, offset, n) == want
    assert count_zero_bits_gpu(cuda.to_device(words), offset, n) == want
    with pytest.raises(CorruptInputError):
        count_zero_bits_gpu(cuda.to_device(words), offset, words.size * 32 - offset + 1)


def _dictionary_case(at):
    """Four pages' dictionary indices (fixed 4-byte items, variable-width items, an empty
    page, fixed 2-byte items), their descriptors and arena (the variable-width items' int64
    offsets at byte ``at``), and the spans they name."""
    arena = np.zeros(96, np.uint8)
    arena[at : at + 32] = np.array([0, 3, 3, 8], np.int64).view(np.uint8)  # page 1's item offsets
    indices = np.array([9, 2, 0, 1, 2, 1, 1, 0, 1, 0], np.uint32)  # index 0: not a page's
    segs = {
        "start": np.array([1, 5, 8, 8], np.int64), "count": np.array([4, 3, 0, 2], np.int64),
        "items": np.array([0, 16, 0, 80], np.int64), "nitems": np.array([3, 3, 0, 2], np.int64),
        "width": np.array([4, 0, 4, 2], np.int64), "offsets": np.array([0, at, 0, 0], np.int64),
        "dst": np.array([100, 2, 0, 200], np.int64),
    }
    fixed_src = np.full(9, -7, np.int64)
    fixed_dst = np.full(9, -7, np.int64)
    fixed_src[[0, 1, 2, 3, 7, 8]] = [8, 0, 4, 8, 82, 80]
    fixed_dst[[0, 1, 2, 3, 7, 8]] = [100, 104, 108, 112, 200, 202]
    start = np.full(6, -7, np.int64)
    length = np.full(6, -7, np.int64)
    start[2:5] = [19, 19, 16]
    length[2:5] = [0, 0, 3]
    return indices, segs, arena, (fixed_src, fixed_dst, start, length)


@pytest.mark.parametrize(("limit", "at"), [(None, 40), (None, 43), (4, 40), (2, 40)])
def test_dictionary_spans_match_the_items(monkeypatch, limit, at):
    """The read path's dictionary step (32-bit thread numbers and page search): fixed-width
    items become copy ranges, variable-width items spans (their offsets read as words at an
    aligned ``at``, as bytes at another), an empty page nothing; launches split at page
    bounds (``limit``: the most indices one launch covers) give the same, a page over the
    limit is refused, an index past its dictionary is flagged."""
    from lance_gpu.file.encodings.dictionary import decode_kernels as dk

    if limit is not None:
        monkeypatch.setattr(dk, "_MAX_LAUNCH", limit)
    if limit == 4:
        assert dk._launch_groups(np.array([4, 3, 0, 2]), 4) == [(0, 1), (1, 3), (3, 4)]
    indices, segs, arena, want = _dictionary_case(at)
    outs = [cuda.to_device(np.full(w.size, -7, np.int64)) for w in want]
    if limit == 2:  # page 0 holds 4 indices
        with pytest.raises(ValueError, match="a page of 4 indices"):
            dk.dictionary_spans(cuda.to_device(indices), segs, cuda.to_device(arena), *outs)
        return
    dk.dictionary_spans(cuda.to_device(indices), segs, cuda.to_device(arena), *outs)
    for got, w in zip(outs, want, strict=True):
        np.testing.assert_array_equal(h(got), w)
    bad = indices.copy()
    bad[6] = 3  # page 1 has 3 items
    with pytest.raises(CorruptInputError):
        dk.dictionary_spans(cuda.to_device(bad), segs, cuda.to_device(arena), *outs)


def test_pieces_refuse_launches_past_32_bits(monkeypatch):
    """The pieces' kernels count their threads in 32 bits: a launch over more threads than
    ``MAX_ITEMS32`` is refused (here the limit lowered), and a warp-per-row string gather
    falls back to a thread per row where 32 lanes a row would pass it."""
    from cuda_kernels import pieces, segments

    monkeypatch.setattr(segments, "MAX_ITEMS32", 5)  # what segments.launch_dims32 refuses past
    monkeypatch.setattr(pieces, "MAX_ITEMS32", 5)  # the string gather's warp fallback
    src = np.arange(10, dtype=np.int64)
    out = cuda.to_device(np.zeros(10, np.int64))
    with pytest.raises(ValueError, match="at most 2 \\*\\* 31 - 1"):
        pieces.rebase_offsets_segments_gpu(cuda.to_device(src), [0], [6], [0], [0], [0], out, [0])
    pieces.rebase_offsets_segments_gpu(cuda.to_device(src), [0], [5], [0], [0], [0], out, [0])
    np.testing.assert_array_equal(h(out)[:5], src[:5])
    offsets = np.array([0, 40, 80], np.int64)
    data = np.arange(80, dtype=np.uint8)
    got = cuda.to_device(np.zeros(80, np.uint8))
    pieces.gather_var_segments_gpu(cuda.to_device(offsets), cuda.to_device(data), [1, 0], [-40, 40], [0], [0], [0], [0], [2], [0], got,
                                   warp_copy=True)
    np.testing.assert_array_equal(h(got), np.concatenate([data[40:], data[:40]]))


def test_allocation_of_finds_the_whole_allocation():
    """Views of one device allocation share its key; the byte offset locates them."""
    whole = cuda.to_device(np.arange(64, dtype=np.int64))
    a, b = whole[3:10], whole[20:]
    ka, wa, oa = _device.allocation_of(a)
    kb, _wb, ob = _device.allocation_of(b)
    assert ka == kb and (oa, ob) == (24, 160) and wa.shape[0] == 512
    np.testing.assert_array_equal(h(wa)[oa : oa + 8].view(np.int64), [3])
    other = cuda.to_device(np.arange(4, dtype=np.int64))
    assert _device.allocation_of(other)[0] != ka


# --------------------------------------------------------------------------------------------
# encode primitives (cuda_kernels.encode) against their CPU twins


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_encode_pack_chunks_matches_cpu(dtype):
    from cuda_kernels.bitunpack import block_bit_widths, pack_chunks
    from cuda_kernels.encode import block_bit_widths_gpu, pack_chunks_gpu

    rng = np.random.default_rng(3)
    top = min(np.iinfo(dtype).max, 5000)
    v = rng.integers(0, top, 1500).astype(dtype)
    v[1024:] //= 16  # a second block of another width
    widths = block_bit_widths_gpu(cuda.to_device(v))
    np.testing.assert_array_equal(widths, block_bit_widths(v))
    words, per_chunk = pack_chunks_gpu(cuda.to_device(v), widths)
    cpu_words, cpu_per_chunk = pack_chunks(v, widths)
    np.testing.assert_array_equal(h(words), cpu_words)
    np.testing.assert_array_equal(per_chunk, cpu_per_chunk)


def test_encode_level_blocks_and_statistics():
    from cuda_kernels.encode import (
        def_levels_from_validity_gpu,
        pack_level_blocks_gpu,
        rows_all_equal_gpu,
        run_count_gpu,
    )

    rng = np.random.default_rng(4)
    levels = rng.integers(0, 4, 2048).astype(np.uint16)
    out = cuda.to_device(np.zeros(2 * 64 * 2, np.uint16))
    pack_level_blocks_gpu(cuda.to_device(levels), [0, 1024], [1024, 1024], [0, 128], 2, out)
    np.testing.assert_array_equal(h(out), ck.pack_blocks(levels, 2))
    v = np.repeat(np.arange(7), 13)
    assert run_count_gpu(cuda.to_device(v)) == 7
    assert rows_all_equal_gpu(cuda.to_device(np.tile(np.arange(3, dtype=np.uint8), 40)), 3)
    assert not rows_all_equal_gpu(cuda.to_device(np.arange(12, dtype=np.uint8)), 3)
    valid = rng.random(50) < 0.5
    np.testing.assert_array_equal(h(def_levels_from_validity_gpu(cuda.to_device(valid))), (~valid).astype(np.uint16))


def _level_section(rng, form, nlev):
    """A level section of ``nlev`` u16 levels: random bytes (spans only), inline bit-packed
    blocks (a width word per 1024 levels, then its packed words) or block-form RLE."""
    if form == 1:
        out = b""
        for _ in range(-(-nlev // 1024)):
            w = int(rng.integers(0, 17))
            out += w.to_bytes(2, "little") + bytes(1024 * w // 8)
        return out
    if form == 2:
        nruns = int(rng.integers(0, 12))
        return (2 * nruns).to_bytes(8, "little") + bytes(2 * nruns) + bytes(nruns)
    return bytes(rng.integers(0, 256, int(rng.integers(0, 20)), dtype=np.uint8))


def _chunk(rng, has_rep, has_def, large, nbuf, word, count, rep_form=0, def_form=0):
    """One chunk in the mini-block layout (``cuda_kernels.chunkheaders``): header, level
    sections (of ``rep_form`` / ``def_form``) and buffers, buffer 0 holding inline
    bit-packed blocks when ``word``."""
    pad = lambda b: b + bytes(-len(b) % 8)  # noqa: E731
    nlev = int(rng.integers(0, 3000)) if has_rep else count if has_def else int(rng.integers(0, 100))
    rep = _level_section(rng, rep_form, nlev) if has_rep else b""
    dfn = _level_section(rng, def_form, nlev) if has_def else b""
    bufs = []
    for b in range(nbuf):
        if b == 0 and word:
            blocks = b""
            for _ in range(-(-count // 1024)):
                w = int(rng.integers(0, 8 * word + 1))
                blocks += int(w).to_bytes(word, "little") + bytes(1024 * w // 8)
            bufs.append(blocks)
        else:
            bufs.append(bytes(rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8)))
    head = nlev.to_bytes(2, "little")
    head += len(rep).to_bytes(2, "little") if has_rep else b""
    head += len(dfn).to_bytes(2, "little") if has_def else b""
    head += b"".join(len(b).to_bytes(4 if large else 2, "little") for b in bufs)
    return pad(head) + pad(rep) + pad(dfn) + b"".join(pad(b) for b in bufs)


def chunk_cases(seed: int, n: int = 40):
    """``n`` random chunks of every shape and level form, about half with a byte of their
    header, level sections or first block flipped: ``(data, start, size, count, limit,
    shape)``."""
    from cuda_kernels import chunkheaders as chk

    rng = np.random.default_rng(seed)
    data, start, size, count, limit, shape = bytearray(), [], [], [], [], []
    for _ in range(n):
        has_rep, has_def, large = (bool(x) for x in rng.integers(0, 2, 3))
        nbuf, word = int(rng.integers(0, 4)), int(rng.choice([0, 1, 2, 4, 8]))
        word = word if nbuf else 0
        rep_form, def_form = (int(x) for x in rng.integers(0, 3, 2))
        c = int(rng.integers(1, 3000))
        raw = bytearray(_chunk(rng, has_rep, has_def, large, nbuf, word, c, rep_form, def_form))
        if rng.random() < 0.5:  # corrupt a byte of the header, the level sections or the first block
            at = int(rng.integers(0, min(len(raw), 40)))
            raw[at] = int(rng.integers(0, 256))
        start.append(len(data))
        size.append(len(raw))
        data += raw
        limit.append(len(data))
        count.append(c)
        shape.append(chk.shape_bits(has_rep, has_def, large, has_def and not has_rep, nbuf, word, rep_form, def_form))
    cols = [np.array(v, np.int64) for v in (start, size, count, limit, shape)]
    return (np.frombuffer(bytes(data), np.uint8), *cols)


@pytest.mark.parametrize("seed", range(4))
def test_chunk_headers_gpu_match_cpu_on_good_and_corrupt_chunks(seed):
    """The pre-pass kernel (one thread per chunk) gives its CPU form's tables and statuses on
    chunks of every shape and level form (inline bit-packed, RLE, spans only), intact and
    with random bytes flipped (headers past their chunk, level counts off, impossible widths,
    truncated blocks, RLE sections out of range)."""
    from cuda_kernels import chunkheaders as chk

    buf, start, size, count, limit, shape = chunk_cases(seed)
    nblk = chk.block_rows(shape, count, size)
    first = np.concatenate([[0], np.cumsum(nblk)[:-1]]).astype(np.int64)
    total = int(nblk.sum())
    out, blocks = chk.parse_chunk_headers(buf, start, size, count, limit, shape, first, total)
    d_out = cuda.to_device(np.zeros_like(out))
    d_blocks = cuda.to_device(np.zeros((max(total, 1), 2), np.int64))
    chk.parse_chunk_headers_gpu(cuda.to_device(buf), start, size, count, limit, shape, first, d_out, d_blocks)
    np.testing.assert_array_equal(h(d_out), out)
    good = np.flatnonzero(out[:, -1] == 0)
    rows = np.concatenate([np.arange(first[i], first[i] + nblk[i]) for i in good]).astype(np.int64) if good.size else np.zeros(0, np.int64)
    # every row an intact chunk keeps (level rows past its last block zeroed); refused chunks' rows are partial
    np.testing.assert_array_equal(h(d_blocks)[rows], blocks[rows])
    assert set(np.unique(out[:, -1])) - {0} and good.size, "the cases did not cover intact and corrupt chunks"
    forms = {(int(s) >> 12) & 15 for s in shape[good]}
    assert len(forms) > 3, forms


def test_unravel_reads_the_earlier_launches_flags_back_with_its_results():
    """Inside ``deferred_errors`` the unravel's one copy back carries the flags of the
    launches before it: a flagged earlier launch is raised there (marked ``earlier``), a
    clean one is settled, so the block's end reads back only flags handed out later."""
    from cuda_kernels import errors

    good = _raveled(pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())))
    levels, segs = _segments_and_levels([good])
    values = cuda.to_device(np.arange(10, dtype=np.int64))
    with errors.deferred_errors() as scope:
        flag = errors.new_error_flag()
        errors.raise_if_flagged(flag, "first")
        _res, also = ck.unravel_segments_gpu(cuda.to_device(levels), segs, read_also=(values, np.array([3, 7])))
        assert also.tolist() == [3, 7] and scope.settled == 1  # read with the unravel's results
    with pytest.raises(CorruptInputError, match="second") as info:
        with errors.deferred_errors():
            flag = errors.new_error_flag()
            flag.copy_to_device(np.array([1], np.int32))  # as a kernel that found corrupt input would
            errors.raise_if_flagged(flag, "second")
            ck.unravel_segments_gpu(cuda.to_device(levels), segs, read_also=(values, np.array([1])))
    assert getattr(info.value, "earlier", False)


# ------------------------------------------------------------------ full-zip walk: item validity


@pytest.mark.parametrize("dim", [1, 8, 13])
def test_fullzip_walk_splits_item_validity_as_the_cpu_decode(dim):
    """Fixed-stride full-zip rows of fixed-size lists with item validity (a control word,
    ``ceil(dim / 8)`` bytes of item bits, ``dim`` int16 items) beside rows of a page without
    item validity: the walk writes each value's items and a byte per item of its validity
    as the CPU decode (``fixed_size_list.unzip_per_value``) splits them, and the definition
    levels of the control words."""
    from lance_gpu._proto import encodings_v2_1_pb2 as pb
    from lance_gpu.file.blocks import FixedWidthBlock
    from lance_gpu.file.encodings import fixed_size_list
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.v2_1 import fullzip_kernels

    rng = np.random.default_rng(dim)
    vb = (dim + 7) // 8
    rows = (5, 7)
    valid_rows = rng.integers(0, 256, (rows[0], vb + 2 * dim), dtype=np.uint8)
    plain_rows = rng.integers(0, 256, (rows[1], 2 * dim), dtype=np.uint8)
    defs = [rng.integers(0, 2, r).astype(np.uint8) for r in rows]
    pages = [np.concatenate([d[:, None], v], axis=1).reshape(-1) for d, v in zip(defs, (valid_rows, plain_rows), strict=True)]
    arena = np.concatenate(pages)
    enc = pb.CompressiveEncoding()
    enc.fixed_size_list.items_per_value = dim
    enc.fixed_size_list.has_validity = True
    enc.fixed_size_list.values.flat.bits_per_value = 16
    cpu = fixed_size_list.unzip_per_value(enc.fixed_size_list, FixedWidthBlock(valid_rows.reshape(-1), 8 * (vb + 2 * dim), rows[0]),
                                          DecodeContext("t.lance", 0))
    out_values = (rows[0] + rows[1]) * 2 * dim
    item_at = out_values + 3  # item validity bytes after the values (any byte)
    fixed_size = item_at + rows[0] * dim
    a = lambda *v: np.asarray(v, np.int64)  # noqa: E731
    work = {
        "rows": a(*rows), "data": a(0, pages[0].size), "size": a(pages[0].size, pages[1].size), "index": a(-1, -1),
        "iwidth": a(0, 0), "stride": a(1 + vb + 2 * dim, 1 + 2 * dim), "ctrl": a(1, 1), "bits_def": a(1, 1), "offb": a(0, 0),
        "valb": a(vb + 2 * dim, 2 * dim), "inv": a(0, 0), "ninv": a(2, 2), "rep_dst": a(-1, -1), "def_dst": a(0, rows[0]),
        "val_dst": a(0, rows[0] * 2 * dim), "items": a(*rows), "visible": a(*rows), "idim": a(dim, 0), "item_dst": a(item_at, -1),
    }
    fixed = cuda.to_device(np.full(fixed_size, 0xEE, np.uint8))
    levels = cuda.to_device(np.zeros(sum(rows), np.uint16))
    slots = cuda.to_device(np.zeros(1, np.int64))
    fullzip_kernels.fullzip_walk(cuda.to_device(arena), work, np.zeros(2, np.bool_), levels, fixed, slots, slots)
    got = h(fixed)
    np.testing.assert_array_equal(got[: rows[0] * 2 * dim], cpu.as_bytes())
    np.testing.assert_array_equal(got[rows[0] * 2 * dim : out_values], plain_rows.reshape(-1))
    np.testing.assert_array_equal(got[item_at:fixed_size], cpu.fsl_validity[0].astype(np.uint8))
    np.testing.assert_array_equal(got[out_values:item_at], 0xEE)  # nothing written between
    np.testing.assert_array_equal(h(levels), np.concatenate(defs))


@pytest.mark.parametrize("dims", [(2, 3), (3, 70)])
def test_fullzip_walk_splits_nested_item_validity_as_the_cpu_decode(dims):
    """Fixed-stride full-zip rows of nested fixed-size lists with item validity in both
    layers (a control word, ``ceil(d1 / 8)`` bytes of the lists' bits, ``ceil(d1 * d2 / 8)``
    of the items', then ``d1 * d2`` int32 items): the walk writes each value's items and a
    byte per item of each layer's validity, each layer to its own place, as the CPU decode
    (``fixed_size_list.unzip_per_value``) splits them."""
    from lance_gpu._proto import encodings_v2_1_pb2 as pb
    from lance_gpu.file.blocks import FixedWidthBlock
    from lance_gpu.file.encodings import fixed_size_list
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.v2_1 import fullzip_kernels

    d1, d2 = dims
    items = d1 * d2
    rng = np.random.default_rng(items)
    vb1, vb2 = (d1 + 7) // 8, (items + 7) // 8
    rows = 6
    value = rng.integers(0, 256, (rows, vb1 + vb2 + 4 * items), dtype=np.uint8)
    defs = rng.integers(0, 2, rows).astype(np.uint8)
    arena = np.concatenate([defs[:, None], value], axis=1).reshape(-1)
    enc = pb.CompressiveEncoding()
    enc.fixed_size_list.items_per_value = d1
    enc.fixed_size_list.has_validity = True
    inner = enc.fixed_size_list.values.fixed_size_list
    inner.items_per_value = d2
    inner.has_validity = True
    inner.values.flat.bits_per_value = 32
    cpu = fixed_size_list.unzip_per_value(enc.fixed_size_list, FixedWidthBlock(value.reshape(-1), 8 * value.shape[1], rows),
                                          DecodeContext("t.lance", 0))
    out_values = rows * 4 * items
    first_at, second_at = out_values + 5, out_values + 5 + rows * d1 + 3
    fixed_size = second_at + rows * items
    a = lambda *v: np.asarray(v, np.int64)  # noqa: E731
    work = {
        "rows": a(rows), "data": a(0), "size": a(arena.size), "index": a(-1), "iwidth": a(0), "stride": a(1 + value.shape[1]),
        "ctrl": a(1), "bits_def": a(1), "offb": a(0), "valb": a(value.shape[1]), "inv": a(0), "ninv": a(2), "rep_dst": a(-1),
        "def_dst": a(0), "val_dst": a(0), "items": a(rows), "visible": a(rows), "idim": a(d1), "item_dst": a(first_at),
        "idim2": a(items), "item_dst2": a(second_at),
    }
    fixed = cuda.to_device(np.full(fixed_size, 0xEE, np.uint8))
    levels = cuda.to_device(np.zeros(rows, np.uint16))
    slots = cuda.to_device(np.zeros(1, np.int64))
    fullzip_kernels.fullzip_walk(cuda.to_device(arena), work, np.zeros(2, np.bool_), levels, fixed, slots, slots)
    got = h(fixed)
    np.testing.assert_array_equal(got[:out_values], cpu.as_bytes())
    np.testing.assert_array_equal(got[first_at : first_at + rows * d1], cpu.fsl_validity[0].astype(np.uint8))
    np.testing.assert_array_equal(got[second_at:fixed_size], cpu.fsl_validity[1].astype(np.uint8))
    np.testing.assert_array_equal(got[out_values:first_at], 0xEE)  # nothing written between
    np.testing.assert_array_equal(got[first_at + rows * d1 : second_at], 0xEE)
    np.testing.assert_array_equal(h(levels), defs)
