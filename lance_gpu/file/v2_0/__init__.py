# SPDX-License-Identifier: Apache-2.0
"""Reader for Lance file format 2.0 (pages encoded as ``lance.encodings.ArrayEncoding`` trees).

Entry point: :func:`read_field`.  One module per ``ArrayEncoding`` variant pylance writes
(or could write) in a 2.0 file, and :mod:`~lance_gpu.file.v2_0.registry` dispatching on
the oneof.
"""

from lance_gpu.file.v2_0.reader import read_field

__all__ = ["read_field"]
