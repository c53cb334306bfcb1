# SPDX-License-Identifier: Apache-2.0
"""What a sampler decides and the training feed reads: :class:`Read`\\ s in order, in a :class:`Plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Plan", "Read"]


@dataclass(frozen=True, slots=True)
class Read:
    """Live rows ``[start, stop)`` of the fragment at position ``pos``; ``flush`` ends a batch
    after these rows (a batch sampler's unit)."""

    pos: int
    start: int
    stop: int
    flush: bool = False


@dataclass(slots=True)
class Plan:
    reads: list[Read]
    stride: tuple[int, int] | None = None  # (first, step) over the filtered row stream
    units: list[Any] = field(default_factory=list)
