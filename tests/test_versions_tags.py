# SPDX-License-Identifier: Apache-2.0
"""versions(), checkout, asof, tags, stats and cleanup_old_versions against pylance 14.0.2."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu
from lance_gpu.errors import (
    CleanupError,
    DatasetNotFoundError,
    InvalidTagNameError,
    TagExistsError,
    TaggedVersionError,
    TagNotFoundError,
    VersionNotFoundError,
)


def _history(uri: str) -> None:
    """Five versions: create (3 fragments), overwrite, append, two deletes."""
    t = pa.table({"a": list(range(10)), "s": [str(i) for i in range(10)]})
    lance.write_dataset(t, uri, max_rows_per_file=4)
    lance.write_dataset(t, uri, mode="overwrite")
    lance.write_dataset(t, uri, mode="append")
    lance.dataset(uri).delete("a = 3")
    lance.dataset(uri).delete("a = 4")


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "v.lance")
    _history(path)
    return path


def _files(uri: str) -> set[str]:
    return {os.path.relpath(os.path.join(r, f), uri) for r, _d, fs in os.walk(uri) for f in fs}


def test_versions_match_pylance(uri: str) -> None:
    ref = lance.dataset(uri).versions()
    ours = lance_gpu.dataset(uri).versions()
    assert ours == ref


def test_versions_parse_each_fragment_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """versions() keeps each manifest's fragments as bytes and parses a fragment once for all
    the versions that list it: 40 appends, a delete, a compaction and an overwrite parse as
    many fragments as there are distinct ones (not one per version and fragment), and the
    answer is pylance's."""
    import lance_gpu.table.versions as tv

    path = str(tmp_path / "h.lance")
    for i in range(40):
        lance.write_dataset(pa.table({"a": [2 * i, 2 * i + 1]}), path, mode="create" if i == 0 else "append")
    lance.dataset(path).delete("a % 7 = 0")
    lance.dataset(path).optimize.compact_files()
    lance.write_dataset(pa.table({"a": [1]}), path, mode="append")
    parsed: list[bytes] = []
    real = tv.parse_strict

    def counting(cls, data, *args):  # type: ignore[no-untyped-def]
        parsed.append(bytes(data))
        return real(cls, data, *args)

    monkeypatch.setattr(tv, "parse_strict", counting)
    ours = lance_gpu.dataset(path).versions()
    assert ours == lance.dataset(path).versions()
    assert len(ours) == lance.dataset(path).version > 42
    assert len(parsed) == len(set(parsed)) < 100  # 40 appended + 40 with deletions + compacted + last


def test_versions_huge_counts_add_as_pylance(tmp_path: Path) -> None:
    """Counts a manifest states add up as pylance's u64s (wrapping around), not as int64."""
    from lance_gpu._proto import table_pb2

    def huge(frags: list[bytes]) -> list[bytes]:
        out = []
        for raw in frags:
            frag = table_pb2.DataFragment.FromString(raw)
            frag.physical_rows = (1 << 64) - 1
            out.append(frag.SerializeToString())
        return out

    path = tmp_path / "big.lance"
    lance.write_dataset(pa.table({"a": list(range(8))}), str(path), max_rows_per_file=4)
    _rewrite_fragments(path, huge)
    ref = lance.dataset(str(path)).versions()
    assert lance_gpu.dataset(str(path)).versions() == ref
    assert ref[-1]["metadata"]["total_data_file_rows"] == str((1 << 64) - 2)


def _rewrite_fragments(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the latest manifest of ``path`` with ``change(fragment_bytes_list)`` applied to
    its fragment entries' bytes (other fields kept)."""
    import struct

    from lance_gpu._proto import table_pb2
    from lance_gpu.table.manifest import MANIFEST_FOOTER_SIZE
    from lance_gpu.table.manifest_bytes import entry_of_fragment_bytes

    mpath = Path(lance_gpu.dataset(str(path)).snapshot.manifest_path)
    raw = mpath.read_bytes()
    (pos,) = struct.unpack_from("<Q", raw, len(raw) - MANIFEST_FOOTER_SIZE)
    (n,) = struct.unpack_from("<I", raw, pos)
    m = table_pb2.Manifest()
    m.ParseFromString(raw[pos + 4 : pos + 4 + n])
    frags = change([f.SerializeToString() for f in m.fragments])
    m.ClearField("fragments")
    body = b"".join(entry_of_fragment_bytes(f) for f in frags) + m.SerializeToString()
    mpath.write_bytes(raw[:pos] + struct.pack("<I", len(body)) + body + struct.pack("<QHH4s", pos, 0, 2, b"LANC"))


def test_versions_of_many_new_fragments_parse_them_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version whose fragments are all new (one commit of many write tasks) has them parsed
    in one batch: the same metadata as pylance (huge counts wrapping as u64s included), and a
    fragment with a field of the wrong wire type among them is still refused as that one
    fragment's fault."""
    import lance_gpu.table.versions as tv
    from lance_gpu._proto import table_pb2
    from lance_gpu.errors import CorruptFileError

    path = tmp_path / "tasks.lance"
    table = pa.table({"a": list(range(24)), "s": [str(i) for i in range(24)]})
    lance.write_dataset(table, str(path), max_rows_per_file=2)
    lance.write_dataset(table.slice(0, 16), str(path), mode="append", max_rows_per_file=2)
    assert len(lance.dataset(str(path)).get_fragments()) == 20 and 8 >= tv._BATCH_PARSE_MIN

    def huge(frags: list[bytes]) -> list[bytes]:
        first = table_pb2.DataFragment.FromString(frags[0])
        first.physical_rows = (1 << 64) - 1
        return [first.SerializeToString(), *frags[1:]]

    # the first version's 12 fragments are parsed together and remembered (the next version
    # lists them again); the last version's 8 new ones are only summed
    calls: list[tuple[str, int]] = []
    real_add_all, real_totals = tv._FragmentStats._add_all, tv._column_totals
    monkeypatch.setattr(tv._FragmentStats, "_add_all", lambda self, raws, p: calls.append(("parse", len(raws))) or real_add_all(self, raws, p))
    monkeypatch.setattr(tv, "_column_totals", lambda raws: calls.append(("sum", len(raws))) or real_totals(raws))
    assert lance_gpu.dataset(str(path)).versions() == lance.dataset(str(path)).versions()
    assert calls == [("parse", 12), ("sum", 8)]
    _rewrite_fragments(path, huge)  # the last version's first fragment is new to it now
    calls.clear()
    ref = lance.dataset(str(path)).versions()
    assert lance_gpu.dataset(str(path)).versions() == ref
    assert ref[-1]["metadata"]["total_data_file_rows"] == str(((1 << 64) - 1 + 38) % (1 << 64))
    assert calls == [("parse", 12), ("sum", 9)]

    # fragment 5's id (field 1, a varint) written length-delimited: opening the version
    # refuses the manifest; the summary of its fragment bytes names the one fragment
    frags = [f.SerializeToString() for f in lance_gpu.dataset(str(path)).snapshot.manifest.fragments]
    frags[5] = b"\x0a\x01\x00" + frags[5]
    for last in (False, True):
        with pytest.raises(CorruptFileError, match="manifest fragment: field with the wrong wire type"):
            tv._FragmentStats().summary(frags, "m.manifest", last=last)
    _rewrite_fragments(path, lambda raws: [*raws[:5], frags[5], *raws[6:]])
    with pytest.raises(CorruptFileError, match="wrong wire type"):
        lance_gpu.dataset(str(path)).versions()


def test_versions_sums_new_fragments_of_every_shape(tmp_path: Path) -> None:
    """The last version's new fragments summed together (no object per fragment) give
    pylance's summary whatever they hold: several data files, deletion files, fragments
    listed twice, an empty version; and the sums equal the fragment-by-fragment parse."""
    import lance_gpu.table.versions as tv

    path = tmp_path / "shapes.lance"
    lance.write_dataset(pa.table({"a": list(range(40))}), str(path), max_rows_per_file=4)
    ds = lance.dataset(str(path))
    ds.add_columns({"b": "a * 2"})  # every fragment gains a data file: all ten are new bytes
    ds = lance.dataset(str(path))
    ds.delete("a % 7 = 0")  # deletion files on some
    ref = lance.dataset(str(path)).versions()
    assert lance_gpu.dataset(str(path)).versions() == ref
    assert ref[-1]["metadata"]["total_deletion_files"] != "0" and ref[-1]["metadata"]["total_data_files"] == "20"
    frags = [f.SerializeToString() for f in lance_gpu.dataset(str(path)).snapshot.manifest.fragments]
    assert len(frags) >= tv._BATCH_PARSE_MIN
    for listed in (frags, frags + frags[:3], []):
        assert tv._FragmentStats().summary(listed, "m", last=True) == tv._FragmentStats().summary(listed, "m", last=False)
    assert tv._column_totals(frags) == [sum(col) for col in zip(*(tv._fragment_row(tv.table_pb2.DataFragment.FromString(f)) for f in frags), strict=True)]


def test_versions_of_appends_deletes_and_rewrites_as_pylance(tmp_path: Path) -> None:
    """Versions that extend the previous one (appends) add only their new fragments to its
    totals; a delete (a fragment changed in place), a compaction, an overwrite and a restore
    break the run and are summed afresh: every summary as pylance's."""
    import lance_gpu.table.versions as tv

    path = str(tmp_path / "h.lance")
    lance.write_dataset(pa.table({"a": [0, 1]}), path)
    for k in range(1, 12):
        lance.write_dataset(pa.table({"a": [2 * k, 2 * k + 1]}), path, mode="append")
    lance.dataset(path).delete("a = 5")
    lance.write_dataset(pa.table({"a": [100]}), path, mode="append")
    lance.dataset(path).optimize.compact_files()
    lance.write_dataset(pa.table({"a": [7, 8, 9]}), path, mode="overwrite")
    lance.write_dataset(pa.table({"a": [10]}), path, mode="append")
    lance.dataset(path, version=3).restore()
    ref = lance.dataset(path).versions()
    assert lance_gpu.dataset(path).versions() == ref
    counts = [int(v["metadata"]["total_fragments"]) for v in ref]
    assert max(counts) == 13 and counts[-1] == 3 and 1 in counts[12:]
    # the same summaries without the append shortcut (a fresh tracker per version)
    stats = tv._FragmentStats()
    ours = lance_gpu.dataset(path)
    for entry, version in zip(ref, range(1, len(ref) + 1), strict=True):
        stats._previous = None
        frags = [f.SerializeToString() for f in ours.checkout_version(version).snapshot.manifest.fragments]
        assert stats.summary(frags, "m") == entry["metadata"]


def test_latest_checkout_and_storage_version(uri: str) -> None:
    ref, ours = lance.dataset(uri, version=2), lance_gpu.dataset(uri, version=2)
    assert ours.latest_version == ref.latest_version == 5
    assert ours.checkout_version(3).version == ref.checkout_version(3).version == 3
    ref.checkout_latest()
    ours.checkout_latest()
    assert ours.version == ref.version == 5
    assert ours.to_table().equals(ref.to_table())
    assert ours.data_storage_version == ref.data_storage_version
    with pytest.raises(OSError):
        ref.checkout_version(99)
    with pytest.raises(DatasetNotFoundError):
        ours.checkout_version(99)


@pytest.mark.parametrize("storage", ["legacy", "0.1", "2.0", "2.1", "stable"])
def test_data_storage_version(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(pa.table({"a": [1, 2]}), uri, data_storage_version=storage)
    assert lance_gpu.dataset(uri).data_storage_version == lance.dataset(uri).data_storage_version


def test_asof(uri: str) -> None:
    stamps = [v["timestamp"] for v in lance.dataset(uri).versions()]
    for i, when in enumerate(stamps):  # versions() drops the nanoseconds: just before version i+1
        ref = lance.dataset(uri, asof=when).version if i else None
        ours = lance_gpu.dataset(uri, asof=when).version if i else None
        assert ours == ref == (i or None)
    later = stamps[2] + (stamps[3] - stamps[2]) / 2
    assert lance_gpu.dataset(uri, asof=later).version == lance.dataset(uri, asof=later).version == 3
    aware = stamps[1].astimezone(dt.UTC) + dt.timedelta(microseconds=1)
    assert lance_gpu.dataset(uri, asof=aware).version == 2
    early = dt.datetime(2000, 1, 1)
    with pytest.raises(ValueError):
        lance.dataset(uri, asof=early)
    with pytest.raises(VersionNotFoundError, match="earlier than the first version"):
        lance_gpu.dataset(uri, asof=early)


def test_tags_we_write_pylance_reads(uri: str) -> None:
    ours = lance_gpu.dataset(uri)
    ours.tags.create("first", 1)
    ours.tags.create("current")  # the version this object is at
    ours.tags.create("same", "first")
    ours.tags.update("same", 3)
    ref = lance.dataset(uri)
    ref_tags = ref.tags.list()
    assert {k: v["version"] for k, v in ref_tags.items()} == {"first": 1, "current": 5, "same": 3}
    assert ref_tags["same"]["manifest_size"] == os.path.getsize(
        next(p for p in Path(uri, "_versions").iterdir() if p.name.endswith(".manifest")).parent
        / lance_gpu.table.manifest.manifest_file_name(3)
    )
    assert ref.checkout_version("same").to_table().equals(ours.checkout_version("same").to_table())
    assert ours.tags.list() == ref_tags
    ref.tags.delete("first")  # pylance deletes a tag we wrote
    ours.tags.delete("current")
    assert list(ref.tags.list()) == ["same"]


def test_tags_pylance_writes_we_read(uri: str) -> None:
    ref = lance.dataset(uri)
    ref.tags.create("t1", 2)
    ref.tags.create("t2", 4)
    ref.tags.update("t2", 3)
    ours = lance_gpu.dataset(uri)
    assert ours.tags.list() == ref.tags.list()
    assert ours.tags.get_version("t2") == ref.tags.get_version("t2") == 3
    assert lance_gpu.dataset(uri, version="t1").to_table().equals(lance.dataset(uri, version="t1").to_table())
    ours.tags.delete("t1")
    assert list(ref.tags.list()) == ["t2"]


@pytest.mark.parametrize(
    ("call", "ours_error"),
    [
        (lambda d: (d.tags.create("x", 1), d.tags.create("x", 2)), TagExistsError),
        (lambda d: d.tags.create("y", 99), VersionNotFoundError),
        (lambda d: d.tags.delete("nope"), TagNotFoundError),
        (lambda d: d.tags.update("nope", 1), TagNotFoundError),
        (lambda d: d.tags.create("a/b", 1), InvalidTagNameError),
        (lambda d: d.checkout_version("nope"), DatasetNotFoundError),
    ],
)
def test_tag_errors(tmp_path: Path, call, ours_error: type) -> None:
    for name, lib in (("ref", lance), ("ours", lance_gpu)):
        path = str(tmp_path / f"{name}.lance")
        _history(path)
        with pytest.raises(Exception) as info:
            call(lib.dataset(path))
        if name == "ref":
            builtin = next(c for c in type(info.value).__mro__ if c.__module__ == "builtins")
        else:
            assert isinstance(info.value, ours_error)
            assert isinstance(info.value, builtin), (info.value, builtin)


def test_dataset_stats(uri: str) -> None:
    assert lance_gpu.dataset(uri).stats.dataset_stats() == lance.dataset(uri).stats.dataset_stats()
    assert lance_gpu.dataset(uri, version=1).stats.dataset_stats() == lance.dataset(uri, version=1).stats.dataset_stats()


def _cleanup_both(tmp_path: Path, prepare, **kwargs):
    """Run the same cleanup on two copies of one history; return (ref stats, ours stats,
    files left by pylance, files left by us)."""
    ref_uri, our_uri = str(tmp_path / "ref.lance"), str(tmp_path / "ours.lance")
    _history(ref_uri)
    prepare(ref_uri)
    shutil.copytree(ref_uri, our_uri)
    time.sleep(0.05)
    ref_stats = lance.dataset(ref_uri).cleanup_old_versions(**kwargs)
    our_stats = lance_gpu.dataset(our_uri).cleanup_old_versions(**kwargs)
    return ref_stats, our_stats, _files(ref_uri), _files(our_uri)


def _orphan(uri: str) -> None:
    Path(uri, "data", "orphan-left-by-a-failed-write.lance").write_bytes(b"x" * 10)


#: Files no version references, by how many days ago they were last written: pylance
#: deletes unreferenced files of the layout it manages once 7 days old, keeps younger ones
#: (unless delete_unverified) and never touches files outside that layout.
_ORPHANS = {
    "data/old-orphan.lance": 8,
    "data/young-orphan.lance": 6,
    "data/old-notes.txt": 30,
    "data/old-orphan/00000000.blob": 9,
    "_deletions/9-9-123.arrow": 8,
    "_deletions/9-9-456.bin": 2,
    "_transactions/9-old-orphan.txn": 10,
    "_transactions/9-young-orphan.txn": 1,
    "_indices/0b1e2f7a-0000-4000-8000-000000000001/page_data.lance": 8,
    "_indices/0b1e2f7a-0000-4000-8000-000000000002/page_data.lance": 3,
}


def _aged_orphans(uri: str) -> None:
    now = time.time()
    for rel, days in _ORPHANS.items():
        path = Path(uri, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"y" * 17)
        os.utime(path, (now - days * 86400, now - days * 86400))


@pytest.mark.parametrize(
    ("prepare", "kwargs"),
    [
        (lambda u: None, {"older_than": dt.timedelta(0)}),
        (lambda u: None, {"retain_versions": 2}),
        (lambda u: None, {"older_than": dt.timedelta(0), "versions": [2, 3]}),
        (lambda u: None, {}),  # two weeks by default: nothing goes
        (lambda u: lance.dataset(u).tags.create("keep", 1), {"older_than": dt.timedelta(0), "error_if_tagged_old_versions": False}),
        (_orphan, {"older_than": dt.timedelta(0)}),
        (_orphan, {"older_than": dt.timedelta(0), "delete_unverified": True}),
        (_aged_orphans, {}),
        (_aged_orphans, {"older_than": dt.timedelta(0)}),
        (_aged_orphans, {"retain_versions": 2, "delete_unverified": True}),
    ],
)
def test_cleanup_removes_what_pylance_removes(tmp_path: Path, prepare, kwargs) -> None:
    ref_stats, our_stats, ref_files, our_files = _cleanup_both(tmp_path, prepare, **kwargs)
    assert our_files == ref_files
    for name in (
        "old_versions", "data_files_removed", "transaction_files_removed", "deletion_files_removed",
        "index_files_removed", "bytes_removed",
    ):
        assert getattr(our_stats, name) == getattr(ref_stats, name), name
    if prepare is _aged_orphans:  # the age rule decided: old orphans went, young ones stayed
        left = {rel for rel in _ORPHANS if rel in our_files}
        assert "data/old-orphan.lance" not in left and "data/old-notes.txt" in left
        assert ("data/young-orphan.lance" in left) != kwargs.get("delete_unverified", False)
    ours = lance_gpu.dataset(str(tmp_path / "ours.lance"))
    assert ours.to_table().equals(lance.dataset(str(tmp_path / "ref.lance")).to_table())


# Writers killed (SIGKILL) before publishing: one interpreter imports lance-gpu and writes a
# scratch dataset once (lance-gpu's pools reset in a forked child), then for each of argv[2:] forks a writer that kills itself at that step ("data": before a data file is
# renamed into place, "manifest": before the manifest is linked, "hint": before a new version
# hint is renamed into place), waits for it and prints its exit status and the staging files
# (``.tmp_*``) it left, a JSON line each.
_KILLED_WRITERS = """
import json, os, signal, sys, tempfile, warnings
warnings.simplefilter("ignore")
import pyarrow as pa
import lance_gpu
uri = sys.argv[1]
def staged():
    return {os.path.join(d, f) for d, _, fs in os.walk(uri) for f in fs if f.startswith(".tmp_")}
def write_and_die(where):
    real_link, real_replace = os.link, os.replace
    def die_on(dst, fragment):
        if fragment in str(dst):
            os.kill(os.getpid(), signal.SIGKILL)
    def link(src, dst, *a, **k):
        die_on(dst, "/_versions/" if where == "manifest" else "<never>")
        return real_link(src, dst, *a, **k)
    def replace(src, dst, *a, **k):
        die_on(dst, {"hint": "latest_version_hint.json", "data": "/data/"}.get(where, "<never>"))
        return real_replace(src, dst, *a, **k)
    os.link, os.replace = link, replace
    if where == "hint":  # an existing hint is rewritten in place: only a new one is staged
        os.unlink(os.path.join(uri, "_versions", "latest_version_hint.json"))
    lance_gpu.write_dataset(pa.table({"a": [70, 80], "s": ["x", "y"]}), uri, mode="append")
with tempfile.TemporaryDirectory() as scratch:  # a write first: its kernels load once, not in every writer
    lance_gpu.write_dataset(pa.table({"a": [70, 80], "s": ["x", "y"]}), os.path.join(scratch, "warm.lance"))
for where in sys.argv[2:]:
    before = staged()
    pid = os.fork()
    if pid == 0:
        try:
            write_and_die(where)
        finally:
            os._exit(3)  # survived: the parent reports 3
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"where": where, "status": os.waitstatus_to_exitcode(status), "left": sorted(staged() - before)}), flush=True)
"""


def _staging_files(uri: str) -> list[str]:
    return sorted(f for f in _files(uri) if os.path.basename(f).startswith(".tmp_"))


def test_cleanup_removes_a_killed_writers_staging_files(tmp_path: Path) -> None:
    """Writers killed (SIGKILL) before publishing a data file, the manifest and a new version
    hint (where none was left to rewrite in place) leave their staging files (``.tmp_{name}_{uuid}``).  pylance's cleanup leaves
    them; ours removes them once older than the retention (and 7 days, unless
    delete_unverified), and the dataset still reads as pylance reads it."""
    import json
    import subprocess
    import sys

    uri = str(tmp_path / "ours.lance")
    _history(uri)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    wheres = ["data", "manifest", "hint"]
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITERS, uri, *wheres], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    writers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [w["where"] for w in writers] == wheres, (proc.stdout, proc.stderr[-2000:])
    for w in writers:
        assert w["status"] == -9, (w, proc.stderr[-2000:])
        assert w["left"], w  # the killed writer left one
    staged = _staging_files(uri)
    assert any(f.startswith("_versions/.tmp_latest_version_hint.json_") for f in staged)
    assert any(f.startswith("_versions/.tmp_") and ".manifest_" in f for f in staged)
    assert any(f.startswith("data/.tmp_") for f in staged)
    ref_uri = str(tmp_path / "ref.lance")
    shutil.copytree(uri, ref_uri)
    lance.dataset(ref_uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert _staging_files(ref_uri) == staged  # pylance leaves them

    ours = lance_gpu.dataset(uri)
    stats = ours.cleanup_old_versions(older_than=dt.timedelta(0))
    assert stats.staging_files_removed == 0 and _staging_files(uri) == staged  # young: maybe a writer at work
    week_ago = time.time() - 8 * 86400
    for rel in staged:
        os.utime(os.path.join(uri, rel), (week_ago, week_ago))
    stats = lance_gpu.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(days=14))
    assert stats.staging_files_removed == 0 and _staging_files(uri) == staged  # younger than the retention
    sizes = sum(os.path.getsize(os.path.join(uri, rel)) for rel in staged)
    stats = lance_gpu.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(days=7))
    assert stats.staging_files_removed == len(staged) and stats.bytes_removed >= sizes
    assert _staging_files(uri) == []
    assert lance_gpu.dataset(uri).to_table().equals(lance.dataset(ref_uri).to_table())
    assert lance.dataset(uri).to_table().equals(lance.dataset(ref_uri).to_table())


def test_cleanup_delete_unverified_removes_young_staging_files(tmp_path: Path) -> None:
    """With delete_unverified (no other writer runs) staging files go whatever their age;
    a file that only looks like one (no uuid suffix) stays."""
    uri = str(tmp_path / "d.lance")
    _history(uri)
    staged = Path(uri, "_versions", ".tmp_00000000000000000001.manifest_" + "ab" * 16)
    staged.write_bytes(b"m" * 40)
    lookalike = Path(uri, "data", ".tmp_notes")
    lookalike.write_bytes(b"n")
    stats = lance_gpu.dataset(uri).cleanup_old_versions(retain_versions=5, delete_unverified=True)
    assert stats.staging_files_removed == 1 and stats.old_versions == 0 and stats.bytes_removed == 40
    assert not staged.exists() and lookalike.exists()


def test_cleanup_refuses_tagged_versions(tmp_path: Path) -> None:
    for name, lib in (("ref", lance), ("ours", lance_gpu)):
        path = str(tmp_path / f"{name}.lance")
        _history(path)
        lance.dataset(path).tags.create("keep", 1)
        before = _files(path)
        with pytest.raises(OSError) as info:
            lib.dataset(path).cleanup_old_versions(older_than=dt.timedelta(0))
        assert _files(path) == before
        if lib is lance_gpu:
            assert isinstance(info.value, TaggedVersionError) and "keep" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"retain_versions": 0}, {"retain_versions": -1}, {"delete_rate_limit": 0}])
def test_cleanup_bad_arguments(uri: str, kwargs) -> None:
    """pylance: OSError ("Cleanup error"; OverflowError for a negative count); ours: CleanupError."""
    before = _files(uri)
    with pytest.raises((OSError, OverflowError)):
        lance.dataset(uri).cleanup_old_versions(**kwargs)
    with pytest.raises(CleanupError, match="positive integer"):
        lance_gpu.dataset(uri).cleanup_old_versions(**kwargs)
    assert _files(uri) == before


def _data_stats(stats) -> list[tuple[int, int]]:
    return [(f.id, f.bytes_on_disk) for f in stats.fields]


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
def test_data_stats(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "d.lance")
    t = pa.table(
        {
            "a": list(range(50)),
            "tags": [[str(i)] * (i % 3) for i in range(50)],
            "st": [{"x": i, "y": float(i)} for i in range(50)],
            "s": [f"s{i}" * (i % 4) for i in range(50)],
        }
    )
    lance.write_dataset(t, uri, data_storage_version=storage, max_rows_per_file=20)
    lance.write_dataset(t.slice(0, 5), uri, mode="append")
    lance.dataset(uri).add_columns({"b": "a * 2"})
    for version in (1, 2, 3):
        ref = lance.dataset(uri, version=version).stats.data_stats()
        ours = lance_gpu.dataset(uri, version=version).stats.data_stats()
        assert _data_stats(ours) == _data_stats(ref)


def test_checkout_version_tuple(uri: str) -> None:
    for ref_arg in ((None, 2), ("main", 3), (None, None)):
        assert lance_gpu.dataset(uri).checkout_version(ref_arg).version == lance.dataset(uri).checkout_version(ref_arg).version


def test_cleanup_with_indices_and_compaction(tmp_path: Path) -> None:
    """Index directories and data files no kept version references go, exactly as in pylance."""
    base = str(tmp_path / "base.lance")
    t = pa.table({"a": list(range(1000)), "s": [str(i) for i in range(1000)]})
    lance.write_dataset(t, base)
    lance.dataset(base).create_scalar_index("a", "BTREE")
    lance.write_dataset(t, base, mode="append")
    lance.dataset(base).create_scalar_index("a", "BTREE", replace=True)
    lance.dataset(base).optimize.compact_files()
    lance.write_dataset(t, base, mode="overwrite")
    ref_uri, our_uri = str(tmp_path / "ref.lance"), str(tmp_path / "ours.lance")
    shutil.copytree(base, ref_uri)
    shutil.copytree(base, our_uri)
    time.sleep(0.05)
    ref = lance.dataset(ref_uri).cleanup_old_versions(older_than=dt.timedelta(0))
    ours = lance_gpu.dataset(our_uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert _files(our_uri) == _files(ref_uri)
    assert ours.index_files_removed == ref.index_files_removed > 0
    assert ours.data_files_removed == ref.data_files_removed > 0
    assert ours.bytes_removed == ref.bytes_removed


def test_tags_list_ordered_and_metadata(uri: str) -> None:
    for lib in (lance, lance_gpu):
        d = lib.dataset(uri)
        for name, version in (("b", 1), ("a", 3), ("c", 2), ("d", 3)):
            d.tags.create(name, version) if name not in d.tags.list() else None
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    for order in (None, "asc", "desc"):
        assert [n for n, _ in ours.tags.list_ordered(order)] == [n for n, _ in ref.tags.list_ordered(order)]
    with pytest.raises(ValueError, match="Invalid sort order"):
        ours.tags.list_ordered("up")
    ours.tags.replace_metadata("a", {"k": "v"})
    assert ref.tags.list()["a"] == ours.tags.list()["a"]
    assert ref.tags.list()["a"]["metadata"] == {"k": "v"}
    ref.tags.replace_metadata("c", {"x": "y"})
    assert ours.tags.list()["c"]["metadata"] == {"x": "y"}
    with pytest.raises(ValueError):
        ref.tags.replace_metadata("zz", {})
    with pytest.raises(TagNotFoundError):
        ours.tags.replace_metadata("zz", {})


def test_version_wins_over_asof(uri: str) -> None:
    now = dt.datetime.now()
    assert lance_gpu.dataset(uri, version=1, asof=now).version == lance.dataset(uri, version=1, asof=now).version == 1


@pytest.mark.parametrize(("file_version", "expected"), [((0, 3), "2.0"), ((0, 0), "0.1"), ((2, 0), "2.0")])
def test_data_storage_version_of_early_manifests(tmp_path: Path, file_version, expected: str) -> None:
    """Manifests of early pylance versions have no ``data_format``: the version comes from
    the data files, where 0.3 is how 2.0 files were first numbered (pylance 0.13's)."""
    import struct

    from lance_gpu._proto import table_pb2

    uri = tmp_path / "early.lance"
    lance.write_dataset(pa.table({"a": [1, 2]}), str(uri), data_storage_version="2.0")
    path = next((uri / "_versions").glob("*.manifest"))
    raw = path.read_bytes()
    (pos,) = struct.unpack_from("<Q", raw, len(raw) - 16)
    (length,) = struct.unpack_from("<I", raw, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(raw[pos + 4 : pos + 4 + length])
    manifest.ClearField("data_format")
    for frag in manifest.fragments:
        for df in frag.files:
            df.file_major_version, df.file_minor_version = file_version
    body = manifest.SerializeToString()
    path.write_bytes(raw[:pos] + struct.pack("<I", len(body)) + body + raw[len(raw) - 16 :])
    assert lance_gpu.dataset(str(uri)).data_storage_version == lance.dataset(str(uri)).data_storage_version == expected
