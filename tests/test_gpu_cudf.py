# SPDX-License-Identifier: Apache-2.0
"""``to_cudf`` / ``read_cudf`` against ``cudf.DataFrame.from_arrow`` of pylance's table, on a GPU
with cuDF (``gpu`` marker; skipped where no GPU is usable or cuDF is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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

    ref = cudf.DataFrame.from_arrow(lance.dataset(rich).to_table(columns=COLUMNS))
    got = lance_gpu.dataset(rich).to_cudf(columns=COLUMNS)
    cudf.testing.assert_frame_equal(got, ref)
    filtered = lance_gpu.read_cudf(rich, columns=["id", "s", "emb"], filter="id % 4 = 1")
    ref = cudf.DataFrame.from_arrow(lance.dataset(rich).to_table(columns=["id", "s", "emb"], filter="id % 4 = 1"))
    cudf.testing.assert_frame_equal(filtered, ref)
