# SPDX-License-Identifier: Apache-2.0
"""Run pylance's own Python tests against lance-gpu (or against pylance itself, for the
baseline) through an import shim: ``import lance`` / ``lance.X`` resolve to ``lance_gpu`` /
``lance_gpu.X``.

The upstream tests are not part of this project: export them from a checkout of
``lancedb/lance`` into a scratch directory outside the repository, then::

    python3 scripts/run_upstream_tests.py --impl lance_gpu --tests /tmp/up/python/python/tests \
        test_fragment.py test_optimize.py -- -q -p no:cacheprovider
    python3 scripts/run_upstream_tests.py --impl lance ...       # real pylance, no shim

Each run prints pytest's own summary; ``--junit FILE`` keeps the per-test outcomes so two
runs can be compared (``--compare A.xml B.xml`` prints the pass counts and the ratio).

The shim adds no behaviour: a name lance-gpu lacks imports as a stand-in that fails the
test using it (so one missing name fails the tests that need it, not the whole file), and
is listed after the run.  Importing a submodule (``import lance.dataset``) does not replace
a function of the same name on the package (``lance.dataset(uri)``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
import xml.etree.ElementTree as ET

#: Names the tests asked for that lance-gpu lacks (printed after the run).
MISSING: set[str] = set()


class _MissingMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        MISSING.add(cls.__qualname__)
        raise NotImplementedError(f"lance-gpu has no {cls.__qualname__}")


def _missing(qualname: str) -> type:
    """A stand-in for a name lance-gpu lacks: importing it works (so one missing name does
    not fail a whole test file), using it fails the test that uses it."""

    def refuse(*args, **kwargs):
        MISSING.add(qualname)
        raise NotImplementedError(f"lance-gpu has no {qualname}")

    cls = _MissingMeta(qualname.rsplit(".", 1)[-1], (), {"__new__": refuse, "__call__": refuse})
    cls.__qualname__ = qualname
    return cls


class _Alias(types.ModuleType):
    """``lance`` / ``lance.X``: attribute reads forward to ``lance_gpu`` / ``lance_gpu.X``
    (None when lance-gpu has no such module); names it lacks are :func:`_missing` stand-ins.
    A submodule set on ``lance`` by the import system does not replace a function of the
    same name (``lance.dataset(uri)`` stays the function after ``import lance.dataset``)."""

    def __init__(self, name: str, target: types.ModuleType | None) -> None:
        super().__init__(name)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "__path__", [])

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = object.__getattribute__(self, "_target")
        if target is not None and hasattr(target, name):
            return getattr(target, name)
        return _missing(f"{self.__name__}.{name}")

    def __setattr__(self, name: str, value) -> None:
        target = object.__getattribute__(self, "_target")
        if isinstance(value, types.ModuleType) and target is not None:
            current = getattr(target, name, None)
            if current is not None and not isinstance(current, types.ModuleType):
                return
        if target is not None and not name.startswith("__"):
            setattr(target, name, value)  # monkeypatching lance.X.f patches lance_gpu.X.f
            return
        super().__setattr__(name, value)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        try:
            module = importlib.import_module(self.target)
        except ModuleNotFoundError:
            MISSING.add(spec.name)
            module = None
        return _Alias(spec.name, module)

    def exec_module(self, module) -> None:
        return None


class _AliasFinder(importlib.abc.MetaPathFinder):
    """``lance.X.Y`` -> an alias of ``lance_gpu.X.Y``."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("lance."):
            return None
        real = "lance_gpu." + fullname[len("lance."):]
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(real), is_package=True)


def install_shim() -> None:
    import lance_gpu

    sys.modules["lance"] = _Alias("lance", lance_gpu)
    sys.meta_path.insert(0, _AliasFinder())


def _outcomes(path: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "skipped" in kinds:
            result[name] = "skipped"
        elif kinds & {"failure", "error"}:
            result[name] = "failed"
        else:
            result[name] = "passed"
    return result


def compare(reference: str, candidate: str) -> None:
    ref, cand = _outcomes(reference), _outcomes(candidate)
    ref_pass = {n for n, o in ref.items() if o == "passed"}
    both = {n for n in ref_pass if cand.get(n) == "passed"}
    by_file: dict[str, list[int]] = {}
    for name in ref_pass:
        counts = by_file.setdefault(name.split("::")[0], [0, 0])
        counts[0] += 1
        counts[1] += name in both
    for file, (p, c) in sorted(by_file.items()):
        print(f"{file:60s} {c:4d} / {p:4d}")
    ratio = len(both) / len(ref_pass) if ref_pass else 0.0
    print(f"pylance passes {len(ref_pass)}; lance-gpu passes {len(both)} of those ({ratio:.0%})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", choices=("lance", "lance_gpu"), default="lance_gpu")
    parser.add_argument("--tests", help="directory of the exported upstream tests")
    parser.add_argument("--junit", help="write per-test outcomes here")
    parser.add_argument("--compare", nargs=2, metavar=("PYLANCE_XML", "LANCE_GPU_XML"))
    parser.add_argument("files", nargs="*")
    args, pytest_args = parser.parse_known_args()
    if args.compare:
        compare(*args.compare)
        return 0
    if args.impl == "lance_gpu":
        install_shim()
    import pytest

    extra = [a for a in pytest_args if a != "--"]
    if args.junit:
        extra.append(f"--junitxml={os.path.abspath(args.junit)}")
    os.chdir(args.tests)
    rc = int(pytest.main([*args.files, *extra]))
    if MISSING:
        print("names lance-gpu lacks that the tests used:", ", ".join(sorted(MISSING)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
