# SPDX-License-Identifier: Apache-2.0
"""Count what the read path's copy kernels compile to, without a GPU: PTX (sm_90) census.

Each kernel is compiled with numba-cuda's ``compile_ptx`` (patched to target sm_90, as
``tests/kernels/ptx_compile_check.py`` does; needs libNVVM, not a device) and its PTX is
counted:

* global loads and stores by width (``ld.global.u8`` moves one byte, ``ld.global.u64`` eight,
  ``ld.global.v2.u64`` sixteen), over the whole kernel and in its innermost loops;
* over the whole kernel (static: every branch counted once): instructions, 64-bit and
  32-bit integer operations;
* in the innermost loops (a label and the last backward branch to it, with no other loop
  inside): instructions, 64-bit integer operations (``add/sub/mul/mad/shl/shr/and/or/setp``...
  on ``.s64/.u64/.b64``) and 32-bit ones;
* registers per thread, where ``ptxas`` is on the PATH (it assembles for sm_90; a PTX
  ``.version`` newer than it knows is lowered to its own: the kernels use nothing newer).

The loops are what a thread executes per byte or word copied, so "instructions per byte" of a
copy loop is its instruction count over the bytes its loads move.  A second table counts the
bit unpack's rows of a whole block per word size and width (:func:`leaf_table`): what one
thread runs for a block of that width, per value stored.  Usage::

    python3 benchmarks/ptx_census.py            # a markdown table on stdout
    python3 benchmarks/ptx_census.py --dump DIR # and each kernel's PTX into DIR
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)  # the real target, not the simulator
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_kernels._target import LAZY_CUDA  # noqa: E402 - after the path
from cuda_kernels.bitunpack import _fl_full_block  # noqa: E402, F401 - the leaf probe's global

cuda = LAZY_CUDA

_MEM = re.compile(r"^\s*(?:@%p\d+\s+)?(ld|st)\.global(?:\.nc)?\.((?:v[24]\.)?[usb](?:8|16|32|64))\b")
_INT = re.compile(r"^\s*(?:@%p\d+\s+)?(add|sub|mul|mad|shl|shr|and|or|xor|setp\.\w+|selp|min|max|neg|div|rem|cvt\.\w+)\S*\.([usb])(32|64)\b")
_LABEL = re.compile(r"^(\$L__\w+):")
_BRA = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")


def _width_bytes(kind: str) -> int:
    vec = 1
    if kind.startswith("v"):
        vec = int(kind[1])
        kind = kind[3:]
    return vec * int(kind[1:]) // 8


def _returns(lines: list[str], i: int) -> bool:
    """Whether the block at label line ``i`` is a bare ``ret`` (a branch back to it is an
    early exit, not a loop)."""
    nxt = next((ln.strip() for ln in lines[i + 1 :] if ln.strip()), "")
    return nxt == "ret;"


def innermost_loops(lines: list[str]) -> list[tuple[int, int]]:
    """``(first, last)`` line ranges of the innermost loops: a label and the last backward
    branch to it, containing no other such range (branches to a bare ``ret`` are exits)."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line)) and not _returns(lines, i)}
    loops: dict[str, tuple[int, int]] = {}
    for j, line in enumerate(lines):
        m = _BRA.search(line)
        if m and m.group(1) in labels and labels[m.group(1)] < j:
            loops[m.group(1)] = (labels[m.group(1)], j)
    spans = sorted(loops.values())
    return [a for a in spans if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in spans)]


def census(ptx: str) -> dict:
    """The counts of one kernel's PTX (module docstring)."""
    lines = ptx.splitlines()
    whole: Counter[str] = Counter()
    ops: Counter[int] = Counter()
    body = 0
    for line in lines:
        if m := _MEM.match(line):
            whole[f"{m.group(1)}.{m.group(2)}"] += 1
        elif m := _INT.match(line):
            ops[int(m.group(3))] += 1
        s = line.strip()
        body += bool(line.startswith("\t") and s and not s.startswith(("//", ".", "$", "{", "}")))
    loops = []
    for a, b in innermost_loops(lines):
        mem: Counter[str] = Counter()
        ints: Counter[int] = Counter()
        n = 0
        moved = 0
        for line in lines[a + 1 : b + 1]:
            s = line.strip()
            if not s or s.startswith(("$", "//", "{", "}")):
                continue
            n += 1
            if m := _MEM.match(line):
                mem[f"{m.group(1)}.{m.group(2)}"] += 1
                if m.group(1) == "st":
                    moved += _width_bytes(m.group(2))
            elif m := _INT.match(line):
                ints[int(m.group(3))] += 1
        loops.append({"lines": (a, b), "instructions": n, "mem": dict(mem), "int64": ints[64], "int32": ints[32], "stored": moved})
    return {"mem": dict(whole), "loops": loops, "instructions": body, "int64": ops[64], "int32": ops[32]}


def registers(ptx: str) -> int | None:
    """Registers per thread ``ptxas -arch=sm_90`` gives the kernel (None without ptxas)."""
    if shutil.which("ptxas") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        for _attempt in range(2):
            src.write_text(ptx)
            proc = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
                                  capture_output=True, text=True, timeout=300, check=False)
            out = proc.stdout + proc.stderr
            if m := re.search(r"Used (\d+) registers", out):
                return int(m.group(1))
            if m := re.search(r"current version is '([\d.]+)'", out):
                ptx = re.sub(r"^\.version [\d.]+", f".version {m.group(1)}", ptx, count=1, flags=re.M)
                continue
            return None
    return None


def _kernels():
    """``(label, kernel, constants, example arguments)`` of the kernels counted."""
    import numpy as np

    from cuda_kernels import bitunpack, fsst, gather, levels, pieces, rle, segments
    from lance_gpu.file.encodings.dictionary import decode_kernels as dictionary_kernels
    from lance_gpu.file.encodings.rle import decode_kernels as rle_kernels

    z = np.zeros
    i32, i64, u8 = np.int32, np.int64, np.uint8
    u16, u32, u64 = np.uint16, np.uint32, np.uint64
    words = (z(1, u64), i64(0), z(1, u64), i64(0))  # segments.word_view of the source and the destination
    unpack = [
        (f"bitunpack._unpack_scatter_kernel T={t}", bitunpack._unpack_scatter_kernel, {"T": t},
         (z(4, dt), z(2, i64), z(2, i64), z(2, i64), z(2, i64), z(9, dt), z(1, i32)))
        for t, dt in ((8, u8), (16, np.uint16), (32, u32), (64, u64))
    ]
    return [
        *unpack,
        ("rle._expand_kernel", rle._expand_kernel, {}, (z(3, u32), z(4, i64), z(9, u32))),
        ("rle decode_kernels._rle_chunks_kernel", rle_kernels._rle_chunks_kernel, {},
         (z(4, u32), z(4, u8), z(4, i64), z(3, i64), z(3, i64), i64(2), i64(4), z(9, u32), z(1, i32))),
        ("dictionary decode_kernels._dictionary_spans_kernel", dictionary_kernels._dictionary_spans_kernel, {},
         (z(4, u32), z(3, u32), u32(2), u32(4), i64(0), *[z(2, i64)] * 6, z(9, u8), z(4, i64), z(4, i64), z(4, i64), z(4, i64), z(1, i32), z(1, u64), i64(0))),
        # the pieces' segmented kernels (a thread per destination word / offset / byte / row)
        ("pieces._bitmask_kernel", pieces._bitmask_kernel, {},
         (z(9, u8), *[z(2, i64)] * 5, z(3, i64), i64(2), i64(4), z(4, u32), z(2, i64), z(1, i32))),
        ("pieces._gather_bits_segments_kernel", pieces._gather_bits_segments_kernel, {},
         (z(9, u8), z(4, i64), *[z(2, i64)] * 6, z(3, i64), i64(2), i64(4), z(4, u32), z(2, i64), z(1, i32))),
        ("pieces._and_bits_kernel", pieces._and_bits_kernel, {},
         (z(4, u32), *[z(2, i64)] * 3, z(3, i64), i64(2), i64(4), z(2, i64), z(1, i32))),
        ("pieces._rebase_kernel", pieces._rebase_kernel, {},
         (z(4, i64), *[z(2, i64)] * 5, z(3, i64), i64(2), i64(4), z(4, i32), i64(1), z(4, i64), z(2, i64), z(4, i64), z(2, i64),
          z(1, i32))),
        ("pieces._gather_rows_segments_kernel", pieces._gather_rows_segments_kernel, {},
         (z(9, u8), z(4, i64), *[z(2, i64)] * 4, z(3, i64), i64(2), i64(4), z(9, u8), z(1, i32))),
        ("pieces._gather_var_segments_kernel", pieces._gather_var_segments_kernel, {},
         (z(5, i64), z(9, u8), z(4, i64), z(4, i64), *[z(2, i64)] * 5, z(3, i64), i64(2), i64(4), i64(1), z(9, u8), z(1, i32))),
        # the level unravel's launches over segments, and the restart check
        ("levels._unravel_segments_flags_kernel", levels._unravel_segments_flags_kernel, {},
         (z(9, u16), z(40, i64), i64(0), i64(9), i64(12), i64(30), i64(1), i64(9), z(18, i32), z(4, u32), z(5, i64), i64(4))),
        ("levels._unravel_segments_scatter_kernel", levels._unravel_segments_scatter_kernel, {},
         (z(9, u16), z(40, i64), i64(0), i64(9), i64(12), i64(30), i64(1), i64(9), z(19, i64), z(9, i64), z(4, u32),
          z(5, i64), i64(2), z(4, i32), z(4, u32), z(4, i32), z(4, u32), i64(20), i64(30), i64(1), i64(16),
          z(4, i64), z(2, i64), z(3, i32), i64(5))),
        ("levels._restart_check_kernel", levels._restart_check_kernel, {},
         (z(9, u16), z(2, i64), z(2, i64), z(3, i64), i64(2), i64(4), z((2, 3), i64), z(2, i64), z(1, i32), z(1, i64))),
        ("gather._gather_kernel", gather._gather_kernel, {}, (z(3, u32), z(4, u32), z(4, u32), z(1, i32))),
        ("segments._copy_kernel", segments._copy_kernel, {},
         (z(9, u8), z(2, i64), z(9, u8), z(2, i64), z(3, i64), i64(2), i64(3), i64(16), z(1, i32), *words)),
        ("segments._fill_kernel", segments._fill_kernel, {},
         (z(9, u8), z(2, i64), z(9, u8), z(2, i64), z(2, i64), z(3, i64), i64(2), i64(3), i64(16), z(1, i32), z(1, u64), i64(0))),
        ("gather._binary_copy_kernel (thread per item)", gather._binary_copy_kernel, {},
         (z(4, i64), z(9, u8), z(4, i64), z(5, i64), z(9, u8), *words)),
        ("gather._binary_copy_warps_kernel (warp per item)", gather._binary_copy_warps_kernel, {},
         (z(4, i64), z(9, u8), z(4, i64), z(5, i64), z(9, u8), *words)),
        # the segmented FSST passes (tables in the arena; spans of the compressed strings)
        ("fsst._seg_lengths_kernel (pass 1)", fsst._seg_lengths_kernel, {},
         (z(2 * fsst.TABLE_BYTES, u8), z(2, i64), z(2, i64), z(9, u8), z(3, i64), z(3, i64), z(2, i64), z(2, i64), z(2, i64),
          z(3, i64), z(1, i32))),
        ("fsst._seg_decode_kernel (pass 2)", fsst._seg_decode_kernel, {},
         (z(2 * fsst.TABLE_BYTES, u8), z(2, i64), z(9, u8), z(3, i64), z(3, i64), z(2, i64), z(2, i64), z(2, i64), z(4, i64),
          z(9, u8), z(1, u64), i64(0), z(1, i32))),
    ]


def _leaf_probe(words, base, out, d):
    """One thread's rows of a whole block of width ``W`` (a compile-time constant, so the
    width switch folds to the one leaf): what the scatter unpack runs per block of that width."""
    _fl_full_block(W, np.uint32(0), words, base, np.uint32(cuda.threadIdx.x), out, d)  # noqa: F821


def leaf_table(compile_ptx, rebind) -> list[str]:
    """Markdown rows: per word size and width, the instructions, loads and stores of the
    unpack's per-thread rows of a whole block, and instructions per value stored
    (straight-line leaves up to ``SPECIALISED_MAX_T`` bits: what runs; above, the generic
    loop's body, static: the rows' load branches counted whether taken or not)."""
    import numba
    import numpy as np

    from cuda_kernels import bitunpack

    rows = ["| words | width | instructions | loads | stores | values per thread | instructions per value | int64 / int32 ops |",
            "|---|---|---|---|---|---|---|---|"]
    for t, dt in ((8, np.uint8), (16, np.uint16), (32, np.uint32), (64, np.uint64)):
        for w in sorted({1, 3, t // 2 + 1, t - 1, t}):
            example = (np.zeros(4, dt), np.int64(0), np.zeros(4, dt), np.uint64(0))
            ptx, _ = compile_ptx(rebind(_leaf_probe, "gpu", {"T": t, "W": w}), tuple(numba.typeof(a) for a in example), cc=(9, 0))
            lines = [ln for ln in ptx.splitlines() if ln.startswith("\t") and not ln.strip().startswith(("//", "."))]
            body = [ln for ln in lines if not ln.strip().startswith(("ld.param", "ret", "mov.u32 \t%r", "cvta"))]
            mem = Counter(m.group(1) for ln in body if (m := _MEM.match(ln)))
            ints = Counter(m.group(3) for ln in body if (m := _INT.match(ln)))
            values = t if t <= 32 else 32
            # a loop (wider words): its static count per store, both branches of each row counted
            loops = "" if t <= bitunpack.SPECIALISED_MAX_T else " (loop, static)"
            rows.append(f"| {t} | {w} | {len(body)}{loops} | {mem['ld']} | {mem['st']} | {values} | {len(body) / mem['st']:.1f} | "
                        f"{ints['64']} / {ints['32']} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, help="write each kernel's PTX into this folder")
    ap.add_argument("--only", help="count only the kernels whose label contains this text (no leaf table)")
    args = ap.parse_args(argv)
    import numba
    import numba.cuda.dispatcher as disp
    from numba import cuda

    class _Sm90:
        compute_capability = (9, 0)

    disp.get_current_device = lambda: _Sm90()
    from cuda_kernels._target import _rebind

    print("| kernel | registers | instructions, int64 / int32 ops (whole kernel, static) | global loads (whole kernel) | global stores | "
          "innermost loops: instructions, loads / stores, int64 / int32 ops, bytes stored |")
    print("|---|---|---|---|---|---|")
    for label, kernel, consts, example in _kernels():
        if args.only and args.only not in label:
            continue
        sig = tuple(numba.typeof(a) for a in example)
        ptx, _ = cuda.compile_ptx(_rebind(kernel.py, "gpu", consts), sig, cc=(9, 0))
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{label.split()[0]}.ptx").write_text(ptx)
        c = census(ptx)
        loads = ", ".join(f"{n} {k[3:]}" for k, n in sorted(c["mem"].items()) if k.startswith("ld"))
        stores = ", ".join(f"{n} {k[3:]}" for k, n in sorted(c["mem"].items()) if k.startswith("st"))
        loops = "; ".join(
            f"{lp['instructions']} instr, {' '.join(f'{n}x{k}' for k, n in sorted(lp['mem'].items())) or 'no memory'}, "
            f"{lp['int64']}/{lp['int32']}, {lp['stored']} B"
            for lp in c["loops"]
        )
        print(f"| {label} | {registers(ptx) or '?'} | {c['instructions']}, {c['int64']} / {c['int32']} | {loads} | {stores} | {loops} |")
    if not args.only:
        print()
        print("\n".join(leaf_table(cuda.compile_ptx, _rebind)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
