# SPDX-License-Identifier: Apache-2.0
"""The host shuffle buffer (``lance_gpu.torch._pipeline``): fills of ``shuffle_buffer`` rows
rounded up to whole batches, scattered into a seeded permutation of their slots as reads
arrive.  Fixed-width null-free columns are scattered, the others gathered through Arrow, and
every column of a batch must hold the same rows whichever way it went."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from lance_gpu.torch import _pipeline as pipeline  # noqa: E402


def _reads(n: int, read_rows: int, *, null_from: int | None = None) -> list[tuple[pa.Table, bool]]:
    """``n`` rows cut in reads: ``id``; ``emb`` (fixed-size list, a function of id); ``s``
    (strings); ``maybe`` (int32, null where id is a multiple of 7 from row ``null_from`` on)."""
    ids = np.arange(n, dtype=np.int64)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 3).astype(np.float32) * np.tile([1, 2, 3], n).astype(np.float32)), 3)
    maybe = pa.array([None if null_from is not None and i >= null_from and i % 7 == 0 else int(i) for i in ids], pa.int32())
    table = pa.table({"id": ids, "emb": emb, "s": pa.array([f"r{i}" for i in ids]), "maybe": maybe})
    return [(table.slice(a, read_rows), False) for a in range(0, n, read_rows)]


def _check_rows(batches: list[pa.RecordBatch], null_from: int | None = None) -> list[int]:
    ids: list[int] = []
    for b in batches:
        got = b.to_pydict()
        for i, e, s, m in zip(got["id"], got["emb"], got["s"], got["maybe"], strict=True):
            assert e == [float(i), 2.0 * i, 3.0 * i] and s == f"r{i}"
            assert m == (None if null_from is not None and i >= null_from and i % 7 == 0 else i)
        ids += got["id"]
    return ids


@pytest.mark.parametrize("null_from", [None, 0, 150])
@pytest.mark.parametrize(("n", "read_rows", "buffer", "batch"), [(1000, 64, 200, 32), (1000, 333, 1000, 100), (97, 10, 500, 16), (1, 1, 8, 4)])
def test_rows_stay_whole_and_every_row_comes_once(n, read_rows, buffer, batch, null_from) -> None:
    out = list(pipeline.batches_of(iter(_reads(n, read_rows, null_from=null_from)), None, batch_size=batch,
                                   shuffle_buffer=buffer, rng=np.random.default_rng(3)))
    ids = _check_rows(out, null_from)
    assert sorted(ids) == list(range(n))
    assert [b.num_rows for b in out[:-1]] == [batch] * (len(out) - 1)
    if n > 1:
        assert ids != list(range(n))


def test_a_column_turning_nullable_mid_fill_is_gathered_through_arrow() -> None:
    """``maybe`` is null free in the first reads of a fill, then has nulls: it leaves the
    scatter path for that fill and still lines up with the other columns."""
    out = list(pipeline.batches_of(iter(_reads(600, 50, null_from=120)), None, batch_size=40, shuffle_buffer=400,
                                   rng=np.random.default_rng(0)))
    assert sorted(_check_rows(out, 120)) == list(range(600))


def test_fills_are_rounded_up_to_whole_batches_and_mix_within_a_fill() -> None:
    """A 100-row buffer with batches of 32 fills 128 rows: the first four batches hold
    exactly rows 0..127, in a seeded order; the short fill at the end holds the rest."""
    out = list(pipeline.batches_of(iter(_reads(300, 30)), None, batch_size=32, shuffle_buffer=100, rng=np.random.default_rng(1)))
    ids = [i for b in out for i in b.column("id").to_pylist()]
    assert sorted(ids[:128]) == list(range(128)) and sorted(ids[128:256]) == list(range(128, 256))
    assert sorted(ids[256:]) == list(range(256, 300)) and [b.num_rows for b in out] == [32] * 9 + [12]
    again = [i for b in pipeline.batches_of(iter(_reads(300, 30)), None, batch_size=32, shuffle_buffer=100,
                                            rng=np.random.default_rng(1)) for i in b.column("id").to_pylist()]
    assert again == ids


def test_drop_last_drops_only_the_short_batch_of_the_last_fill() -> None:
    out = list(pipeline.batches_of(iter(_reads(300, 30)), None, batch_size=32, drop_last=True, shuffle_buffer=100,
                                   rng=np.random.default_rng(1)))
    assert [b.num_rows for b in out] == [32] * 9


def test_an_empty_stream_gives_no_batches() -> None:
    assert list(pipeline.batches_of(iter([]), None, batch_size=4, shuffle_buffer=8, rng=np.random.default_rng(0))) == []


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")
def test_scatter_threads_split_a_read_and_a_forked_worker_makes_its_own(monkeypatch, tmp_path) -> None:
    """With pieces of 64 rows a 1000-row read is scattered by several threads; a DataLoader
    worker forked after the parent made its pool makes its own (the parent's threads do not
    exist there) and gives the same rows as the parent."""
    lance = pytest.importorskip("lance")
    import lance_gpu.torch as lt

    monkeypatch.setattr(pipeline, "SCATTER_ROWS", 64)
    monkeypatch.setattr(pipeline, "SCATTER_THREADS", 3)
    ids = np.arange(3000, dtype=np.int64)
    table = pa.table({"id": ids, "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4)})
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table, uri, max_rows_per_file=1000)

    def rows(workers: int) -> list[int]:
        ds = lt.LanceDataset(uri, 100, columns=["id", "emb"], shuffle=True, seed=2, shuffle_buffer=1000, read_rows=1000, device="cpu")
        # a worker stuck on the parent's dead pool would hang: the loader's timeout fails it
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, timeout=120 if workers else 0,
                                             multiprocessing_context="fork" if workers else None)
        out: list[int] = []
        for b in loader:
            assert torch.equal(b["emb"], b["id"].to(torch.float32)[:, None].expand(-1, 4))
            out += b["id"].tolist()
        return out

    parent = rows(0)
    assert pipeline._scatter_pool is not None
    assert sorted(parent) == ids.tolist() and parent != ids.tolist()
    assert rows(1) == parent
