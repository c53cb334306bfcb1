# SPDX-License-Identifier: Apache-2.0
"""Housekeeping (issue 26 item 3) against pylance 14.0.2: auto cleanup after commits
(``auto_cleanup_options`` / ``AutoCleanupConfig``, config keys, ``enable_auto_cleanup`` /
``disable_auto_cleanup``), ``LanceDataset.drop`` and ``validate``, ``default_scan_options``."""

from __future__ import annotations

import os
import shutil
import time

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
from lance.dataset import LANCE_COMMIT_MESSAGE_KEY as REF_COMMIT_MESSAGE_KEY  # noqa: E402
from lance.dataset import AutoCleanupConfig as RefAutoCleanupConfig  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu.dataset import LANCE_COMMIT_MESSAGE_KEY, AutoCleanupConfig  # noqa: E402
from lance_gpu.errors import CorruptFileError  # noqa: E402

TABLE = pa.table({"a": range(10)})


def _history(mod, base: str) -> list[int]:
    return [v["version"] for v in mod.dataset(base).versions()]


def _scenario(mod, config_cls, base: str) -> list[list[int]]:
    out = []
    ds = mod.write_dataset(TABLE, base, mode="create")
    ds.update_config({"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "1ms"})
    for _ in range(3):
        time.sleep(0.01)
        mod.write_dataset(TABLE, base, mode="append")
    out.append(_history(mod, base))
    mod.dataset(base).optimize.disable_auto_cleanup()
    for _ in range(2):
        mod.write_dataset(TABLE, base, mode="append")
    out.append(_history(mod, base))
    mod.dataset(base).optimize.enable_auto_cleanup(config_cls(interval=2, older_than_seconds=0))
    for _ in range(3):
        time.sleep(0.01)
        mod.write_dataset(TABLE, base, mode="append")
    out.append(_history(mod, base))
    out.append([mod.dataset(base).count_rows()])
    return out


def test_auto_cleanup_matches_pylance(tmp_path) -> None:
    ours = _scenario(lance_gpu, AutoCleanupConfig, str(tmp_path / "ours"))
    ref = _scenario(lance, RefAutoCleanupConfig, str(tmp_path / "ref"))
    assert ours == ref
    assert len(ours[0]) == 2  # the version before the commit stays, as pylance keeps it


def test_write_dataset_auto_cleanup_options_config(tmp_path) -> None:
    for mod, cls, name in ((lance_gpu, AutoCleanupConfig, "ours"), (lance, RefAutoCleanupConfig, "ref")):
        mod.write_dataset(TABLE, str(tmp_path / name), auto_cleanup_options=cls(interval=3, older_than_seconds=100))
    assert lance.dataset(str(tmp_path / "ours")).config() == lance.dataset(str(tmp_path / "ref")).config()


def test_drop_matches_pylance(tmp_path) -> None:
    for mod, name in ((lance_gpu, "ours"), (lance, "ref")):
        path = str(tmp_path / name)
        lance.write_dataset(TABLE, path)
        mod.LanceDataset.drop(path)
        assert not os.path.exists(path)
        mod.LanceDataset.drop(path, ignore_not_found=True)
        with pytest.raises(OSError):
            mod.LanceDataset.drop(path)
        with pytest.raises(OSError):
            mod.LanceDataset.drop(path, ignore_not_found=False)
        os.makedirs(path)
        with open(os.path.join(path, "stray"), "w") as f:
            f.write("x")
        with pytest.raises(ValueError, match="Refusing to drop"):
            mod.LanceDataset.drop(path)
        assert os.path.exists(os.path.join(path, "stray"))


def test_validate(tmp_path) -> None:
    path = str(tmp_path / "v.lance")
    ds = lance.write_dataset(TABLE, path, max_rows_per_file=4)
    ds.add_columns({"b": "a * 2"})
    ds.delete("a = 3")
    lance.dataset(path).validate()
    assert lance_gpu.dataset(path).validate() is None
    # a data file whose rows disagree with the manifest's physical_rows
    other = str(tmp_path / "other.lance")
    lance.write_dataset(pa.table({"a": range(7)}), other)
    victim = lance.dataset(path).get_fragments()[0].data_files()[0].path
    shutil.copy(os.path.join(other, "data", os.listdir(os.path.join(other, "data"))[0]), os.path.join(path, "data", victim))
    with pytest.raises(CorruptFileError):
        lance_gpu.dataset(path).validate()


def test_default_scan_options_and_commit_message_key(tmp_path) -> None:
    path = str(tmp_path / "d.lance")
    lance.write_dataset(TABLE, path, commit_message="hello")
    for kwargs in ({"with_row_id": True}, {"with_row_address": True}, {"batch_size": 3, "columns": ["a"]}):
        ours = lance_gpu.dataset(path, default_scan_options=kwargs).to_table()
        assert ours == lance.dataset(path, default_scan_options=kwargs).to_table()
        # the schema lists the row id / address every default scan returns, as pylance's
        assert lance_gpu.dataset(path, default_scan_options=kwargs).schema == lance.dataset(
            path, default_scan_options=kwargs).schema
    both = {"with_row_id": True, "with_row_address": True}
    assert lance_gpu.dataset(path, default_scan_options=both).schema == lance.dataset(path, default_scan_options=both).schema
    assert LANCE_COMMIT_MESSAGE_KEY == REF_COMMIT_MESSAGE_KEY
    assert lance_gpu.dataset(path).read_transaction(1).transaction_properties[LANCE_COMMIT_MESSAGE_KEY] == "hello"


def test_commit_from_a_handle_whose_next_version_was_cleaned_up(tmp_path) -> None:
    """A dataset handle at version 2 commits after versions 3..6 were written and 2..4
    cleaned up: the commit lands after the latest (7), as pylance's, not at the freed 3."""
    for mod, name in ((lance_gpu, "ours"), (lance, "ref")):
        base = str(tmp_path / name)
        ds = mod.write_dataset(TABLE, base, mode="create")
        ds.update_config({"x": "1"})  # ds at version 2
        for _ in range(4):
            lance.write_dataset(TABLE, base, mode="append")
        time.sleep(0.05)
        lance.dataset(base).cleanup_old_versions(older_than=__import__("datetime").timedelta(0), retain_versions=2)
        assert _history(lance, base) == [5, 6]
        ds.update_config({"x": "2"})
        assert ds.version == 7
        assert _history(lance, base) == [5, 6, 7]
        assert lance.dataset(base).config()["x"] == "2"
