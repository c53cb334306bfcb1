# SPDX-License-Identifier: Apache-2.0
"""Edge types read from pylance-written datasets: fixed-size lists of booleans whose
dimension is not a whole number of bytes, across chunk boundaries, with take."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu

lance = pytest.importorskip("lance")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("dim", [1, 3, 8, 13])
def test_fixed_size_list_of_bools(tmp_path, version: str, dim: int) -> None:
    rng = np.random.default_rng(dim)
    n = 5000
    bits = pa.array(rng.random(n * dim) < 0.5)
    fsl = pa.FixedSizeListArray.from_arrays(bits, dim)
    mask = pa.array(rng.random(n) < 0.1)
    nullable = pa.FixedSizeListArray.from_arrays(bits, dim, mask=mask)
    table = pa.table({"id": np.arange(n), "fsl": fsl, "nfsl": nullable})
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=2000)
    ours = lance_gpu.dataset(uri)
    ref = lance.dataset(uri)
    assert ours.to_table().equals(ref.to_table())
    idx = [0, 1, 1023, 1024, 2047, 2048, 4999, 3]
    assert ours.take(idx).equals(ref.take(idx))
    got = pa.Table.from_batches(list(ours.to_batches(batch_size=700)))
    assert got.equals(ref.to_table())
