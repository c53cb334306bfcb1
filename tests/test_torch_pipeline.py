# SPDX-License-Identifier: Apache-2.0
"""The host pipeline's batching (``lance_gpu.torch._pipeline``): units cut into batches, and
batches converted to tensors once per null-free unit (then sliced), which must give exactly
what converting every batch on its own gives, nulls, masks and errors included."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")

from lance_gpu.torch import _pipeline as pipeline  # noqa: E402
from lance_gpu.torch.tensors import NullValueError, to_tensor  # noqa: E402


def _table(lo: int, hi: int, *, nulls: str | None = None) -> pa.Table:
    """Rows ``[lo, hi)``: ``id``, ``emb`` (2 x float32, a function of id), ``s`` (text) and
    ``x`` (float64).  ``nulls="top"`` makes ``x`` null on multiples of 7, ``"item"`` makes one
    item of ``emb`` null (a null row under the tensor rules, though the list itself is valid)."""
    ids = np.arange(lo, hi, dtype=np.int64)
    items = np.repeat(ids, 2).astype(np.float32)
    item_mask = None
    if nulls == "item" and len(ids):
        item_mask = np.zeros(len(items), bool)
        item_mask[1] = True
    emb = pa.FixedSizeListArray.from_arrays(pa.array(items, mask=item_mask), 2)
    x = pa.array(ids.astype(np.float64), mask=(ids % 7 == 0) if nulls == "top" else None)
    return pa.table({"id": ids, "emb": emb, "s": pa.array([f"r{i}" for i in ids]), "x": x})


def _chunked(lo: int, hi: int, pieces: int, **kw: Any) -> pa.Table:
    """Rows ``[lo, hi)`` as a table of ``pieces`` chunks."""
    cuts = np.linspace(lo, hi, pieces + 1).astype(int)
    return pa.concat_tables([_table(int(a), int(b), **kw) for a, b in itertools.pairwise(cuts.tolist())])


def _reads(nulls_in: int | None = None, kind: str = "top") -> list[tuple[pa.Table, bool]]:
    """Five reads of 0..700, chunked differently; read ``nulls_in`` holds nulls of ``kind``."""
    bounds = [(0, 130, 1), (130, 400, 3), (400, 401, 1), (401, 640, 2), (640, 700, 1)]
    return [(_chunked(a, b, p, nulls=kind if i == nulls_in else None), False) for i, (a, b, p) in enumerate(bounds)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(-1.0) if a.is_floating_point() else a,
                                                                                                          b.nan_to_num(-1.0) if b.is_floating_point() else b)
    return a == b


def _both(reads, nulls: str, **kw: Any) -> tuple[list[Any], list[Any], int]:
    """Per-batch conversions of :func:`pipeline.batches_of` and :func:`pipeline.converted_batches`
    of the same reads (each up to a ``NullValueError``, recorded as the string "raised"), and
    how many times the second converted."""
    calls = 0

    def convert(batch: pa.RecordBatch) -> Any:
        nonlocal calls
        calls += 1
        return to_tensor(batch, nulls=nulls)

    def run(batches) -> list[Any]:
        out: list[Any] = []
        try:
            for b in batches:
                out.append(b)
        except NullValueError:
            out.append("raised")
        return out

    rng = (lambda: np.random.default_rng(5)) if kw.get("shuffle_buffer") else (lambda: None)
    want = run(to_tensor(b, nulls=nulls) for b in pipeline.batches_of(iter(reads), None, rng=rng(), **kw))
    got = run(pipeline.converted_batches(pipeline.batch_pieces(iter(reads), None, rng=rng(), **kw), convert))
    return want, got, calls


@pytest.mark.parametrize("shuffle_buffer", [0, 96])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("nulls_in", "kind"), [(None, "top"), (1, "top"), (3, "item"), (4, "top")])
@pytest.mark.parametrize("nulls", ["raise", "mask"])
def test_converting_per_unit_equals_converting_per_batch(shuffle_buffer, drop_last, nulls_in, kind, nulls) -> None:
    reads = _reads(nulls_in, kind)
    want, got, _calls = _both(reads, nulls, batch_size=32, drop_last=drop_last, shuffle_buffer=shuffle_buffer)
    assert len(want) == len(got) and all(_same(a, b) for a, b in zip(want, got, strict=True))
    if nulls_in is not None and nulls == "raise":
        assert want[-1] == "raised"
    elif nulls_in is not None:
        assert any(isinstance(b, dict) and ("x_valid" in b or "emb_valid" in b) for b in got)
        assert any(isinstance(b, dict) and "x_valid" not in b and "emb_valid" not in b for b in got)


def test_a_null_free_unit_is_converted_once_and_batches_share_its_memory() -> None:
    """Two reads of 500 rows, batches of 100: two conversions, not ten; a batch's tensor is a
    view of its unit's."""
    reads = [(_table(0, 500), False), (_table(500, 1000), False)]
    want, got, calls = _both(reads, "raise", batch_size=100)
    assert calls == 2 and len(got) == 10 and all(_same(a, b) for a, b in zip(want, got, strict=True))
    first, second = got[0]["emb"], got[1]["emb"]
    assert second.data_ptr() == first.data_ptr() + 100 * 2 * 4
    assert got[3]["s"] == [f"r{i}" for i in range(300, 400)]


def test_a_batch_straddling_units_is_concatenated() -> None:
    reads = [(_table(0, 50), False), (_table(50, 120), True), (_table(120, 130), False)]
    pieces = list(pipeline.batch_pieces(iter(reads), None, batch_size=40))
    assert [[(a, b) for _u, a, b in p] for p in pieces] == [[(0, 40)], [(40, 50), (0, 30)], [(30, 70)], [(0, 10)]]
    ids = [pipeline.arrow_batch(p).column("id").to_pylist() for p in pieces]
    assert ids == [list(range(0, 40)), list(range(40, 80)), list(range(80, 120)), list(range(120, 130))]
    dropped = list(pipeline.batch_pieces(iter(reads), None, batch_size=40, drop_last=True))
    assert len(dropped) == 3


def test_empty_reads_still_flush() -> None:
    reads = [(_table(0, 5), False), (_table(5, 5), True), (_table(5, 9), False)]
    sizes = [pipeline.arrow_batch(p).num_rows for p in pipeline.batch_pieces(iter(reads), None, batch_size=4)]
    assert sizes == [4, 1, 4]


def test_strided_keeps_every_step_th_row_of_the_stream() -> None:
    reads = [(_table(0, 10), False), (_table(10, 13), False), (_table(13, 30), False)]
    for first, step in [(0, 3), (2, 3), (1, 7)]:
        kept = [i for p in pipeline.batch_pieces(iter(reads), (first, step), batch_size=4) for i in pipeline.arrow_batch(p).column("id").to_pylist()]
        assert kept == list(range(first, 30, step))


class _CountingSource:
    """A source of one fragment of ``n`` rows (``id``, ``emb``) that counts the rows it decoded."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.decoded = 0

    def read_many(self, spans):
        out = []
        for _pos, a, b in spans:
            self.decoded += b - a
            out.append(_table(a, b))
        return out


@pytest.mark.parametrize("shuffle_buffer", [0, 4096])
def test_rows_held_ahead_are_bounded_by_prefetch_and_the_shuffle_buffer(shuffle_buffer) -> None:
    """Rows decoded but not yet handed out never exceed the bound of the module docstring:
    ``prefetch`` groups queued, one being decoded, one being cut or scattered, and (with a
    shuffle buffer) three fills."""
    from lance_gpu.torch.sampler import Plan, Read

    n, read_rows, prefetch, batch = 200_000, 1000, 2, 100
    source = _CountingSource(n)
    feed = pipeline.Feed(
        source=source, plan=Plan([Read(0, 0, n)]), batch_size=batch, drop_last=False, shuffle_buffer=shuffle_buffer,
        rng=np.random.default_rng(0) if shuffle_buffer else None, shuffle_reads=bool(shuffle_buffer), read_rows=read_rows,
        prefetch=prefetch, nulls="raise", convert=lambda b: to_tensor(b), tensor_rules=True,
    )
    group = pipeline.GROUP_READS * read_rows
    bound = (prefetch + 2) * group + 3 * shuffle_buffer + batch
    handed, worst, seen = 0, 0, []
    for out in feed.converted():
        handed += len(out["id"])
        seen += out["id"].tolist()
        worst = max(worst, source.decoded - handed)
        assert source.decoded - handed <= bound
    assert sorted(seen) == list(range(n)) and handed == n
    assert worst > group  # it did read ahead
