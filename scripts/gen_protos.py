#!/usr/bin/env python3
"""Regenerate ``lance_gpu/_proto/*_pb2.py`` and ``*_pb2.pyi`` from ``protos/*.proto``.

Runs ``python -m grpc_tools.protoc`` (grpcio-tools), then rewrites the generated
cross-imports between our own modules (``import file_pb2 as file__pb2``) into
package-relative imports (``from . import file_pb2 as file__pb2``) so the modules
work inside the ``lance_gpu._proto`` package. The output only depends on the .proto
files and the grpcio-tools version, so rerunning it gives byte-identical files.

Usage: ``python scripts/gen_protos.py``
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
OUT_DIR = ROOT / "lance_gpu" / "_proto"

INIT_TEXT = '''\
# SPDX-License-Identifier: Apache-2.0
"""Generated protobuf modules for the Lance format (see ``protos/``).

Do not edit the ``*_pb2`` files by hand: change ``protos/*.proto`` and rerun
``python scripts/gen_protos.py``.
"""
'''


def _rewrite_imports(text: str, local_modules: set[str]) -> str:
    """Turn ``import X_pb2 as Y`` for our own modules into ``from . import X_pb2 as Y``."""

    def repl(m: re.Match[str]) -> str:
        indent, module, alias = m.group(1), m.group(2), m.group(3)
        if module not in local_modules:
            return m.group(0)
        return f"{indent}from . import {module} as {alias}"

    return re.sub(r"^(\s*)import (\w+_pb2) as (\w+)$", repl, text, flags=re.MULTILINE)


def main() -> int:
    protos = sorted(p.name for p in PROTO_DIR.glob("*.proto"))
    if not protos:
        print(f"no .proto files in {PROTO_DIR}", file=sys.stderr)
        return 1
    local_modules = {name[: -len(".proto")] + "_pb2" for name in protos}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO_DIR}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *protos,
        ]
        subprocess.run(cmd, check=True, cwd=PROTO_DIR)
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        for old in list(OUT_DIR.glob("*_pb2.py")) + list(OUT_DIR.glob("*_pb2.pyi")):
            old.unlink()
        for generated in sorted(Path(tmp).iterdir()):
            if not generated.name.endswith(("_pb2.py", "_pb2.pyi")):
                continue
            text = generated.read_text(encoding="utf-8")
            (OUT_DIR / generated.name).write_text(
                _rewrite_imports(text, local_modules), encoding="utf-8"
            )
    (OUT_DIR / "__init__.py").write_text(INIT_TEXT, encoding="utf-8")
    cache = OUT_DIR / "__pycache__"
    if cache.exists():
        shutil.rmtree(cache)
    print(f"generated {len(protos)} proto modules into {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
