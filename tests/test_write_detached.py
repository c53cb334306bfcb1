# SPDX-License-Identifier: Apache-2.0
"""Detached commits (``LanceDataset.commit(..., detached=True)``) on pylance and lance-gpu:
a random version with bit 63 set stored as ``_versions/d{version}.manifest``, outside the
lineage (never the latest, no version hint), found by checking it out by number, and a
base for further detached commits."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.table.manifest import DETACHED_VERSION_MASK
from lance_gpu.write.fragments import write_fragments

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _run(lib, uri: str) -> dict:
    lance.write_dataset(pa.table({"a": [1, 2]}), uri)
    frag_writer = lance.fragment.write_fragments if lib is lance else write_fragments

    def append(values: list[int], read_version: int, detached: bool):  # type: ignore[no-untyped-def]
        frags = frag_writer(pa.table({"a": values}), uri)
        return lib.LanceDataset.commit(uri, lib.LanceOperation.Append(frags), read_version=read_version,
                                       detached=detached)

    first = append([3], 1, True)
    second = append([4], first.version, True)  # on top of a detached version
    main = append([5], 1, False)
    names = sorted(os.listdir(os.path.join(uri, "_versions")))
    return {
        "versions": [first.version, second.version],
        "tables": [lance.dataset(uri, version=v).to_table().to_pylist() for v in (first.version, second.version)],
        "ours": [lance_gpu.dataset(uri, version=v).to_table().to_pylist() for v in (first.version, second.version)],
        "latest": (lance.dataset(uri).version, lance_gpu.dataset(uri).version, first.latest_version),
        "main": main.to_table().to_pylist(),
        "lineage": [v["version"] for v in lance.dataset(uri).versions()],
        "names": [n if not n.startswith("d") else "d" for n in names],
        "detached_files": sorted(n for n in names if n.startswith("d")),
        "hint": open(os.path.join(uri, "_versions", "latest_version_hint.json")).read(),
    }


def test_detached_commits_as_pylance(tmp_path):
    theirs, ours = _run(lance, str(tmp_path / "theirs")), _run(lance_gpu, str(tmp_path / "ours"))
    for got in (theirs, ours):
        assert all(v & DETACHED_VERSION_MASK for v in got["versions"])
        assert got["detached_files"] == sorted(f"d{v}.manifest" for v in got["versions"])
    for key in ("tables", "ours", "latest", "main", "lineage", "names", "hint"):
        assert ours[key] == theirs[key], key
    assert ours["tables"] == [[{"a": 1}, {"a": 2}, {"a": 3}], [{"a": 1}, {"a": 2}, {"a": 3}, {"a": 4}]]
