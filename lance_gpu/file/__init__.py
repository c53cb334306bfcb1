# SPDX-License-Identifier: Apache-2.0
"""The Lance v2 file container (footer, column and page metadata, buffers) and its page
encodings: :mod:`.container` and :mod:`.reader` read files, :mod:`.encodings`, :mod:`.v2_0`
and :mod:`.v2_1` decode their pages on the CPU, :mod:`.arrow` assembles Arrow arrays."""
