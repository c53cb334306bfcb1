# SPDX-License-Identifier: Apache-2.0
"""Shared test configuration: the ``gpu`` marker skips cleanly where no GPU is usable."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from lance_gpu._device import gpu_unusable_reason

    reason = gpu_unusable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
