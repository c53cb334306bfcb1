# SPDX-License-Identifier: Apache-2.0
"""Binary literals against ``large_binary`` columns (issue 26 item 5), against pylance 14.0.2."""

from __future__ import annotations

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402


@pytest.mark.parametrize("predicate", ["lb = X'616263'", "b = X'616263'", "lb IN (X'78', X'616263')",
                                       "lb <> X'78'", "lb > X'6100'"])
def test_binary_literal_against_large_binary(tmp_path, predicate: str) -> None:
    uri = str(tmp_path / "b.lance")
    lance.write_dataset(pa.table({"lb": pa.array([b"abc", b"x", None], pa.large_binary()),
                                  "b": pa.array([b"abc", b"y", b"z"])}), uri)
    assert lance_gpu.dataset(uri).to_table(filter=predicate) == lance.dataset(uri).to_table(filter=predicate)
