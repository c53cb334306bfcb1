# SPDX-License-Identifier: Apache-2.0
"""The Lance v2 file container (footer, column and page metadata, buffers) and its page
encodings: :mod:`.container` and :mod:`.reader` read files, :mod:`.encodings`, :mod:`.v2_0`
and :mod:`.v2_1` decode their pages on the CPU, :mod:`.arrow` assembles Arrow arrays."""

#: The file format version written when none is asked for (pylance 14.0.2's "stable").
STABLE_VERSION = "2.2"


def stable_version() -> str:
    """The file format version new datasets get by default (pylance's
    ``lance.file.stable_version``): ``"2.2"``."""
    return STABLE_VERSION
