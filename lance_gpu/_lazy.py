# SPDX-License-Identifier: Apache-2.0
"""Packages whose names load on first use (PEP 562), so that ``import lance_gpu`` and a read
load only the modules they run.

A package using it declares, at module level::

    __getattr__ = lazy_names(__name__, {"write_version": ".dataset_writer", ...})
    __dir__ = lazy_dir(__name__, {"write_version": ".dataset_writer", ...})

and imports the same names under ``if TYPE_CHECKING:`` for type checkers.  Then
``package.write_version`` imports ``package.dataset_writer`` on first access and binds the name
in the package (later accesses are plain attribute reads), and ``package.operations`` (any
submodule) imports that submodule.  A module of another package refers to ``package.submodule.f``
after a plain module-level ``import lance_gpu.package`` / ``from lance_gpu import package``, which
import-linter sees as the dependency it is, and which runs only the package's ``__init__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(module: str, exports: Mapping[str, str], *, submodules: bool = True) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``module``: a name of ``exports`` (name -> the module that
    defines it, absolute or relative to the package ``module``: ``".dataset_writer"``) is
    read from that module, then bound in ``module``; with ``submodules`` (``module`` is a
    package), any other name that is not a dunder is imported as a submodule; what is
    neither raises ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is not None:
            value = getattr(importlib.import_module(where, module), name)
            setattr(sys.modules[module], name, value)
            return value
        if submodules and not name.startswith("__"):
            try:
                return importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{module}.{name}":  # the submodule exists but failed to import
                    raise
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def lazy_dir(module: str, exports: Mapping[str, str]) -> Callable[[], list[str]]:
    """The module ``__dir__`` of ``module``: its bound names and the names of ``exports``
    (loaded or not), as ``dir()`` lists them when they are imported eagerly."""

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module])) | set(exports))

    return __dir__
