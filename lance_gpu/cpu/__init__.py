# SPDX-License-Identifier: Apache-2.0
"""The CPU backend: numba-compiled loops for the format-specific parts of decoding."""
