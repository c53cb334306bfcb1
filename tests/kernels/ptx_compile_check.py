"""Compile every GPU kernel of cuda_kernels to PTX (sm_90) on a machine without a GPU.

Run by ``test_kernels_ptx.py`` in a subprocess (it patches numba-cuda so that
device functions, which normally ask the current device for its compute
capability, compile for sm_90).  Needs libNVVM / NVRTC (e.g. the
``nvidia-nvvm`` and ``nvidia-cuda-nvrtc`` wheels on ``LD_LIBRARY_PATH``); when
they cannot be loaded it prints ``PTX-SKIP`` and exits 0.

This catches what the CUDA simulator cannot: code that runs as Python but
does not type or lower for the real CUDA target.
"""

import sys

import numba
import numpy as np


def main():
    from numba import cuda

    import numba.cuda.dispatcher as disp

    class _Sm90:
        compute_capability = (9, 0)

    disp.get_current_device = lambda: _Sm90()

    def probe(a):
        a[0] = 1

    try:
        cuda.compile_ptx(probe, (numba.int64[:],), cc=(9, 0))
    except Exception as exc:  # no NVVM / NVRTC here
        print(f"PTX-SKIP {type(exc).__name__}: {str(exc)[:200]}")
        return 0

    from cuda_kernels import _device, bitunpack, compact, fsst, gather, levels, rle
    from cuda_kernels._target import _rebind

    z = np.zeros
    i32, i64, u8, u16, u64, b1 = np.int32, np.int64, np.uint8, np.uint16, np.uint64, np.bool_
    cases = []
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        t = np.dtype(dt).itemsize * 8
        # unpack_blocks_gpu: the scatter kernel with the caller's offset and width dtypes
        cases.append((bitunpack._unpack_scatter_kernel, {"T": t}, (z(4, dt), z(2, i64), z(2, u8), z(2, i64), z(2, i64), z(9, dt), z(1, i32))))
        cases.append((bitunpack._unpack_scatter_kernel, {"T": t}, (z(4, dt), z(2, i32), z(2, i64), z(2, i64), z(2, i64), z(9, dt), z(1, i32))))
    cases += [
        (_device._fill_kernel, {}, (z(3, i64), i64(0))),
        (_device._fill_kernel, {}, (z(3, b1), b1(True))),
        (fsst._lengths_kernel, {}, (z(256, u8), i64(3), z(9, u8), z(3, i64), z(2, i64), z(1, i32))),
        (fsst._lengths_kernel, {}, (z(256, u8), i64(3), z(9, u8), z(3, i32), z(2, i64), z(1, i32))),
        (fsst._decode_kernel, {}, (z(256, u64), z(256, u8), z(9, u8), z(3, i64), z(3, i64), z(9, u8))),
        (fsst._decode_kernel, {}, (z(256, u64), z(256, u8), z(9, u8), z(3, i32), z(3, i64), z(9, u8))),
        (rle._expand_kernel, {}, (z(3, np.float64), z(4, i64), z(9, np.float64))),
        (rle._expand_kernel, {}, (z(3, b1), z(4, i64), z(9, b1))),
        (gather._gather_kernel, {}, (z(3, np.float32), z(4, np.uint32), z(4, np.float32), z(1, i32))),
        (gather._gather_rows_kernel, {}, (z((3, 16), u8), z(4, i64), z((4, 16), u8), z(1, i32))),
        (gather._binary_lengths_kernel, {}, (z(4, i32), i64(9), z(4, i64), z(4, i64), z(1, i32))),
        # the binary gather's copies: a thread or a warp per item, through the byte arrays' word views
        (gather._binary_copy_kernel, {}, (z(4, i64), z(9, u8), z(4, i64), z(5, i64), z(9, u8), z(1, u64), i64(0), z(1, u64), i64(0))),
        (gather._binary_copy_warps_kernel, {}, (z(4, i64), z(9, u8), z(4, i64), z(5, i64), z(9, u8), z(1, u64), i64(0), z(1, u64), i64(0))),
        (compact._clear_deleted_kernel, {}, (z(4, i64), i64(9), z(9, b1), z(1, i32))),
        (compact._scatter_kept_kernel, {}, (z(9, b1), z(10, i64), z(9, i64))),
        (
            levels._unravel_flags_kernel,
            {},
            (z(9, u16), True, z(9, u16), True, i64(9), z(2, i64), z(3, i64), i64(1), i64(2), z(18, i32), z(1, i32)),
        ),
        (
            levels._unravel_scatter_kernel,
            {},
            (
                z(9, u16), True, z(9, u16), True, i64(9), z(2, i64), z(3, i64), z(2, i64), z(2, i64), z(2, i64),
                z(19, i64), z(2, i64), z(2, i64), z(9, i64), z(9, b1),
            ),
        ),
        # the segmented unravel: every layer's validity as uint32 words (the flags launch sets
        # the words of layers with repetition levels, the scatter clears null bits atomically
        # and writes the owned words of the others whole, then gathers what is read back)
        (
            levels._unravel_segments_flags_kernel,
            {},
            (z(9, u16), z(40, i64), i64(0), i64(9), i64(12), i64(30), i64(1), i64(9), z(18, i32), z(4, np.uint32), z(5, i64), i64(4)),
        ),
        (
            levels._unravel_segments_scatter_kernel,
            {},
            (z(9, u16), z(40, i64), i64(0), i64(9), i64(12), i64(30), i64(1), i64(9), z(19, i64), z(9, i64), z(4, np.uint32),
             z(5, i64), i64(2), z(4, i32), z(4, np.uint32), z(4, i32), z(4, np.uint32), i64(20), i64(30), i64(1), i64(16),
             z(4, i64), z(2, i64), z(3, i32), i64(5)),
        ),
        (levels._to_bitmap_kernel, {}, (z(9, b1), i64(9), z(2, u8))),
        (levels._from_bitmap_kernel, {}, (z(2, u8), i64(0), z(9, b1))),
    ]
    cases += _pipeline_cases()
    cases += _search_cases()
    failed = 0
    for kernel, consts, args in cases:
        sig = tuple(numba.typeof(a) for a in args)
        try:
            cuda.compile_ptx(_rebind(kernel.py, "gpu", consts), sig, cc=(9, 0))
        except Exception as exc:
            failed += 1
            print(f"PTX-FAIL {kernel.__name__} {consts}: {type(exc).__name__}: {exc}")
    print(f"PTX {len(cases) - failed}/{len(cases)} kernels compiled")
    return 1 if failed else 0


def _pipeline_cases():
    """The batched kernels of cuda_kernels.segments, the scatter unpack, the segmented FSST
    passes, the GPU reader's kernels that know Lance layouts (each encoding's
    ``decode_kernels``, the full-zip walk and its page check) and the validity AND."""
    from cuda_kernels import bitunpack, chunkheaders, fsst, segments

    from lance_gpu.file.encodings.dictionary import decode_kernels as dictionary_kernels
    from lance_gpu.file.encodings.rle import decode_kernels as rle_kernels
    from lance_gpu.file.encodings.variable import decode_kernels as variable_kernels
    from lance_gpu.file.v2_1 import fullzip_kernels
    from lance_gpu.gpu import validity

    z = np.zeros
    i32, i64, u8, u16, u32, u64, b1 = np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_
    cases = []
    for dt in (u8, u16, u32, u64):
        t = np.dtype(dt).itemsize * 8
        cases.append((bitunpack._unpack_scatter_kernel, {"T": t}, (z(4, dt), z(2, i64), z(2, i64), z(2, i64), z(2, i64), z(9, dt), z(1, i32))))
    spans11 = [z(2, i64)] * 11
    cases += [
        # tables: pack_tables' arena (uint8, a table at each table_pos), then n_symbols per segment
        (
            fsst._seg_lengths_kernel,
            {},
            (z(2 * fsst.TABLE_BYTES, u8), z(2, i64), z(2, i64), z(9, u8), z(3, i64), z(3, i64), z(2, i64), z(2, i64), z(2, i64),
             z(3, i64), z(1, i32)),
        ),
        (
            fsst._seg_decode_kernel,
            {},
            (z(2 * fsst.TABLE_BYTES, u8), z(2, i64), z(9, u8), z(3, i64), z(3, i64), z(2, i64), z(2, i64), z(2, i64), z(4, i64),
             z(9, u8), z(1, i32)),
        ),
        (segments._copy_kernel, {}, (z(9, u8), z(2, i64), z(9, u8), z(2, i64), z(3, i64), i64(2), i64(3), i64(16), z(1, i32), z(1, u64), i64(0),
                                     z(1, u64), i64(1))),
        (segments._fill_kernel, {}, (z(9, u8), z(2, i64), z(9, u8), z(2, i64), z(2, i64), z(3, i64), i64(2), i64(3), i64(16), z(1, i32),
                                     z(1, u64), i64(0))),
        (segments._bits_kernel, {}, (z(9, u8), z(2, i64), z(9, u8), z(2, i64), z(3, i64), i64(2), i64(3), z(1, i32))),
        (segments._expand_kernel, {}, (z(2, i64), z(3, i64), i64(2), z(9, i64))),
        (segments._take_ranges_kernel, {}, (z(3, i64), z(2, i64), z(2, i64), z(2, i64), z(1, i32))),
        (segments._add_base_kernel, {}, (z(3, u16), z(3, i64), i64(2), z(2, i64), z(3, i64))),
        (segments._remap_kernel, {}, (z(3, u16), z(3, i64), i64(2), z((1, 4), u16), z(3, u16), z(1, i32))),
        (variable_kernels._variable_spans_kernel, {}, (z(9, u8), z(2, i64), z(2, i64), z(2, i64), z(3, i64), i64(2), z(2, i64), z(4, i64), z(4, i64), z(1, i32))),
        (fullzip_kernels._fullzip_count_kernel, {}, (z(9, u8), z(3, i64), i64(2), *spans11, z(4, b1), z(4, i64), z(4, i64), z(1, i32))),
        (
            fullzip_kernels._fullzip_fill_kernel,
            {},
            (z(9, u8), z(3, i64), i64(2), *spans11, z(4, b1), z(5, i64), z(5, i64), z(2, i64), z(2, i64), z(2, i64), z(2, i64), z(2, i64),
             z(2, i64), z(2, i64), z(9, u16), z(9, u8), z(4, i64), z(4, i64), z(1, i32)),
        ),
        (fullzip_kernels._fullzip_check_kernel, {}, (z(5, i64), z(5, i64), z(3, i64), i64(2), z(2, i64), z(2, i64), z(1, i32))),
        (validity._and_kernel, {}, (z(3, b1), z(3, b1), z(3, b1))),
        # the read pre-pass over mini-block chunk headers (level sections and inline blocks too)
        (chunkheaders._parse_kernel, {}, (z(9, u8), *[z(2, i64)] * 6, z((2, chunkheaders.OUT_COLUMNS), i64), z((2, 2), i64))),
    ]
    for idx in (u32, u64):
        cases.append(
            (
                dictionary_kernels._dictionary_spans_kernel,
                {},
                (z(4, idx), z(3, u32), u32(2), u32(4), i64(0), *[z(2, i64)] * 6, z(9, u8), z(4, i64), z(4, i64), z(4, i64), z(4, i64), z(1, i32), z(1, u64), i64(0)),
            )
        )
    for dt in (u8, u16, u32, u64):  # RLE runs expanded, per value width
        cases.append((rle_kernels._rle_chunks_kernel, {}, (z(4, dt), z(4, u8), z(4, i64), z(3, i64), z(3, i64), i64(2), i64(4), z(9, dt), z(1, i32))))
    from cuda_kernels import pieces

    # combining's gathers of rows by host-known positions (to_cudf of deletions, takes, filters)
    cases += [
        (pieces._gather_rows_segments_kernel, {}, (z(9, u8), z(4, i64), *[z(2, i64)] * 4, z(3, i64), i64(2), i64(9), z(9, u8), z(1, i32))),
        (
            pieces._gather_bits_segments_kernel,
            {},
            (z(9, u8), z(4, i64), *[z(2, i64)] * 6, z(3, i64), i64(2), i64(3), z(4, u32), z(2, i64), z(1, i32)),
        ),
        # a selection's string bytes by position (offsets and bytes of one allocation each)
        (
            pieces._gather_var_segments_kernel,
            {},
            (z(9, i64), z(9, u8), z(4, i64), z(4, i64), *[z(2, i64)] * 5, z(3, i64), i64(2), i64(4), i64(32), z(9, u8), z(1, i32)),
        ),
    ]
    for out in (i32, i64):  # offsets rebased, by range or by position, into either width
        cases.append(
            (
                pieces._rebase_kernel,
                {},
                (z(9, i64), *[z(2, i64)] * 5, z(3, i64), i64(2), i64(4), z(9, out), i64(1), z(4, i64), z(2, i64), z(4, i64), z(2, i64), z(1, i32)),
            )
        )
    from cuda_kernels import utf8

    for out in (i32, i64):  # the variable-width check, writing cuDF offsets in either width
        cases.append((utf8._check_segments_kernel, {}, (z(5, i64), z(9, u8), i64(9), z(13, i64), i64(2), z(1, i64), z(1, i32), i64(1), z(5, out))))
    return cases


def _search_cases():
    """The exact-search kernels of cuda_kernels.distance: distance tiles per metric and element
    type (into a strided window of the tile buffer too), keys, radix select, compaction."""
    from cuda_kernels import distance

    z = np.zeros
    i32, i64, u8, u32, u64, f16, f32, f64 = np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float16, np.float32, np.float64
    cases = []
    tile = {"TR": 32, "TQ": 8, "TD": 16, "TDP": 17}
    for metric, x_t, q_t, acc in ((0, f32, f32, f32), (1, f16, f32, f32), (2, f64, f64, f64), (3, u8, u8, f32), (1, f32, f32, f32)):
        for has_valid in (False, True):
            for null_zero in (False, True) if has_valid else (False,):
                consts = dict(tile, METRIC=metric, ACC=acc, HAS_VALID=has_valid, NULL_ZERO=null_zero)
                cases.append((distance._distance_tile_kernel, consts, (z((9, 4), x_t), z((2, 4), q_t), z(9, u8), z((2, 9), f32))))
        consts = dict(tile, METRIC=metric, ACC=acc, HAS_VALID=False, NULL_ZERO=False)
        cases.append((distance._distance_tile_kernel, consts, (z((9, 4), x_t), z((2, 4), q_t), z(9, u8), z((2, 20), f32)[:, 3:12])))
    for lower in (False, True):
        for upper in (False, True):
            cases.append((distance._keys_kernel, {"HAS_LOWER": lower, "HAS_UPPER": upper},
                          (z((2, 9), f32), z((2, 9), u32), i64(9), z(9, u32), f32(0), f32(1), z((2, 12), u64), i64(3))))
    cases += [
        (distance._copy_running_kernel, {}, (z((2, 3), u64), z((2, 12), u64))),
        (distance._segment_min_sum_kernel, {"HAS_VALID": True}, (z((2, 9), f32), z(4, i64), z(3, u8), z((1, 8), f32)[:, 2:5])),
        (distance._segment_min_sum_kernel, {"HAS_VALID": False}, (z((2, 9), f32), z(4, i64), z(3, u8), z((1, 3), f32))),
        (distance._count_kernel, {}, (z((2, 12), u64), z(2, i64))),
        (distance._hist_kernel, {}, (z((2, 12), u64), z(2, u64), i64(56), z((2, 256), i32))),
        (distance._pick_kernel, {}, (z((2, 256), i32), i64(56), z(2, i64), z(2, u64), z(2, i64), i64(3))),
        (distance._compact_kernel, {}, (z((2, 12), u64), z(2, u64), z(2, i64), i64(3), z((2, 3), u64), z(9, u64),
                                        z(2, i32), z((2, 3), u64), z((2, 3), u64))),
    ]
    return cases


if __name__ == "__main__":
    sys.exit(main())
