# SPDX-License-Identifier: Apache-2.0
"""How a GPU read is cut into units (no GPU needed): one unit when it all fits; otherwise
units of at most half the budget (the next one is staged while one decodes), and of about
``UNIT_TARGET_BYTES`` when the budget is large, so that big reads have units to overlap."""

from __future__ import annotations

import pytest

from lance_gpu.gpu import read as gpu_read

MB = 1 << 20


def _frags(*sizes_per_fragment: list[int]) -> list:
    """Stand-in fragments whose field plans are their own size estimates."""
    out = []
    for sizes in sizes_per_fragment:
        fw = gpu_read._Frag(frag=None, rows=None)
        fw.gpu = {f"f{i}": size for i, size in enumerate(sizes)}
        out.append(fw)
    return out


@pytest.fixture(autouse=True)
def _estimate_is_the_plan(monkeypatch):
    monkeypatch.setattr(gpu_read, "_estimate", lambda fp, placed=False: fp)


def _sizes(frags, budget):
    return [[size for _k, size in unit] for unit in gpu_read._units(frags, gpu_read._unit_cap(frags, budget))]


def test_a_read_that_fits_is_one_unit():
    frags = _frags([10 * MB, 20 * MB], [30 * MB])
    assert _sizes(frags, 1 << 30) == [[10 * MB, 20 * MB, 30 * MB]]


def test_a_read_over_the_budget_uses_half_budget_units():
    frags = _frags([30 * MB, 30 * MB], [30 * MB, 30 * MB])
    units = _sizes(frags, 100 * MB)
    assert units == [[30 * MB], [30 * MB], [30 * MB], [30 * MB]]
    assert all(sum(u) <= 50 * MB for u in units)


def test_a_large_read_is_cut_near_the_target_size():
    target = gpu_read.UNIT_TARGET_BYTES
    frags = _frags([target // 4] * 8, [target // 4] * 8)
    units = _sizes(frags, 64 << 30)
    assert len(units) == 4 and all(sum(u) == target for u in units)


def test_a_plan_larger_than_the_cap_is_a_unit_of_its_own():
    frags = _frags([10 * MB, 500 * MB, 10 * MB])
    assert _sizes(frags, 100 * MB) == [[10 * MB], [500 * MB], [10 * MB]]


def test_units_keep_fragment_order():
    frags = _frags([40 * MB], [40 * MB], [40 * MB])
    flat = [(k, fp) for unit in gpu_read._units(frags, gpu_read._unit_cap(frags, 90 * MB)) for k, fp in unit]
    assert [k for k, _fp in flat] == [0, 1, 2]
