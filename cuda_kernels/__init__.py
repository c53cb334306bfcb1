"""Format-agnostic decode primitives for the CPU (numba ``njit``) and the GPU (numba-cuda).

Every primitive's core is a plain Python function compiled once per target
(:mod:`cuda_kernels._target`): ``numba.njit`` drivers loop over it on the CPU,
``cuda.jit`` kernels map it onto threads on the GPU.  The package knows nothing
about Lance or protobuf.

``import cuda_kernels`` never imports CUDA: GPU kernels are compiled (and
cached) on first use of a ``*_gpu`` function, and CPU drivers are compiled
lazily on first call (and cached on disk).

Modules:

* :mod:`~cuda_kernels.bitunpack` -- FastLanes bit (un)packing.
* :mod:`~cuda_kernels.fsst` -- FSST string decoding.
* :mod:`~cuda_kernels.rle` -- run-length expansion.
* :mod:`~cuda_kernels.gather` -- dictionary gather (fixed and variable width).
* :mod:`~cuda_kernels.levels` -- rep/def levels <-> validity and offsets, bitmaps.
* :mod:`~cuda_kernels.compact` -- deletion masks and stream compaction.
* :mod:`~cuda_kernels.segments` -- batched (segmented) copies, fills and index
  arithmetic, so that one launch serves many pages.
* :mod:`~cuda_kernels.utf8` -- validation of variable-width offsets and UTF-8 bytes.
* :mod:`~cuda_kernels.distance` -- vector distance tiles and a running top-k (exact
  nearest-neighbour search; GPU only, imported by name).
* :mod:`~cuda_kernels.errors` -- :class:`CorruptInputError` and the device error flag.
"""

from .bitunpack import (
    pack_blocks,
    unpack_blocks,
    unpack_blocks_gpu,
    unpack_blocks_scatter,
    unpack_blocks_scatter_gpu,
)
from .compact import (
    compact_binary,
    compact_binary_gpu,
    compact_fixed,
    compact_fixed_gpu,
    keep_mask_from_deleted,
    keep_mask_from_deleted_gpu,
)
from .errors import CorruptInputError
from .fsst import (
    fsst_decode,
    fsst_decode_gpu,
    fsst_decode_segments,
    fsst_decode_segments_gpu,
    fsst_lengths_segments_gpu,
    pack_tables,
)
from .gather import gather_binary, gather_binary_gpu, gather_fixed, gather_fixed_gpu
from .levels import (
    ALL_VALID_ITEM,
    ALL_VALID_LIST,
    EMPTYABLE_LIST,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
    LayerResult,
    LevelSegment,
    Raveled,
    RaveledGpu,
    Unraveled,
    bitmap_to_validity,
    bitmap_to_validity_gpu,
    check_restarts_segments_gpu,
    ravel_levels,
    ravel_levels_gpu,
    unravel_levels,
    unravel_levels_gpu,
    unravel_segments_gpu,
    validity_to_bitmap,
    validity_to_bitmap_gpu,
)
from .rle import rle_expand, rle_expand_gpu
from .segments import (
    add_segment_base,
    add_segment_base_gpu,
    bits_to_bytes,
    bits_to_bytes_gpu,
    copy_ranges,
    copy_ranges_gpu,
    expand_ranges,
    expand_ranges_gpu,
    fill_patterns,
    fill_patterns_gpu,
    remap_segments,
    remap_segments_gpu,
    take_ranges,
    take_ranges_gpu,
)
from .utf8 import check_variable, check_variable_segments_gpu

__all__ = [
    "CorruptInputError",
    # bitunpack
    "unpack_blocks",
    "unpack_blocks_gpu",
    "pack_blocks",
    "unpack_blocks_scatter",
    "unpack_blocks_scatter_gpu",
    # fsst
    "fsst_decode",
    "fsst_decode_gpu",
    "fsst_decode_segments",
    "fsst_lengths_segments_gpu",
    "fsst_decode_segments_gpu",
    "pack_tables",
    # rle
    "rle_expand",
    "rle_expand_gpu",
    # gather
    "gather_fixed",
    "gather_fixed_gpu",
    "gather_binary",
    "gather_binary_gpu",
    # levels
    "ALL_VALID_ITEM",
    "ALL_VALID_LIST",
    "NULLABLE_ITEM",
    "NULLABLE_LIST",
    "EMPTYABLE_LIST",
    "NULL_AND_EMPTY_LIST",
    "LayerResult",
    "Unraveled",
    "Raveled",
    "unravel_levels",
    "unravel_levels_gpu",
    "LevelSegment",
    "unravel_segments_gpu",
    "check_restarts_segments_gpu",
    "ravel_levels",
    "ravel_levels_gpu",
    "RaveledGpu",
    "validity_to_bitmap",
    "validity_to_bitmap_gpu",
    "bitmap_to_validity",
    "bitmap_to_validity_gpu",
    # compact
    "keep_mask_from_deleted",
    "keep_mask_from_deleted_gpu",
    "compact_fixed",
    "compact_fixed_gpu",
    "compact_binary",
    "compact_binary_gpu",
    # segments
    "copy_ranges",
    "copy_ranges_gpu",
    "fill_patterns",
    "fill_patterns_gpu",
    "bits_to_bytes",
    "bits_to_bytes_gpu",
    "expand_ranges",
    "expand_ranges_gpu",
    "take_ranges",
    "take_ranges_gpu",
    "add_segment_base",
    "add_segment_base_gpu",
    "remap_segments",
    "remap_segments_gpu",
    # utf8
    "check_variable",
    "check_variable_segments_gpu",
]
