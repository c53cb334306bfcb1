# SPDX-License-Identifier: Apache-2.0
"""Ahead-of-time compiled CPU kernels (cuda_kernels/_aot.py, issue 24's startup target).

* The dispatch key of a call equals the key of the type numba's ``typeof`` gives each
  argument (differential against numba), so an AOT function runs exactly where numba's
  exact-match overload would.
* A tiny module (UTF-8 and offsets checks, built in a child as ``lance-gpu compile`` builds
  it, into a temporary ``LANCE_GPU_CACHE_DIR``): a fresh process runs it without importing
  numba, with the results and exceptions of the numba path (the wrappers' errors and ones
  raised inside compiled code); arguments of other types go to
  numba; a stale manifest (another fingerprint) is ignored.
* Slow: a pylance-written table of the common encodings read in a fresh process after the
  module is built from a read of it imports no numba and equals numba's read and pylance's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuda_kernels import _aot

ROOT = Path(__file__).resolve().parent.parent


def _run(code: str, cache: Path, *args: str, **env_extra: str) -> dict:
    env = dict(os.environ, LANCE_GPU_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), **env_extra)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _arrays() -> list[object]:
    a = np.arange(24, dtype=np.int64)
    ro = a.copy()
    ro.flags.writeable = False
    unaligned = np.frombuffer(b"\0" + bytes(16), dtype=np.uint8)[1:].view(np.int64)
    return [
        a, ro, a[::2], a.reshape(4, 6), a.reshape(4, 6).T, a.reshape(4, 6)[:, ::2], np.zeros(3, np.bool_),
        np.zeros(2, np.uint16), np.zeros(2, np.float32), np.zeros(2, "datetime64[us]"), np.zeros((), np.int8),
        unaligned, True, False, 0, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 1.5,
        np.int32(3), np.uint8(1), np.bool_(True), np.float32(2.0), np.int64(-5), np.datetime64(3, "ms"),
    ]


def test_type_key_is_numba_typeof() -> None:
    """Per argument, the key of a value is the key of the type numba gives it."""
    from numba import typeof

    for value in _arrays():
        assert _aot.type_key([value]) == _aot._numba_type_key([typeof(value)]), repr(value)
    assert _aot.type_key([np.int64(1), np.arange(3)]) == _aot._numba_type_key([typeof(np.int64(1)), typeof(np.arange(3))])


def test_type_key_refuses_what_it_cannot_spell() -> None:
    for value in (None, (1, 2), [1], "s", b"b", 2**64, -(2**63) - 1, np.arange(3).view(np.ma.MaskedArray), object()):
        assert _aot.type_key([np.arange(2), value]) is None, repr(value)


def test_match_converts_writable_to_read_only_only() -> None:
    """A writable array may run code exported for it read-only (numba's safe conversion),
    never the reverse (that code may write it); an exact export wins."""
    ro, rw = ("<u8", 1, "C", True), ("<u8", 1, "C", False)
    exact, relaxed = object(), object()
    table = {(ro, "<i8"): relaxed}
    assert _aot.match(dict(table), (rw, "<i8")) is relaxed
    assert _aot.match(dict(table), (ro, "<i8")) is relaxed
    assert _aot.match({(rw, "<i8"): exact}, (ro, "<i8")) is None
    assert _aot.match({(ro, "<i8"): relaxed, (rw, "<i8"): exact}, (rw, "<i8")) is exact
    assert _aot.match(dict(table), (("<u4", 1, "C", False), "<i8")) is None
    assert _aot.match(dict(table), (rw, "<i4")) is None
    assert _aot.match(dict(table), (rw,)) is None


# Builds the tiny module in a child: twins and AOT off, every call compiles through numba,
# then the same build as `lance-gpu compile`.
CHILD_BUILD = r"""
import json, os, sys
os.environ["LANCE_GPU_JIT_TWINS"] = "0"
os.environ["LANCE_GPU_AOT"] = "0"
import numpy as np
from cuda_kernels import _jitcache, utf8
offsets = np.array([0, 2, 6, 9], np.int64)
utf8.check_variable(offsets, np.frombuffer("abcdéfgh".encode(), np.uint8), True)
utf8.check_variable(offsets, np.frombuffer(b"abcdefghi", np.uint8), True)
manifest, built = _jitcache.build_aot()
print(json.dumps({"manifest": str(manifest), "built": built, "kernels": sorted(json.load(open(manifest))["kernels"])}))
"""

# Calls the checks in a fresh process: what they return or raise, and whether numba came in.
CHILD_CALL = r"""
import json, sys
import numpy as np
from cuda_kernels import utf8
from cuda_kernels.errors import CorruptInputError
def check(offsets, data):
    try:
        utf8.check_variable(np.array(offsets, sys.argv[1]), np.frombuffer(data, np.uint8), True)
        return "ok"
    except CorruptInputError as exc:
        return [type(exc).__name__, str(exc), exc.code, exc.index]
got = {"valid": check([0, 2, 6, 11], "abcdé€gh".encode()),
       "ascii": check([0, 2, 5, 9], b"abcdefghi"),
       "bad_utf8": check([0, 2, 5, 9], b"abcd\xfffghi"),
       "split_char": check([0, 5, 6, 9], "abcdéfgh".encode()),
       "bad_offsets": check([0, 5, 3, 9], b"abcdefghi"),
       "beyond": check([0, 5, 30], b"abcdefghi")}
def raised(*args):  # exceptions raised inside compiled code (nchunks 0 divides by zero, -1 sizes an array)
    try:
        return ["returned", utf8._utf8_valid_cpu(*args)]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
ro = np.frombuffer(b"abc", np.uint8)
got["zero_chunks"] = raised(ro, 0, 3, 0)
got["negative_chunks"] = raised(ro, 0, 3, -1)
got["numba"] = "numba" in sys.modules
got["aot"] = "lance_gpu_aot" in sys.modules
print(json.dumps(got))
"""


def test_tiny_module_runs_without_numba(tmp_path: Path) -> None:
    built = _run(CHILD_BUILD, tmp_path)
    assert built["built"] is True
    assert built["kernels"] == ["cuda_kernels.utf8:_check_variable_cpu", "cuda_kernels.utf8:_utf8_valid_cpu"]
    manifest = Path(built["manifest"])
    (module,) = manifest.parent.glob(f"{_aot.MODULE_NAME}-*")
    again = _run(CHILD_BUILD, tmp_path)  # the same signatures: the published module stays
    assert again["built"] is False and again["kernels"] == built["kernels"]
    assert list(manifest.parent.glob(f"{_aot.MODULE_NAME}-*")) == [module]

    aot = _run(CHILD_CALL, tmp_path, "int64")
    assert aot.pop("numba") is False and aot.pop("aot") is True
    jit = _run(CHILD_CALL, tmp_path, "int64", LANCE_GPU_AOT="0")
    assert jit.pop("numba") is True and jit.pop("aot") is False
    assert aot == jit
    assert aot["valid"] == "ok" and aot["bad_utf8"][2] == 16 and aot["bad_offsets"][2] == 1
    assert aot["zero_chunks"][0] == "ZeroDivisionError" and aot["negative_chunks"][0] == "ValueError"

    # int32 offsets: a signature the module does not have -> numba, same results
    other = _run(CHILD_CALL, tmp_path, "int32")
    assert other.pop("numba") is True
    other.pop("aot")
    assert other == aot

    # a stale manifest (other sources) is ignored; so is one for another CPU
    for field, value in (("fingerprint", "0" * 16), ("cpu", "not-this-cpu")):
        data = json.loads(manifest.read_text())
        good = data[field]
        data[field] = value
        manifest.write_text(json.dumps(data))
        stale = _run(CHILD_CALL, tmp_path, "int64")
        assert stale.pop("numba") is True and stale.pop("aot") is False, field
        assert stale == aot
        data[field] = good
        manifest.write_text(json.dumps(data))
    # a module that fails to load is no module
    module.write_bytes(b"not an ELF file")
    broken = _run(CHILD_CALL, tmp_path, "int64")
    assert broken.pop("numba") is True and broken.pop("aot") is False
    assert broken == aot


CHILD_READ = r"""
import hashlib, json, os, sys
if sys.argv[2] == "build":
    os.environ["LANCE_GPU_JIT_TWINS"] = "0"
    os.environ["LANCE_GPU_AOT"] = "0"
import lance_gpu
ds = lance_gpu.dataset(sys.argv[1], device="cpu")
t = ds.to_table()
b = ds.to_table(columns=["id", "s", "l16"], filter="x > 0.5")
digest = hashlib.sha256(repr((t.to_pylist(), b.to_pylist())).encode()).hexdigest()
got = {"digest": digest, "numba": "numba" in sys.modules}
if sys.argv[2] == "build":
    from cuda_kernels import _jitcache
    _jitcache.build_aot()
print(json.dumps(got))
"""


@pytest.mark.slow
def test_read_with_module_imports_no_numba(tmp_path: Path) -> None:
    lance = pytest.importorskip("lance")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_compile_cmd import mixed_table

    table = mixed_table(5000)
    uri = str(tmp_path / "mixed.lance")
    lance.write_dataset(table, uri, max_rows_per_file=2500)
    cache = tmp_path / "cache"
    built = _run(CHILD_READ, cache, uri, "build")
    assert built["numba"] is True
    aot = _run(CHILD_READ, cache, uri, "read")
    assert aot["numba"] is False
    assert aot["digest"] == built["digest"]
    import hashlib

    ref = lance.dataset(uri)
    want = (ref.to_table().to_pylist(), ref.to_table(columns=["id", "s", "l16"], filter="x > 0.5").to_pylist())
    assert aot["digest"] == hashlib.sha256(repr(want).encode()).hexdigest()
