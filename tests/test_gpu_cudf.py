# SPDX-License-Identifier: Apache-2.0
"""``to_cudf`` / ``read_cudf`` against ``cudf.DataFrame.from_arrow`` of pylance's table, on a GPU
with cuDF (``gpu`` marker; skipped where no GPU is usable or cuDF is not installed)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from lance_gpu.errors import CpuDecodeWarning

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

COLUMNS = ["id", "i32n", "f64", "b", "s", "cat", "runs", "ts", "dec", "emb", "embn", "long", "li", "llong", "st", "const", "null_s"]


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    lance = pytest.importorskip("lance")
    import gpu_datasets as gd

    return gd.write_rich(lance, tmp_path_factory.mktemp("cudf"), "2.2")


def test_to_cudf_equals_from_arrow_of_pylance(rich: str) -> None:
    cudf = pytest.importorskip("cudf")
    import lance

    import lance_gpu
    from lance_gpu.gpu._cudf import cudf_arrow_table

    ref = cudf.DataFrame.from_arrow(cudf_arrow_table(lance.dataset(rich).to_table(columns=COLUMNS)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuDecodeWarning)  # no column falls back after a failed zero-copy build
        got = lance_gpu.dataset(rich).to_cudf(columns=COLUMNS)
    _assert_same_frame(got, ref)
    filtered = lance_gpu.read_cudf(rich, columns=["id", "s", "emb"], filter="id % 4 = 1")
    ref = cudf.DataFrame.from_arrow(cudf_arrow_table(lance.dataset(rich).to_table(columns=["id", "s", "emb"], filter="id % 4 = 1")))
    _assert_same_frame(filtered, ref)


def _assert_same_frame(got, ref) -> None:
    """Same names, cuDF dtypes and values (compared as Arrow: exact, nulls included, and free
    of ``cudf.testing``'s pandas round trip, which some cuDF / pandas pairs break for decimals)."""
    assert list(got.columns) == list(ref.columns)
    assert [str(t) for t in got.dtypes] == [str(t) for t in ref.dtypes]
    assert got.to_arrow().equals(ref.to_arrow())
