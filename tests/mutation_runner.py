# SPDX-License-Identifier: Apache-2.0
"""The seeded mutation suite's machinery (used by ``tests/test_mutations.py``).

Not collected by pytest (no ``test_`` prefix).  Three parts:

* :func:`build_datasets` writes small pylance datasets that between them hold every kind of
  file lance-gpu reads: data files of file versions 2.0 and 2.2 (mini-block strings,
  full-zip long strings, binary, lists, structs, nullable floats), manifests, deletion files
  (``.arrow`` and ``.bin``), transaction files, stable row ids; and the pristine results of
  each read (pylance's, stored as Arrow IPC).
* :func:`make_cases` draws the mutations from a seed: bit flips, truncations, zeroed ranges
  and swapped ranges, in every file.
* :func:`run_cases` runs them in a child process (``python tests/mutation_runner.py SPEC START``)
  that prints one line per case; a per-case ``faulthandler`` timer ends a hung child, and
  a crashed or hung child is restarted after the case that killed it.

A case passes when every read (``to_table``, ``count_rows``, ``take``, ``to_batches``)
either returns exactly the pristine result or raises a ``LanceGpuError``, and every table
returned passes ``validate(full=True)``; a mutated transaction file is also parsed directly
(``read_transaction_file``: a result or a ``LanceGpuError``).  A result that differs from the pristine one is
accepted only where pylance, reading the same damaged bytes, returns the very same result
(damage to plain values that no format check can see: Lance files carry no checksums).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPS = ("to_table", "count_rows", "take", "to_batches")
KINDS = ("flip", "truncate", "zero", "swap")


@dataclass
class Case:
    id: int
    dataset: str  # pristine dataset directory
    file: str  # path of the mutated file, relative to the dataset
    kind: str
    seed: int


# ------------------------------------------------------------------------------------------
# datasets


def _table(n: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(3)
    words = ["alpha", "béta", "gamma", "日本", "delta"]
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "s": pa.array([f"{words[i % 5]}-{int(x)}" for i, x in enumerate(rng.integers(0, 10**6, n))]),
            "long": pa.array(
                [f"{i:05d}" + "".join(map(chr, rng.integers(97, 123, 120))) if i % 9 else None for i in range(n)]
            ),
            "b": pa.array([bytes(rng.integers(0, 256, int(k)).astype("u1")) for k in rng.integers(0, 12, n)], pa.binary()),
            "li": pa.array([list(range(i % 4)) if i % 7 else None for i in range(n)], pa.list_(pa.int32())),
            "st": pa.StructArray.from_arrays(
                [pa.array(np.arange(n, dtype=np.int32)), pa.array([words[i % 5] for i in range(n)])], names=["a", "w"]
            ),
            "f": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.1),
        }
    )


def build_datasets(root: Path) -> list[Path]:
    """Write the pristine datasets under ``root`` and their expected read results."""
    import lance
    import pyarrow as pa

    out = []
    specs = [
        ("v22_rowids", {"data_storage_version": "2.2", "max_rows_per_file": 600, "enable_stable_row_ids": True}, 1200),
        ("v20", {"data_storage_version": "2.0", "max_rows_per_file": 600}, 1200),
        ("v21_bitmap", {"data_storage_version": "2.1", "max_rows_per_file": 10000}, 10000),
    ]
    for name, kwargs, n in specs:
        uri = root / name
        tbl = _table(n)
        if name == "v21_bitmap":
            tbl = tbl.select(["id", "s", "f"])
        lance.write_dataset(tbl, str(uri), **kwargs)
        ds = lance.dataset(str(uri))
        if name == "v21_bitmap":
            ds.delete("id % 2 = 0")  # over 4096 rows: pylance writes a .bin roaring bitmap
        ds.delete("id % 100 = 7")
        ds = lance.dataset(str(uri))
        count = ds.count_rows()
        expected = {
            "to_table": ds.to_table(),
            "take": ds.take(take_indices(count)),
            "to_batches": pa.Table.from_batches(list(ds.to_batches(batch_size=333))),
        }
        exp_dir = root / f"{name}.expected"
        exp_dir.mkdir()
        for op, t in expected.items():
            with pa.OSFile(str(exp_dir / f"{op}.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
                w.write_table(t)
        (exp_dir / "count_rows.json").write_text(json.dumps(count))
        out.append(uri)
    return out


def take_indices(count: int) -> list[int]:
    return sorted({0, min(5, count - 1), count // 2, count - 1}) if count else []


def mutable_files(uri: Path) -> list[str]:
    """Every file of the dataset a reader may touch (the latest manifest only), in an order
    that does not depend on the random parts of their names (so that a seed names the same
    mutations in every build): data and deletion files by fragment, transactions by version."""
    import lance

    ds = lance.dataset(str(uri))
    files = []
    for frag in ds.get_fragments():
        meta = frag.metadata
        files += [f"data/{df.path}" for df in meta.files]
    for frag in ds.get_fragments():
        deletion = frag.metadata.deletion_file
        if deletion is not None:
            files.append(deletion.path(frag.fragment_id))
    txns = sorted((uri / "_transactions").iterdir(), key=lambda p: int(p.name.split("-", 1)[0]))
    files += [f"_transactions/{p.name}" for p in txns]
    rowids = uri / "_rowids"
    if rowids.is_dir():
        files += [f"_rowids/{p.name}" for p in sorted(rowids.iterdir())]
    manifests = sorted((uri / "_versions").glob("*.manifest"))
    files.append(f"_versions/{manifests[0].name}")  # V2 names: the newest version sorts first
    return files


def make_cases(datasets: list[Path], count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    pool = [(str(uri), f) for uri in datasets for f in mutable_files(uri)]
    cases = []
    for i in range(count):
        uri, f = pool[i % len(pool)] if i < len(pool) else rng.choice(pool)
        cases.append(Case(i, uri, f, KINDS[rng.randrange(len(KINDS))], rng.randrange(1 << 30)))
    return cases


def mutate(raw: bytes, kind: str, seed: int) -> bytes:
    """Apply one mutation to ``raw``; offsets favour the file's tail (its metadata) half the time."""
    rng = random.Random(seed)
    data = bytearray(raw)
    size = len(data)
    if size == 0:
        return bytes(data)

    def pos(span: int = 1) -> int:
        hi = max(size - span, 0)
        if rng.random() < 0.5:
            return rng.randint(max(0, hi - 512), hi)
        return rng.randint(0, hi)

    if kind == "flip":
        for _ in range(rng.randint(1, 3)):
            p = pos()
            data[p] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(size) :]
    elif kind == "zero":
        n = min(rng.randint(1, 64), size)
        p = pos(n)
        data[p : p + n] = bytes(n)
    elif kind == "swap":
        n = min(rng.randint(4, 32), size // 2)
        if n:
            a, b = sorted(rng.sample(range(size - n + 1), 2)) if size - n + 1 >= 2 else (0, 0)
            if b - a >= n:
                data[a : a + n], data[b : b + n] = data[b : b + n], data[a : a + n]
            else:
                data[a] ^= 0xFF
    return bytes(data)


# ------------------------------------------------------------------------------------------
# child process


def _mutated_copy(case: Case, scratch: Path) -> Path:
    src = Path(case.dataset)
    dst = scratch / f"case_{case.id}"
    shutil.copytree(src, dst, copy_function=os.link)
    target = dst / case.file
    raw = target.read_bytes()
    target.unlink()  # never write through the hard link into the pristine file
    target.write_bytes(mutate(raw, case.kind, case.seed))
    return dst


def _load_expected(uri: str) -> dict:
    import pyarrow as pa

    exp_dir = Path(uri + ".expected")
    out = {op: pa.ipc.open_file(str(exp_dir / f"{op}.arrow")).read_all() for op in ("to_table", "take", "to_batches")}
    out["count_rows"] = json.loads((exp_dir / "count_rows.json").read_text())
    return out


def _run_op(mod, uri: str, op: str, count: int, **kwargs):
    import pyarrow as pa

    ds = mod.dataset(uri, **kwargs)
    if op == "to_table":
        return ds.to_table()
    if op == "count_rows":
        return ds.count_rows()
    if op == "take":
        return ds.take(take_indices(count))
    batches = list(ds.to_batches(batch_size=333))
    return pa.Table.from_batches(batches) if batches else ds.schema.empty_table()


def _same(a, b) -> bool:
    if isinstance(b, int) or isinstance(a, int):
        return a == b
    return a.schema.equals(b.schema) and a.combine_chunks().equals(b.combine_chunks())


def _child(spec_path: str, start: int) -> None:
    import faulthandler
    import warnings

    warnings.simplefilter("ignore")
    import lance_gpu
    from lance_gpu.errors import LanceGpuError

    spec = json.loads(Path(spec_path).read_text())
    scratch = Path(spec["scratch"])
    timeout = float(spec["timeout"])
    expected_cache: dict[str, dict] = {}
    for raw_case in spec["cases"][start:]:
        case = Case(**raw_case)
        print(f"START {case.id}", flush=True)
        faulthandler.dump_traceback_later(timeout, exit=True)
        expected = expected_cache.setdefault(case.dataset, _load_expected(case.dataset))
        uri = _mutated_copy(case, scratch)
        outcome = {"id": case.id, "ok": True, "notes": []}
        if case.file.startswith("_transactions/"):
            # read by writers resolving conflicts, not by reads: parse it directly too
            from lance_gpu.io import LOCAL
            from lance_gpu.table.manifest import read_transaction_file

            try:
                read_transaction_file(LOCAL, str(uri / case.file))
            except LanceGpuError as exc:
                outcome["notes"].append(f"transaction: typed {type(exc).__name__}")
            except Exception as exc:  # noqa: BLE001
                outcome["ok"] = False
                outcome["notes"].append(f"transaction: UNTYPED {type(exc).__name__}: {str(exc)[:300]}")
        for op in OPS:
            want = expected[op]
            try:
                got = _run_op(lance_gpu, str(uri), op, expected["count_rows"], device="cpu")
            except LanceGpuError as exc:
                outcome["notes"].append(f"{op}: typed {type(exc).__name__}")
                continue
            except Exception as exc:  # noqa: BLE001 - the point: anything else fails the case
                outcome["ok"] = False
                outcome["notes"].append(f"{op}: UNTYPED {type(exc).__module__}.{type(exc).__name__}: {str(exc)[:300]}")
                continue
            if not isinstance(got, int):
                try:
                    got.validate(full=True)
                except Exception as exc:  # noqa: BLE001
                    outcome["ok"] = False
                    outcome["notes"].append(f"{op}: INVALID ARROW {str(exc)[:200]}")
                    continue
            if _same(got, want):
                continue
            # Different data: acceptable only if pylance reads the same damaged bytes alike.
            print(f"PYLANCE {case.id}", flush=True)
            import lance

            try:
                theirs = _run_op(lance, str(uri), op, expected["count_rows"])
            except Exception as exc:  # noqa: BLE001
                outcome["ok"] = False
                outcome["notes"].append(f"{op}: WRONG DATA where pylance raises {type(exc).__name__}: {str(exc)[:150]}")
                continue
            if _same(got, theirs):
                outcome["notes"].append(f"{op}: value damage, read as pylance reads it")
            else:
                outcome["ok"] = False
                outcome["notes"].append(f"{op}: WRONG DATA, differs from pylance's result too")
        faulthandler.cancel_dump_traceback_later()
        shutil.rmtree(uri, ignore_errors=True)
        print("RESULT " + json.dumps(outcome), flush=True)


def run_cases(cases: list[Case], scratch: Path, *, timeout: float = 20.0, total_timeout: float = 900.0) -> list[dict]:
    """Run ``cases`` in child processes; one result dict per case (hangs and crashes included)."""
    import time

    spec = scratch / "spec.json"
    scratch.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"scratch": str(scratch), "timeout": timeout, "cases": [asdict(c) for c in cases]}))
    results: dict[int, dict] = {}
    start = 0
    deadline = time.monotonic() + total_timeout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    while start < len(cases):
        left = deadline - time.monotonic()
        if left <= 0:
            for c in cases[start:]:
                results[c.id] = {"id": c.id, "ok": False, "notes": ["suite ran out of time before this case"]}
            break
        cmd = [sys.executable, str(Path(__file__).resolve()), str(spec), str(start)]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=left, check=False)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, rc = "suite timeout", -1
        current = None
        in_pylance = False
        for line in out.splitlines():
            if line.startswith("START "):
                current = int(line.split()[1])
                in_pylance = False
            elif line.startswith("PYLANCE "):
                in_pylance = True
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results[r["id"]] = r
                current = None
        if rc == 0 and current is None:
            break
        if current is None:
            raise RuntimeError(f"mutation child failed outside a case (rc {rc}): {err[-3000:]}")
        if in_pylance:
            note = "pylance crashed or hung on this case while lance-gpu returned other data than the pristine one"
            results[current] = {"id": current, "ok": True, "notes": [note]}
        else:
            what = "hung (per-case timeout)" if "Timeout" in err or "timeout" in err else f"crashed (rc {rc})"
            results[current] = {"id": current, "ok": False, "notes": [f"lance-gpu {what}: {err[-1500:]}"]}
        start = next(i for i, c in enumerate(cases) if c.id == current) + 1
    return [results[c.id] for c in cases if c.id in results]


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
