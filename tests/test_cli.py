# SPDX-License-Identifier: Apache-2.0
"""The ``lance-gpu`` command line, run as users run it: ``python3 -m lance_gpu ...`` in a
subprocess (with this checkout first on ``PYTHONPATH``), on pylance-written data, each
output checked against pylance's view of the same data.  Where a test runs several commands
whose exit status and output is all it checks, they run in one subprocess
(:func:`run_cli_many`: ``lance_gpu.cli.main`` per command line, what ``python3 -m lance_gpu``
runs), saving an interpreter start-up and the kernel loads of each."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from lance_gpu.cli._common import jsonable

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, ok: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    full_env.update(env or {})
    out = subprocess.run([sys.executable, "-m", "lance_gpu", *args], capture_output=True, text=True, env=full_env, timeout=300, check=False)
    if ok:
        assert out.returncode == 0, out.stderr
    return out


# Runs ``lance_gpu.cli.main`` (what ``python3 -m lance_gpu`` runs) on each argv of a JSON list in
# one interpreter, each with its own stdout/stderr, and prints ``[[status, stdout, stderr], ...]``.
_MANY = r"""
import contextlib, io, json, sys
from lance_gpu.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def run_cli_many(argvs: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """The outcome of each command line of ``argvs``, as :func:`run_cli` (``ok=False``) gives
    it, from one subprocess: one interpreter start-up (~1 s) instead of one per command.  For
    checks of ``main``'s exit status and output; :func:`run_cli` runs the real entry point."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run([sys.executable, "-c", _MANY, json.dumps(argvs)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(argvs)
    return [subprocess.CompletedProcess(argv, code, out, err) for argv, (code, out, err) in zip(argvs, results, strict=True)]


def sample() -> pa.Table:
    n = 60
    struct = pa.struct([("x", pa.int32()), ("y", pa.list_(pa.int64()))])
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "s": pa.array([{"x": i, "y": [i, None]} if i % 7 else None for i in range(n)], struct),
        "name": pa.array([f"n{i}" if i % 5 else None for i in range(n)]),
        "score": pa.array([i / 4 for i in range(n)], pa.float64()),
    })


@pytest.fixture(scope="module")
def pylance_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two versions (a delete in the second), three fragments, a tag ``first`` on version 1."""
    uri = str(tmp_path_factory.mktemp("cli") / "d.lance")
    ds = lance.write_dataset(sample(), uri, max_rows_per_file=25)
    ds.delete("id = 3 OR id = 40")
    ds.tags.create("first", 1)
    return uri


def copy_of(uri: str, tmp_path: Path) -> str:
    dest = str(tmp_path / "copy.lance")
    shutil.copytree(uri, dest)
    return dest


# -- help -----------------------------------------------------------------------------------

COMMANDS = ("demo", "info", "versions", "head", "scan", "convert", "delete", "compact", "cleanup", "verify")


def test_top_level_help_lists_every_command() -> None:
    out = run_cli("--help").stdout
    for cmd in COMMANDS:
        assert f"    {cmd} " in out
    assert "examples:" in out


@pytest.fixture(scope="module")
def command_helps() -> dict[str, subprocess.CompletedProcess[str]]:
    """``lance-gpu CMD --help`` of every command, from one interpreter."""
    return dict(zip(COMMANDS, run_cli_many([[cmd, "--help"] for cmd in COMMANDS]), strict=True))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_each_command_has_help_and_examples(cmd: str, command_helps: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert command_helps[cmd].returncode == 0, command_helps[cmd].stderr
    out = command_helps[cmd].stdout
    assert f"lance-gpu {cmd}" in out and "examples:" in out
    if cmd not in ("demo", "convert"):
        assert "--storage-option" in out


# -- looking at data ------------------------------------------------------------------------


def test_info_matches_pylance(pylance_ds: str) -> None:
    info = json.loads(run_cli("info", pylance_ds, "--json", "--fragments").stdout)
    ref = lance.dataset(pylance_ds)
    assert info["version"] == ref.version == info["latest_version"]
    assert info["num_versions"] == len(ref.versions())
    assert info["rows"] == ref.count_rows()
    assert info["data_storage_version"] == ref.data_storage_version
    assert info["tags"] == {k: v["version"] for k, v in ref.tags.list().items()}
    assert [f["id"] for f in info["fragments"]] == [f.fragment_id for f in ref.get_fragments()]
    assert [f["rows"] for f in info["fragments"]] == [f.count_rows() for f in ref.get_fragments()]
    assert [f["files"] for f in info["fragments"]] == [[d.path for d in f.data_files()] for f in ref.get_fragments()]
    assert info["schema"] == [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in ref.schema]
    assert info["data_bytes"] == sum(os.path.getsize(os.path.join(pylance_ds, "data", d.path)) for f in ref.get_fragments() for d in f.data_files())
    assert info["indices"] == []
    text = run_cli("info", pylance_ds, "--version", "first").stdout
    assert f"version 1 of {ref.version}" in text and f"rows: {lance.dataset(pylance_ds, version=1).count_rows()}" in text


def test_info_lists_indices_like_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "ix.lance")
    ds = lance.write_dataset(pa.table({"id": list(range(100)), "x": [str(i) for i in range(100)]}), uri)
    ds.create_scalar_index("id", "BTREE")
    info = json.loads(run_cli("info", uri, "--json").stdout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # list_indices is deprecated, still the flat view
        ref = lance.dataset(uri).list_indices()
    assert [(i["name"], i["uuid"], i["fields"], i["version"]) for i in info["indices"]] == [(i["name"], i["uuid"], i["fields"], i["version"]) for i in ref]
    assert "indices: id_idx (id)" in run_cli("info", uri).stdout


def test_versions_match_pylance(pylance_ds: str) -> None:
    rows = [json.loads(line) for line in run_cli("versions", pylance_ds, "--json").stdout.splitlines()]
    ref = lance.dataset(pylance_ds).versions()
    assert [r["version"] for r in rows] == [v["version"] for v in ref]
    for r, v in zip(rows, ref, strict=True):
        assert abs(_dt.datetime.fromisoformat(r["timestamp"]) - v["timestamp"]) < _dt.timedelta(seconds=1)
    assert [r["tags"] for r in rows] == [["first"], []]


def test_head_table_shows_nulls_and_nesting_faithfully(pylance_ds: str) -> None:
    lines = run_cli("head", pylance_ds, "-n", "8").stdout.splitlines()
    ref = lance.dataset(pylance_ds).to_table().slice(0, 8)
    assert lines[0].split() == ref.column_names
    assert lines[1].startswith("int64") and "struct<x: int32, y: list<item: int64>>" in lines[1]
    body = lines[3:]
    assert len(body) == 8
    assert [int(line.split()[0]) for line in body] == ref["id"].to_pylist()
    by_id = {int(line.split()[0]): line for line in body}
    assert by_id[0].split()[1:] == ["null", "null", "0.0"]  # a null struct, a null string
    assert "{x: 1, y: [1, null]}" in by_id[1] and by_id[1].split()[-2:] == ["n1", "0.25"]
    assert 3 not in by_id  # deleted


@pytest.mark.parametrize(
    "cli_args, kwargs",
    [
        ([], {}),
        (["-c", "id,name", "-f", "id > 20 AND name IS NOT NULL", "-n", "7"], {"columns": ["id", "name"], "filter": "id > 20 AND name IS NOT NULL", "limit": 7}),
        (["--version", "first", "-f", "id < 5"], {"filter": "id < 5", "version": 1}),
        (["--version", "1", "-c", "s"], {"columns": ["s"], "version": 1}),
    ],
)
def test_scan_json_matches_pylance(pylance_ds: str, cli_args: list[str], kwargs: dict) -> None:
    out = run_cli("scan", pylance_ds, "--format", "json", *cli_args).stdout
    version = kwargs.pop("version", None)
    ref = lance.dataset(pylance_ds, version=version).to_table(**kwargs)
    assert [json.loads(line) for line in out.splitlines()] == jsonable(ref.to_pylist())


def test_scan_to_parquet_and_csv_match_pylance(pylance_ds: str, tmp_path: Path) -> None:
    ref = lance.dataset(pylance_ds).to_table(filter="id >= 10")
    run_cli("scan", pylance_ds, "-f", "id >= 10", "-o", str(tmp_path / "rows.parquet"))
    assert pq.read_table(tmp_path / "rows.parquet").equals(ref)
    run_cli("scan", pylance_ds, "-c", "id,name,score", "-f", "id >= 10", "-o", str(tmp_path / "rows.csv"))
    got = pcsv.read_csv(tmp_path / "rows.csv", convert_options=pcsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False))
    assert got.column("id").to_pylist() == ref["id"].to_pylist()
    assert got.column("name").to_pylist() == ref["name"].to_pylist()
    assert got.column("score").to_pylist() == ref["score"].to_pylist()


# -- convert -------------------------------------------------------------------------------


def test_convert_parquet_to_lance_to_parquet_round_trips(tmp_path: Path) -> None:
    table = sample()
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=16)
    # in order, in one interpreter (a writing command's first run loads its kernels: ~2 s)
    runs = run_cli_many([
        ["convert", str(tmp_path / "in.parquet"), str(tmp_path / "c.lance"), "--batch-size", "10", "--max-rows-per-file", "25"],
        ["convert", str(tmp_path / "c.lance"), str(tmp_path / "back.parquet")],
        ["convert", str(tmp_path / "c.lance"), str(tmp_path / "part.parquet"), "-c", "id,name", "-f", "id > 50"],
    ])
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    assert "converted 60 rows" in runs[0].stdout
    ref = lance.dataset(str(tmp_path / "c.lance"))
    assert ref.to_table().equals(table) and len(ref.get_fragments()) == 3
    assert pq.read_table(tmp_path / "back.parquet").equals(table)
    assert pq.read_table(tmp_path / "part.parquet").equals(ref.to_table(columns=["id", "name"], filter="id > 50"))


def test_convert_csv_ipc_and_directories_to_lance(tmp_path: Path) -> None:
    flat = sample().select(["id", "name", "score"])
    pcsv.write_csv(flat, tmp_path / "in.csv")
    with pa.ipc.new_file(tmp_path / "in.arrow", flat.schema) as w:
        w.write_table(flat, max_chunksize=13)
    with pa.ipc.new_stream(tmp_path / "in.arrows", flat.schema) as w:
        w.write_table(flat, max_chunksize=13)
    (tmp_path / "dir").mkdir()
    pq.write_table(flat.slice(0, 30), tmp_path / "dir" / "a.parquet")
    pq.write_table(flat.slice(30), tmp_path / "dir" / "b.parquet")
    names = ("in.csv", "in.arrow", "in.arrows", "dir")
    runs = run_cli_many([["convert", str(tmp_path / name), str(tmp_path / f"{name}.lance"), "-q"] for name in names])
    for name, run in zip(names, runs, strict=True):
        assert run.returncode == 0, (name, run.stderr)
        got = lance.dataset(str(tmp_path / f"{name}.lance")).to_table()
        assert got.num_rows == 60, name
        assert got.sort_by("id").equals(flat.cast(got.schema)), name
    run_cli("convert", str(tmp_path / "in.csv"), str(tmp_path / "in.csv.lance"), "--mode", "append")
    assert lance.dataset(str(tmp_path / "in.csv.lance")).count_rows() == 120


# -- changing data ---------------------------------------------------------------------------


def test_delete_and_compact_agree_with_pylance(pylance_ds: str, tmp_path: Path) -> None:
    uri = copy_of(pylance_ds, tmp_path)
    out = run_cli("delete", uri, "id >= 50").stdout
    ref = lance.dataset(uri)
    assert f"deleted 10 rows; now version {ref.version} with {ref.count_rows()} rows" in out
    assert ref.to_table().equals(lance.dataset(pylance_ds).to_table(filter="id < 50"))
    before = ref.to_table()
    out = run_cli("compact", uri).stdout
    ref = lance.dataset(uri)
    assert "compacted 2 fragments into 1" in out  # the third lost all its rows to the delete and len(ref.get_fragments()) == 1
    assert ref.to_table().equals(before)
    assert "nothing to compact" in run_cli("compact", uri).stdout


def test_cleanup_removes_what_pylance_removes(pylance_ds: str, tmp_path: Path) -> None:
    ours = copy_of(pylance_ds, tmp_path / "a")
    theirs = copy_of(pylance_ds, tmp_path / "b")
    for uri in (ours, theirs):
        lance.dataset(uri).delete("id = 1")
        lance.dataset(uri).optimize.compact_files()
    failed = run_cli("cleanup", ours, "--older-than", "0s", ok=False)
    assert failed.returncode == 1 and "tagged version(s) would be cleaned up: first (1)" in failed.stderr
    assert "removed 3 old versions" in run_cli("cleanup", ours, "--older-than", "0s", "--ignore-tagged").stdout
    stats = lance.dataset(theirs).cleanup_old_versions(older_than=_dt.timedelta(0), error_if_tagged_old_versions=False)
    assert stats.old_versions == 3
    assert [v["version"] for v in lance.dataset(ours).versions()] == [v["version"] for v in lance.dataset(theirs).versions()]
    for sub in ("data", "_deletions", "_versions"):  # the same files survive (data file names are random)
        assert len(os.listdir(os.path.join(ours, sub))) == len(os.listdir(os.path.join(theirs, sub))), sub
    for v in lance.dataset(ours).versions():
        assert lance.dataset(ours, version=v["version"]).to_table().equals(lance.dataset(theirs, version=v["version"]).to_table())


_AGED = {"data/old-orphan.lance": 8, "data/young-orphan.lance": 6, "_transactions/9-old.txn": 10, "_deletions/9-9-1.arrow": 3}


@pytest.mark.parametrize(
    ("argv", "kwargs"),
    [
        (["--older-than", "7d", "--retain-versions", "2"], {"older_than": _dt.timedelta(days=7), "retain_versions": 2}),
        (["--older-than", "0s", "--retain-versions", "2", "--ignore-tagged"],
         {"older_than": _dt.timedelta(0), "retain_versions": 2, "error_if_tagged_old_versions": False}),
        (["--retain-versions", "1", "--ignore-tagged"], {"retain_versions": 1, "error_if_tagged_old_versions": False}),
        (["--retain-versions", "1", "--ignore-tagged", "--delete-unverified"],
         {"retain_versions": 1, "error_if_tagged_old_versions": False, "delete_unverified": True}),
    ],
)
def test_cleanup_options_match_pylance(pylance_ds: str, tmp_path: Path, argv: list[str], kwargs: dict) -> None:
    """``lance-gpu cleanup`` with --older-than / --retain-versions on one copy, pylance's
    ``cleanup_old_versions`` with the same options on another (three versions, a tag on the
    first, unreferenced files of several ages): the same files survive, the same counts."""
    now = time.time()
    # compacted once, then copied: both sides hold the same bytes (a manifest's timestamp
    # varint may differ in length between two compactions, and with it the bytes removed)
    compacted = copy_of(pylance_ds, tmp_path / "compacted")
    lance.dataset(compacted).optimize.compact_files()
    copies = []
    for side in ("ours", "theirs"):
        uri = copy_of(compacted, tmp_path / side)
        for rel, days in _AGED.items():
            path = Path(uri, rel)
            path.write_bytes(b"q" * 11)
            os.utime(path, (now - days * 86400, now - days * 86400))
        copies.append(uri)
    ours, theirs = copies
    out = run_cli("cleanup", ours, *argv).stdout
    stats = lance.dataset(theirs).cleanup_old_versions(**kwargs)
    assert f"removed {stats.old_versions} old versions and {stats.bytes_removed} bytes" in out

    def tree(uri: str) -> dict[str, list[str]]:
        return {sub: sorted(n if n in {Path(r).name for r in _AGED} else "*" for n in os.listdir(os.path.join(uri, sub)))
                for sub in ("data", "_deletions", "_transactions", "_versions")}

    assert tree(ours) == tree(theirs)
    assert [v["version"] for v in lance.dataset(ours).versions()] == [v["version"] for v in lance.dataset(theirs).versions()]
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())


# -- verify ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stable_ds(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("verify") / "v.lance")
    t = pa.table({"id": pa.array(range(3000), pa.int64()), "name": [f"n{i}" for i in range(3000)]})
    lance.write_dataset(t, uri, max_rows_per_file=1000, enable_stable_row_ids=True).delete("id % 10 = 3")
    return uri


def test_verify_passes_pylance_data(stable_ds: str) -> None:
    out = run_cli("verify", stable_ds).stdout
    assert out.startswith(f"OK {stable_ds} version 2: 3 fragments, 3 data files, 3 deletion files, {lance.dataset(stable_ds).count_rows()} rows decoded")


def _damage(kind: str, uri: str) -> str:
    frag = lance.dataset(uri).get_fragments()[1]
    data = os.path.join(uri, "data", frag.data_files()[0].path)
    if kind == "missing":
        os.unlink(data)
        return data
    if kind == "truncated":
        raw = Path(data).read_bytes()
        Path(data).write_bytes(raw[: len(raw) // 2])
        return data
    if kind == "scribbled":
        raw = bytearray(Path(data).read_bytes())
        for i in range(0, 2000, 3):
            raw[i] ^= 0xFF
        Path(data).write_bytes(bytes(raw))
        return data
    deletions = sorted(os.listdir(os.path.join(uri, "_deletions")))
    path = os.path.join(uri, "_deletions", deletions[0])
    Path(path).write_bytes(b"garbage")
    return path


@pytest.mark.parametrize("kind", ["missing", "truncated", "scribbled", "deletion"])
def test_verify_names_each_bad_file(stable_ds: str, tmp_path: Path, kind: str) -> None:
    uri = copy_of(stable_ds, tmp_path)
    bad = _damage(kind, uri)
    out = run_cli("verify", uri, ok=False)
    assert out.returncode == 3, out.stderr
    bad_lines = [line for line in out.stdout.splitlines() if line.startswith("BAD ")]
    assert [line.split(": ")[0] for line in bad_lines] == [f"BAD {bad}"]
    assert out.stdout.splitlines()[-1].startswith(f"DAMAGED {uri} version 2: 1 bad file(s)")


def test_verify_reports_several_files_in_one_run(stable_ds: str, tmp_path: Path) -> None:
    from lance_gpu.tools import verify

    uri = copy_of(stable_ds, tmp_path)
    bad = {_damage("missing", uri), _damage("deletion", uri)}
    events: list[tuple] = []
    report = verify(uri, progress=lambda *e: events.append(e))
    assert {p.path for p in report.problems} == bad and not report.ok
    assert events[0] == ("fragments verified", 0, 3) and events[-1] == ("fragments verified", 3, 3)


# -- errors ----------------------------------------------------------------------------------


def _errors(pylance_ds: str, tmp_path: Path) -> list[tuple[list[str], str, int]]:
    pq.write_table(sample(), tmp_path / "t.parquet")
    return [
        (["info", str(tmp_path / "missing.lance")], "does not exist", 1),
        (["head", pylance_ds, "-f", "id >"], "is missing its right-hand operand", 1),
        (["head", pylance_ds, "-c", "nope"], "nope", 1),
        (["head", pylance_ds, "--version", "7"], "7", 1),
        (["head", pylance_ds, "--version", "no-such-tag"], "no-such-tag", 1),
        (["scan", pylance_ds, "-o", str(tmp_path / "out.txt")], "cannot tell the output format", 2),
        (["convert", str(tmp_path / "t.parquet"), pylance_ds], "already exists", 1),
        (["convert", str(tmp_path / "nothing.parquet"), str(tmp_path / "x.lance")], "nothing.parquet", 1),
        (["convert", str(tmp_path / "t.txt"), str(tmp_path / "x.lance")], "cannot tell the format", 1),
        (["convert", pylance_ds, str(tmp_path / "out.csv")], "converts to Parquet only", 1),
        (["info", str(tmp_path / "t.parquet")], "is not a Lance dataset: no _versions/", 1),
        (["head", pylance_ds, "--format", "parquet"], "needs --output", 2),
        (["delete", pylance_ds, "nope = 1"], "nope", 1),
        (["cleanup", pylance_ds, "--retain-versions", "0"], "--retain-versions must be positive", 2),
    ]


def test_common_mistakes_print_one_line(pylance_ds: str, tmp_path: Path) -> None:
    Path(tmp_path / "t.txt").write_text("x")
    errors = _errors(pylance_ds, tmp_path)
    # the first through the real entry point, the rest (and the first again) in one interpreter
    outs = [run_cli(*errors[0][0], ok=False), *run_cli_many([args for args, _, _ in errors])]
    for (args, needle, code), out in zip([errors[0], *errors], outs, strict=True):
        lines = out.stderr.strip().splitlines()
        assert out.returncode == code, (args, out.stderr)
        assert len(lines) == 1 and lines[0].startswith("lance-gpu: error: ") and needle in lines[0], (args, out.stderr)
        assert out.stdout == ""
    (out,) = run_cli_many([["info", pylance_ds, "--storage-option", "novalue"]])
    assert out.returncode == 2 and "expected key=value" in out.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    out = run_cli("info", str(tmp_path / "missing.lance"), "--debug", ok=False)
    assert out.returncode == 1 and "Traceback (most recent call last)" in out.stderr and "NotADatasetError" in out.stderr


# -- storage options --------------------------------------------------------------------------


def test_storage_options_are_passed_through_only_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    import lance_gpu
    from lance_gpu.cli import build_parser
    from lance_gpu.cli._common import storage_options
    from lance_gpu.tools._open import open_dataset

    seen: list[dict] = []
    monkeypatch.setattr(lance_gpu, "dataset", lambda uri, version=None, **kw: seen.append(kw))
    for cmd in (["info", "u"], ["versions", "u"], ["head", "u"], ["scan", "u"], ["convert", "src", "u"], ["delete", "u", "x"], ["compact", "u"], ["cleanup", "u"], ["verify", "u"]):
        args = build_parser().parse_args([*cmd, "-s", "region=eu", "--storage-option", "token=a=b"])
        assert storage_options(args) == {"region": "eu", "token": "a=b"}, cmd
        assert storage_options(build_parser().parse_args(cmd)) is None
    open_dataset("u", None, {"region": "eu"})
    open_dataset("u", None, None)
    assert seen == [{"storage_options": {"region": "eu"}}, {}]


# -- progress ---------------------------------------------------------------------------------


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    pq.write_table(sample(), tmp_path / "in.parquet")
    out = run_cli("convert", str(tmp_path / "in.parquet"), str(tmp_path / "c.lance"))
    assert out.stderr == ""


def _under_pty(args: list[str]) -> str:
    """Run the command with stdout and stderr on a fresh pseudo-terminal; what it showed."""
    import pty

    leader, follower = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, "-m", "lance_gpu", *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=300) == 0, b"".join(chunks)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.skipif(sys.platform == "win32", reason="pty is POSIX")
def test_progress_bar_under_a_terminal_and_quiet_turns_it_off(tmp_path: Path) -> None:
    pq.write_table(sample(), tmp_path / "in.parquet")
    shown = _under_pty(["convert", str(tmp_path / "in.parquet"), str(tmp_path / "a.lance"), "--batch-size", "7"])
    assert "\rconverted:   0%|" in shown and " rows/s]" in shown
    quiet = _under_pty(["convert", str(tmp_path / "in.parquet"), str(tmp_path / "b.lance"), "--quiet"])
    assert "|" not in quiet and "converted 60 rows" in quiet


# -- the progress= hooks in Python ------------------------------------------------------------


def test_progress_hooks_of_write_compaction_and_convert(tmp_path: Path) -> None:
    import lance_gpu
    from lance_gpu.tools import convert

    events: list[tuple] = []
    ds = lance_gpu.write_dataset(sample(), str(tmp_path / "w.lance"), max_rows_per_file=10, progress=lambda *e: events.append(e))
    assert events[0] == ("rows written", 0, 60) and events[-1] == ("rows written", 60, 60)
    ds.delete("id < 5")
    events.clear()
    ds.optimize.compact_files(progress=lambda *e: events.append(e))
    assert events[0] == ("fragments compacted", 0, 6) and events[-1] == ("fragments compacted", 6, 6)
    events.clear()
    result = convert(str(tmp_path / "w.lance"), str(tmp_path / "w.parquet"), batch_size=20, progress=lambda *e: events.append(e))
    assert result.rows == 55 and events[0] == ("rows converted", 0, 55) and events[-1] == ("rows converted", 55, 55)
    assert [e[1] for e in events] == [0, 20, 40, 55]
    assert pq.read_table(tmp_path / "w.parquet").equals(lance.dataset(str(tmp_path / "w.lance")).to_table())


@pytest.mark.slow  # compiles every decoder in a fresh process
def test_demo_still_works() -> None:
    out = run_cli("demo", "--rows", "300").stdout
    assert "round trip: OK" in out


def test_cleanup_keeps_unreferenced_files_unless_told(pylance_ds: str, tmp_path: Path) -> None:
    from lance_gpu.tools import cleanup_old_versions

    uri = copy_of(pylance_ds, tmp_path)
    orphan = Path(uri) / "data" / "leftover-of-a-failed-write.lance"
    orphan.write_bytes(b"x" * 100)
    stats = cleanup_old_versions(uri, _dt.timedelta(0), error_if_tagged_old_versions=False)
    assert stats.old_versions == 0 and orphan.exists()  # version 1 is tagged, 2 the latest
    stats = cleanup_old_versions(uri, _dt.timedelta(0), error_if_tagged_old_versions=False, delete_unverified=True)
    assert stats.bytes_removed == 100 and not orphan.exists()
    assert lance.dataset(uri, version=1).to_table().equals(lance.dataset(pylance_ds, version=1).to_table())
