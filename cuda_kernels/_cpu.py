"""CPU-only helpers for the njit loops: unaligned little-endian 64-bit loads and stores,
and read-only views of the arrays drivers only read (:func:`read_only`).

numba gives byte arrays no unaligned wide access, and LLVM does not merge eight byte
stores into one.  These intrinsics emit a single ``load``/``store`` of ``i64`` with
alignment 1 at ``arr.data + pos``.  They do no bounds checking: callers guarantee
``0 <= pos`` and ``pos + 8 <= arr.size``.  x86-64 and AArch64 are little-endian, so the
first byte in memory is the low byte of the value (as FSST symbols are stored).

Both are :class:`~cuda_kernels._jitcache.LazyIntrinsic`: numba and llvmlite are imported,
and the intrinsics built, by the first compile of a kernel that uses them, not when this
module is imported.
"""

import sys

from ._jitcache import lazy_intrinsic

if sys.byteorder != "little":  # pragma: no cover - no big-endian targets
    raise ImportError("cuda_kernels._cpu assumes a little-endian host")

__all__ = ["load_u64", "read_only", "store_u64"]


def read_only(a):
    """A read-only view of ``a`` (``a`` itself when it already is): one array flavour for
    the compiled drivers of arguments they only read, which come both from read-only file
    maps and from writable decode buffers (numba compiles, and the ahead-of-time module
    exports, per flavour)."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


def _byte_pointer(context, builder, arrty, arr, pos):
    from llvmlite import ir

    ary = context.make_array(arrty)(context, builder, arr)
    ptr = builder.gep(ary.data, [pos])
    return builder.bitcast(ptr, ir.IntType(64).as_pointer())


def _is_c_bytes(arr) -> bool:
    from numba.core import types

    return isinstance(arr, types.Array) and arr.dtype == types.uint8 and arr.layout == "C"


@lazy_intrinsic
def store_u64():
    """``arr[pos:pos + 8] = value.to_bytes(8, "little")`` for a C-contiguous uint8 array."""
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def store_u64(typingctx, arr, pos, value):
        if not _is_c_bytes(arr):
            return None
        sig = types.void(arr, types.int64, types.uint64)

        def codegen(context, builder, signature, args):
            ptr = _byte_pointer(context, builder, signature.args[0], args[0], args[1])
            builder.store(args[2], ptr, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return store_u64


@lazy_intrinsic
def load_u64():
    """``int.from_bytes(arr[pos:pos + 8], "little")`` for a C-contiguous uint8 array."""
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def load_u64(typingctx, arr, pos):
        if not _is_c_bytes(arr):
            return None
        sig = types.uint64(arr, types.int64)

        def codegen(context, builder, signature, args):
            ptr = _byte_pointer(context, builder, signature.args[0], args[0], args[1])
            return builder.load(ptr, align=1)

        return sig, codegen

    return load_u64
