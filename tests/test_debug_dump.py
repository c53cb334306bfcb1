# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.debug`` dumps (issue 26 item 3) against pylance 14.0.2: the schema
and fragment dumps are the same text; the manifest and transaction dumps carry the same
structure names and values."""

from __future__ import annotations

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
from lance import debug as ref_debug  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu import debug  # noqa: E402


@pytest.fixture
def uri(tmp_path) -> str:
    path = str(tmp_path / "d.lance")
    table = pa.table({"x": range(10), "s": [str(i) for i in range(10)], "st": [{"a": i, "b": "q\"\n"} for i in range(10)]})
    ds = lance.write_dataset(table, path, max_rows_per_file=6)
    ds.delete("x = 3")
    ds.add_columns({"y": "x + 1"})
    return path


def test_format_schema_is_pylance_text(uri: str) -> None:
    assert debug.format_schema(lance_gpu.dataset(uri)) == ref_debug.format_schema(lance.dataset(uri))


def test_format_fragment_is_pylance_text(uri: str) -> None:
    ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
    for a, b in zip(ours.get_fragments(), ref.get_fragments(), strict=True):
        assert debug.format_fragment(a.metadata, ours) == ref_debug.format_fragment(b.metadata, ref)


def test_format_manifest_structure(uri: str) -> None:
    text = debug.format_manifest(lance_gpu.dataset(uri))
    ref = ref_debug.format_manifest(lance.dataset(uri))
    assert text.startswith("Manifest {") and ref.startswith("Manifest {")
    for needle in ('writer_version: Some(\n        WriterVersion {\n            library: "lance"',
                   "fragments: [\n        Fragment {", "data_storage_format: DataStorageFormat {"):
        assert needle in text and needle in ref
    fragments = ref[ref.index("    fragments: ["):ref.index("    version_aux_data")]
    assert fragments in text


def test_list_transactions_structure(uri: str) -> None:
    ours = debug.list_transactions(lance_gpu.dataset(uri))
    ref = ref_debug.list_transactions(lance.dataset(uri))
    assert len(ours) == len(ref) == 3
    for a, b, kind in zip(ours, ref, ["Merge", "Delete", "Overwrite"], strict=True):
        assert a.startswith("Transaction {") and f"operation: {kind} {{" in a and f"operation: {kind} {{" in b
        assert a.split("\n")[1:3] == b.split("\n")[1:3]  # read_version, uuid
    assert debug.list_transactions(lance_gpu.dataset(uri), max_transactions=2) == ours[:2]
