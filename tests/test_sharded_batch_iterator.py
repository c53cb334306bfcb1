# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance._dataset.sharded_batch_iterator.ShardedBatchIterator``: the same
batches, shard by shard, as pylance 14.0.2 over the same pylance-written data."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

from lance._dataset.sharded_batch_iterator import ShardedBatchIterator as RefIterator  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu._dataset.sharded_batch_iterator import ShardedBatchIterator  # noqa: E402


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("shard") / "s.lance")
    lance.write_dataset(pa.table({"a": pa.array(np.arange(1186)), "b": pa.array(np.arange(1186) * 0.5)}), path,
                        max_rows_per_file=100)
    lance.dataset(path).delete("a % 7 = 0")
    return path


@pytest.mark.parametrize("options", [
    {},
    {"batch_size": 30, "with_row_id": True},
    {"granularity": "batch", "batch_size": 15},
    {"granularity": "batch", "batch_size": 100, "columns": ["b", "a"]},
    {"batch_size": 64, "columns": {"twice": "a * 2"}},
], ids=["fragments", "fragments-row-ids", "batches-15", "batches-100", "fragments-sql"])
def test_shards_match_pylance(uri: str, options: dict) -> None:
    options = {"columns": ["a"], **options}
    for rank in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = [b.to_pydict() for b in RefIterator(uri, rank, 3, **options)]
        with pytest.warns(UserWarning, match="deprecated"):
            ours = ShardedBatchIterator(lance_gpu.dataset(uri), rank, 3, **options)
        assert [b.to_pydict() for b in ours] == ref, rank


def test_bad_arguments(uri: str) -> None:
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="granularity"):
        iter(ShardedBatchIterator(uri, 0, 2, granularity="rows"))  # type: ignore[arg-type]
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="rank 2"):
        ShardedBatchIterator(uri, 2, 2)
    with pytest.warns(UserWarning), pytest.raises(NotImplementedError, match="with_row_id"):
        list(ShardedBatchIterator(uri, 0, 2, granularity="batch", with_row_id=True))
