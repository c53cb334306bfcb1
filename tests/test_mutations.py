# SPDX-License-Identifier: Apache-2.0
"""Seeded mutation suite: damaged bytes in every kind of file never give wrong data or an
untyped error (see ``tests/mutation_runner.py`` for the rules and the machinery).

The CI run draws a few hundred cases from a fixed seed; ``-m slow`` runs a larger draw
(``LANCE_GPU_MUTATION_CASES`` / ``LANCE_GPU_MUTATION_SEED`` override count and seed).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from mutation_runner import build_datasets, make_cases, mutable_files, mutate, run_cases

SEED = int(os.environ.get("LANCE_GPU_MUTATION_SEED", "20261124"))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    pytest.importorskip("lance")
    return build_datasets(tmp_path_factory.mktemp("mutations"))


def _check(datasets: list[Path], count: int, seed: int, scratch: Path, total_timeout: float) -> None:
    cases = make_cases(datasets, count, seed)
    results = run_cases(cases, scratch, timeout=30.0, total_timeout=total_timeout)
    assert len(results) == len(cases)
    failures = [r for r in results if not r["ok"]]
    by_case = {c.id: c for c in cases}
    lines = [f"case {r['id']} ({by_case[r['id']].kind} in {by_case[r['id']].file} of {Path(by_case[r['id']].dataset).name}): {'; '.join(r['notes'])}" for r in failures]
    assert not failures, f"{len(failures)} of {len(cases)} mutation cases failed:\n" + "\n".join(lines[:40])
    # the suite must actually exercise the readers: most damage is caught, some is read through
    notes = Counter(n.split(": ", 1)[1].split(" ")[0] for r in results for n in r["notes"])
    assert notes["typed"] > len(cases), notes


def test_every_kind_of_file_is_covered(datasets: list[Path]) -> None:
    files = [f for uri in datasets for f in mutable_files(uri)]
    for kind in ("data/", "_versions/", "_transactions/"):
        assert any(f.startswith(kind) for f in files), kind
    assert any(f.endswith(".arrow") and f.startswith("_deletions/") for f in files)
    assert any(f.endswith(".bin") and f.startswith("_deletions/") for f in files)
    cases = make_cases(datasets, 240, SEED)
    assert {(c.dataset, c.file) for c in cases} == {(str(u), f) for u in datasets for f in mutable_files(u)}


def test_mutations_are_deterministic() -> None:
    raw = bytes(range(256)) * 8
    for kind in ("flip", "truncate", "zero", "swap"):
        a, b = mutate(raw, kind, 7), mutate(raw, kind, 7)
        assert a == b and a != raw, kind


def test_mutation_suite(datasets: list[Path], tmp_path: Path) -> None:
    """240 cases from a fixed seed (CI budget: about a minute)."""
    _check(datasets, int(os.environ.get("LANCE_GPU_MUTATION_CASES", "240")), SEED, tmp_path / "scratch", 600.0)


def test_large_draw_regressions(datasets: list[Path], tmp_path: Path) -> None:
    """Cases of the large draw that once failed, run in CI: a flipped bit in a data file that
    made one field of a struct decode to another row count than its sibling (a take
    raised ``ArrowInvalid``), and one in an ``.arrow`` deletion file's field name (not
    UTF-8: ``UnicodeDecodeError``)."""
    wanted = {494, 835}
    cases = [c for c in make_cases(datasets, 2000, SEED + 1) if c.id in wanted]
    results = run_cases(cases, tmp_path / "scratch", timeout=30.0, total_timeout=300.0)
    assert [r for r in results if not r["ok"]] == []
    assert all(any("typed" in n for n in r["notes"]) for r in results), results


@pytest.mark.slow
def test_mutation_suite_large(datasets: list[Path], tmp_path: Path) -> None:
    """A larger draw with another seed."""
    _check(datasets, int(os.environ.get("LANCE_GPU_MUTATION_CASES_LARGE", "2000")), SEED + 1, tmp_path / "scratch", 3600.0)
