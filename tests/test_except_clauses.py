# SPDX-License-Identifier: Apache-2.0
"""Exceptions that existing ``except`` clauses catch (issue 26 item 7): for each mistake,
the builtin class pylance 14.0.2 raises (checked here on pylance) also catches ours, and our
message names what the user wrote."""

from __future__ import annotations

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
from lance.commit import CommitConflictError as RefCommitConflictError  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu.errors import LanceGpuError  # noqa: E402


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("exc") / "e.lance")
    lance.write_dataset(pa.table({"a": [1, 2, 3], "s": ["x", "y", "z"]}), path)
    lance.dataset(path).tags.create("t1", 1)
    return path


#: (case, call(module, uri), the builtin pylance raises, text our message contains)
CASES = [
    ("missing dataset", lambda m, u: m.dataset(u + "_nope"), ValueError, "does not exist"),
    ("missing version", lambda m, u: m.dataset(u, version=42), ValueError, "42"),
    ("missing tag", lambda m, u: m.dataset(u, version="nosuchtag"), ValueError, "nosuchtag"),
    ("checkout of a missing version", lambda m, u: m.dataset(u).checkout_version(42), OSError, "42"),
    ("delete with an unknown column", lambda m, u: m.dataset(u).delete("nope = 1"), OSError, "'nope'"),
    ("delete that does not parse", lambda m, u: m.dataset(u).delete("a = = 1"), OSError, "a = = 1"),
    ("update with an unknown column", lambda m, u: m.dataset(u).update({"a": "nope + 1"}), ValueError, "update expression 'a'"),
    ("update with a bad where", lambda m, u: m.dataset(u).update({"a": "1"}, where="nope > 1"), ValueError, "'nope'"),
    ("add_columns with an unknown column", lambda m, u: m.dataset(u).add_columns({"b": "nope + 1"}), OSError,
     "add_columns expression 'b'"),
    ("add_columns of an existing column", lambda m, u: m.dataset(u).add_columns({"a": "a + 1"}), OSError, "Column a already exists"),
    ("filter with an unknown column", lambda m, u: m.dataset(u).to_table(filter="nope > 1"), ValueError, "filter 'nope > 1'"),
    ("filter that does not parse", lambda m, u: m.dataset(u).to_table(filter="a >"), ValueError, "a >"),
    ("count_rows with a bad filter", lambda m, u: m.dataset(u).count_rows("nope > 1"), OSError, "'nope'"),
    ("unknown projected column", lambda m, u: m.dataset(u).to_table(columns=["nope"]), ValueError, "nope"),
    ("take out of range", lambda m, u: m.dataset(u).take([10]), OSError, "10"),
    ("drop_columns of a missing column", lambda m, u: m.dataset(u).drop_columns(["nope"]), ValueError, "nope"),
    ("alter_columns with an unknown key", lambda m, u: m.dataset(u).alter_columns({"path": "a", "type": "string"}),
     ValueError, "Unknown key: type. Valid keys are name, nullable, and data_type."),
    ("alter_columns that changes nothing", lambda m, u: m.dataset(u).alter_columns({"path": "a"}), ValueError,
     "At least one of name, nullable, or data_type must be specified"),
    ("alter_columns of a missing column", lambda m, u: m.dataset(u).alter_columns({"path": "nope", "name": "x"}), OSError, "nope"),
    ("tag that exists", lambda m, u: m.dataset(u).tags.create("t1", 1), ValueError, "t1"),
    ("delete of a missing tag", lambda m, u: m.dataset(u).tags.delete("zz"), ValueError, "zz"),
    ("create over a dataset", lambda m, u: m.write_dataset(pa.table({"a": [1]}), u, mode="create"), OSError, "exists"),
    ("append of another schema", lambda m, u: m.write_dataset(pa.table({"q": [1.0]}), u, mode="append"), OSError, "'q'"),
    ("negative limit", lambda m, u: m.dataset(u).to_table(limit=-1), ValueError, "-1"),
    ("unknown scanner argument", lambda m, u: m.dataset(u).scanner(bogus=1), TypeError, "bogus"),
    ("merge_insert on a missing key", lambda m, u: m.dataset(u).merge_insert("nope").when_matched_update_all().execute(
        pa.table({"a": [1]})), ValueError, "nope"),
    ("read_transaction of a missing version", lambda m, u: m.dataset(u).read_transaction(99), OSError, "99"),
    ("fragment delete with an unknown column", lambda m, u: m.dataset(u).get_fragment(0).delete("nope > 1"), OSError, "'nope'"),
    ("add_columns from a stream too short", lambda m, u: m.dataset(u).add_columns(
        iter([pa.record_batch([pa.array([1])], ["f"])]), reader_schema=pa.schema([pa.field("f", pa.int64())])),
     OSError, "Stream ended before producing values for all rows"),
    ("fragment create of no rows", lambda m, u: m.LanceFragment.create(u + "_empty", pa.table({"a": pa.array([], pa.int64())})),
     OSError, "empty"),
    ("fragment create of no columns", lambda m, u: m.LanceFragment.create(u + "_empty", pa.table({})), OSError, "empty schema"),
    ("fragment merge_columns of an existing column", lambda m, u: m.dataset(u).get_fragment(0).merge_columns({"a": "a"}),
     ValueError, "already exists"),
]


@pytest.mark.parametrize(("case", "call", "builtin", "text"), CASES, ids=[c[0] for c in CASES])
def test_pylance_except_clause_catches_ours(uri: str, case: str, call, builtin: type, text: str) -> None:
    with pytest.raises(builtin):
        call(lance, uri)
    with pytest.raises(builtin) as caught:
        call(lance_gpu, uri)
    assert isinstance(caught.value, LanceGpuError) or type(caught.value) in (ValueError, TypeError)
    assert text in str(caught.value)


def test_cli_hints_flags_not_keyword_arguments(tmp_path, capsys) -> None:
    """The command line names its own flags in hints (``--mode append``), not the
    library's keyword arguments (``mode='append'``)."""
    import pyarrow.parquet as pq

    from lance_gpu.cli import main

    source = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"a": [1, 2]}), source)
    dest = str(tmp_path / "t.lance")
    assert main(["convert", source, dest, "-q"]) == 0
    capsys.readouterr()
    assert main(["convert", source, dest, "-q"]) == 1
    err = capsys.readouterr().err
    assert "(use --mode append or --mode overwrite)" in err and "mode='" not in err


def _strict_overwrite(m, base: str) -> None:
    """Two overwrites from the same read version, no retries: the second conflicts."""
    table = pa.table({"a": [1, 2]})
    operation = m.LanceOperation.Overwrite(table.schema, [m.LanceFragment.create(base, table)])
    first = m.LanceDataset.commit(base, operation, max_retries=0)
    m.LanceDataset.commit(base, operation, read_version=first.version, max_retries=0)
    m.LanceDataset.commit(base, operation, read_version=first.version, max_retries=0)


def _preempted_delete(m, base: str) -> None:
    """A delete committed from a version whose fragments a concurrent delete changed."""
    m.write_dataset(pa.table({"a": list(range(10))}), base)
    stale = m.dataset(base)
    m.dataset(base).delete("a < 5")
    m.LanceDataset.commit(base, m.LanceOperation.Delete([], [f.fragment_id for f in stale.get_fragments()], "a < 3"),
                          read_version=stale.version, max_retries=0)


@pytest.mark.parametrize(("call", "prefix"), [(_strict_overwrite, "Commit conflict for version 2: "),
                                              (_preempted_delete, "Retryable commit conflict for version 2: ")])
def test_commit_conflict_messages_start_as_pylance(tmp_path, call, prefix: str) -> None:
    """pylance's tests (and users) match the start of a conflict's message."""
    caught = {}
    for m in (lance, lance_gpu):
        with pytest.raises(OSError) as info:
            call(m, str(tmp_path / m.__name__))
        caught[m.__name__] = str(info.value)
    assert caught["lance"].startswith(prefix)
    assert caught["lance_gpu"].startswith(prefix)
    from lance_gpu.errors import CommitConflictError

    with pytest.raises(CommitConflictError):
        call(lance_gpu, str(tmp_path / "again"))


def test_failing_commit_lock_is_an_os_error_naming_it(tmp_path) -> None:
    """A commit lock that raises, entering or leaving, fails the commit with an ``OSError``
    naming the lock's exception (pylance: "Error from commit handler: ..."); nothing is
    committed when it raises on entering."""
    import contextlib

    from lance_gpu.errors import CommitLockError

    @contextlib.contextmanager
    def refuses(_version: int):
        raise RefCommitConflictError()
        yield  # pragma: no cover

    @contextlib.contextmanager
    def fails_after(_version: int):
        try:
            yield
        finally:
            raise Exception("hello world!")

    for lock, text in ((refuses, "CommitConflictError"), (fails_after, "hello world!")):
        for m in (lance, lance_gpu):
            uri = str(tmp_path / f"{m.__name__}_{lock.__name__}")
            with pytest.raises(OSError, match=text) as info:
                m.write_dataset(pa.table({"a": [1]}), uri, commit_lock=lock)
        assert isinstance(info.value, CommitLockError)
        assert isinstance(info.value.__cause__, Exception)
    with pytest.raises(ValueError):
        lance_gpu.dataset(str(tmp_path / "lance_gpu_refuses"))


def test_alter_columns_value_that_does_not_fit_is_an_os_error(tmp_path) -> None:
    """A stored value the new type cannot hold: pylance's ``OSError`` and its message."""
    for m in (lance, lance_gpu):
        uri = str(tmp_path / m.__name__)
        m.write_dataset(pa.table({"a": [1, 5, 1024, 2000]}), uri)
        with pytest.raises(OSError, match="Can't cast value 1024 to type Int8"):
            m.dataset(uri).alter_columns({"path": "a", "data_type": pa.int8()})
        assert m.dataset(uri).version == 1


def test_dataset_commit_lock_guards_later_mutations(tmp_path) -> None:
    """``dataset(uri, commit_lock=lock)``: the dataset's mutations (its merge_insert builders
    and ``ds.optimize`` too) commit under ``lock``, as pylance's; a lock that refuses fails them with an
    ``OSError`` naming its exception, and nothing is committed."""
    import contextlib

    calls: dict[str, list[int]] = {}

    def counting(name: str):
        @contextlib.contextmanager
        def lock(version: int):
            calls.setdefault(name, []).append(version)
            yield
        return lock

    @contextlib.contextmanager
    def refuses(_version: int):
        raise RefCommitConflictError()
        yield  # pragma: no cover

    for m in (lance, lance_gpu):
        uri = str(tmp_path / m.__name__)
        m.write_dataset(pa.table({"a": list(range(20))}), uri)
        ds = m.dataset(uri, commit_lock=counting(m.__name__))
        ds.delete("a < 2")
        ds.update({"a": "a + 100"}, where="a = 5")
        ds.merge_insert("a").when_not_matched_insert_all().execute(pa.table({"a": [1000]}))
        ds.optimize.compact_files()
        with pytest.raises(OSError, match="CommitConflictError"):
            m.dataset(uri, commit_lock=refuses).delete("a < 10")
        assert m.dataset(uri).count_rows() == 19
    # a compaction commits twice (fragment ids reserved at 5, the rewrite at 6), both locked
    assert calls["lance_gpu"] == calls["lance"] == [2, 3, 4, 5, 6]
