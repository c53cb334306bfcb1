# SPDX-License-Identifier: Apache-2.0
"""Fsst: ``binary`` (a Binary of compressed strings) and ``symbol_table``.

The symbol table is the one of format 2.1 (see the notes, section 6): a u64 header (magic
"FSST", encoder switch, n_symbols), the symbols, then their lengths.  The inner Binary is
decoded for the wanted rows (compressed offsets, nulls through its null adjustment) and
the compressed strings are expanded with :func:`cuda_kernels.fsst.fsst_decode`.
"""

from __future__ import annotations

from lance_gpu.file.encodings.fsst import SymbolTable
from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import Var, split_validity, Nullable
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    table = SymbolTable(bytes(msg.symbol_table), src.ctx)
    inner = registry.decode(msg.binary, src, start, stop, arrow_type)
    block, validity = split_validity(inner)
    if not isinstance(block, Var):
        raise src.ctx.corrupt("Fsst must wrap a Binary encoding")
    if table.compressed and block.n:
        from cuda_kernels.errors import CorruptInputError
        from cuda_kernels.fsst import fsst_decode

        try:
            offsets, data, utf8_valid = fsst_decode(
                table.symbols, table.lengths, block.data, block.offsets, n_symbols=table.n_symbols, utf8=True
            )
        except CorruptInputError as exc:
            raise src.ctx.corrupt(f"FSST data ({exc})") from exc
        # the decoder built the offsets and validated the strings as it wrote them
        block = Var(offsets.astype("int64", copy=False), data, True, utf8_valid)
    return block if validity is None else Nullable(block, validity)
