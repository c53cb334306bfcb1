# SPDX-License-Identifier: Apache-2.0
"""Reader for Lance file format 2.0 (pages encoded as ``lance.encodings.ArrayEncoding`` trees).

Entry point: :func:`read_field`.  One module per ``ArrayEncoding`` variant pylance writes
(or could write) in a 2.0 file, and :mod:`~lance_gpu.file.v2_0.registry` dispatching on
the oneof; this package registers the variants' decoders there.
"""

from lance_gpu.file.v2_0 import (
    binary,
    bitpacked,
    bitpacked_for_non_neg,
    constant,
    dictionary,
    fixed_size_binary,
    fixed_size_list,
    flat,
    fsst,
    nullable,
    packed_struct,
    registry,
)
from lance_gpu.file.v2_0 import list as list_enc
from lance_gpu.file.v2_0 import struct as struct_enc
from lance_gpu.file.v2_0.reader import read_field

for _kind, _decoder in (
    ("flat", flat.decode),
    ("nullable", nullable.decode),
    ("fixed_size_list", fixed_size_list.decode),
    ("binary", binary.decode),
    ("dictionary", dictionary.decode),
    ("fsst", fsst.decode),
    ("bitpacked", bitpacked.decode),
    ("bitpacked_for_non_neg", bitpacked_for_non_neg.decode),
    ("constant", constant.decode),
    ("fixed_size_binary", fixed_size_binary.decode),
    ("packed_struct", packed_struct.decode),
    # Column-level variants: only the top of a list offsets / struct header column, which
    # the field reader handles; met inside a page they mean a corrupt file.
    ("list", list_enc.decode),
    ("struct", struct_enc.decode),
):
    registry.register(_kind, _decoder)

__all__ = ["read_field"]
