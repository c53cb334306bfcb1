# SPDX-License-Identifier: Apache-2.0
"""Device decode of RLE: the runs of many RLE chunks expanded in one launch.

This package's decode kernels live here; :mod:`.device` holds its device encoder, the
package itself its CPU decode and :mod:`.gpu_plan` its device planning (where each chunk's
runs lie, registered in :data:`lance_gpu.file.encodings.ENCODINGS`).

* :func:`rle_chunks` -- one thread per run writes its copies at the run's start (an
  exclusive scan of the run lengths); each chunk's runs are checked to add up to its value
  count on the device (nothing read back).

Written in the ``cuda_kernels._target`` style (plain-Python cores bound at compile time,
so they run on a GPU and under the numba CUDA simulator alike); nothing here imports CUDA
until a kernel is first compiled.  One launch covers every chunk; bad input ORs a bit
into the device error flag (``cuda_kernels.errors``) instead of reading out of bounds.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels import _device
from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from cuda_kernels.errors import ERR_OUT_OF_BOUNDS, new_error_flag, raise_if_flagged

cuda = LAZY_CUDA

__all__ = ["rle_chunks"]


@gpu_kernel
def _rle_chunks_kernel(values, runs, run_starts, first_run, first, nchunks, nruns, out, err):
    """Thread ``i < nruns`` writes run ``i`` (``runs[i]`` copies of ``values[i]``) at
    ``out[run_starts[i]:]`` (32-bit thread number and count, unsigned positions: no
    negative-index fix-up); thread ``i <= nchunks`` checks that chunk ``i``'s runs start
    where its values do (``run_starts[first_run[i]] == first[i]``; ``i == nchunks``: all the
    runs end where the last chunk's values do)."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i <= nchunks:
        if np.int64(run_starts[np.int64(first_run[i])]) != np.int64(first[i]):
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    if i < nruns:
        lo = np.int64(run_starts[i])
        n = np.uint32(runs[i])
        if lo < 0 or lo + n > out.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        v = values[i]
        o = np.uint64(lo)
        j = np.uint32(0)
        while j < n:
            out[o + j] = v
            j = np.uint32(j + 1)


def rle_chunks(values, runs, first_run: np.ndarray, first: np.ndarray, out) -> None:
    """Expand the runs of many RLE chunks into ``out`` (``first[-1]`` items), in one scan
    and one launch, nothing read back.

    ``values`` / ``runs`` (uint8 lengths): every chunk's runs, concatenated on the device;
    ``first_run`` / ``first``: host int64 prefixes of the chunks' run and value counts.  A
    chunk whose runs do not add up to its value count flags ``ERR_OUT_OF_BOUNDS`` (and no
    run is written past ``out``).
    """
    nruns = int(first_run[-1])
    nchunks = int(first_run.size - 1)
    run_starts = _device.exclusive_scan_device(runs[:nruns])
    err = new_error_flag()
    blocks, tpb = _device.launch_dims(max(nruns, nchunks + 1))
    _rle_chunks_kernel.get()[blocks, tpb](
        values, runs, run_starts, _device.to_device(first_run), _device.to_device(first), np.int64(nchunks), np.int64(nruns), out, err,
    )
    raise_if_flagged(err, "RLE runs do not add up to their chunks' value counts")
