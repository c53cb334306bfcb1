# SPDX-License-Identifier: Apache-2.0
"""Device planning of Flat chunks (host side): a Flat{bits} chunk buffer, possibly under
FixedSizeList wrappers without validity, is ``count * items_per_value`` items of ``bits``
each, back to back; the device copies them (bytes) or spreads them (booleans, one bit each)."""

from __future__ import annotations


def fixed_items(enc) -> tuple[int, int] | None:
    """``(items per value, bits per item)`` of Flat or FixedSizeList(...Flat) without a
    validity bitmap or a compressed data section (None: another layout)."""
    dim = 1
    while enc.WhichOneof("compression") == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            return None
        dim *= int(fsl.items_per_value)
        enc = fsl.values
    if enc.WhichOneof("compression") != "flat" or enc.flat.HasField("data"):
        return None
    return dim, int(enc.flat.bits_per_value)


__all__ = ["fixed_items"]
