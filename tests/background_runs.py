# SPDX-License-Identifier: Apache-2.0
"""Test subprocesses that start when collection ends and are awaited by their tests.

A few tests run a whole pytest session of their own in a subprocess (the GPU pipeline under
the CUDA simulator, which must set ``NUMBA_ENABLE_CUDASIM`` before numba is imported): minutes
of one core each.  Started when their test comes up, they would leave the machine's other core
idle; started at the end of collection (``tests/conftest.py``), they run beside the rest of the
suite, and their tests, ordered last, only wait for what is left and check the outcome.

A test opts in by decorating itself with :func:`runs_in_background`, giving the command; the
conftest starts the command of every such test that is selected and not skipped.  A test run
alone (or whose command was not started) starts it itself, so the outcome never depends on the
order.  Output goes to temporary files, not pipes (a child writing more than a pipe holds would
block while nobody reads).  Whatever is still running when the session ends is killed.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

#: a command as ``(argv, env, cwd)``
Command = tuple[list[str], dict[str, str], str]


@dataclass
class Finished:
    """A background command's outcome."""

    returncode: int
    stdout: str
    stderr: str


class _Run:
    def __init__(self, command: Command) -> None:
        argv, env, cwd = command
        self._out: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")
        self._err: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._out, stderr=self._err, text=True)

    def wait(self, timeout: float) -> Finished:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        outputs = []
        for f in (self._out, self._err):
            f.seek(0)
            outputs.append(f.read())
            f.close()
        return Finished(code, outputs[0], outputs[1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        self._err.close()


_RUNS: dict[str, _Run] = {}


def runs_in_background(command: Callable[[], Command | None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a test whose subprocess ``command()`` (None: nothing to run here, e.g. a missing
    package the test skips on) may start when collection ends; the test gets its outcome from
    :func:`finished`."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        test.background_command = command  # type: ignore[attr-defined]
        return test

    return mark


def start(key: str, test: Callable[..., Any]) -> None:
    """Start ``test``'s background command (once) under ``key``."""
    command = getattr(test, "background_command", None)
    if command is None or key in _RUNS:
        return
    found = command()
    if found is not None:
        _RUNS[key] = _Run(found)


def finished(key: str, test: Callable[..., Any], timeout: float = 900) -> Finished:
    """The outcome of ``test``'s command: of the run started in the background, or of one
    started now (the test run alone).  Raises ``subprocess.TimeoutExpired`` after ``timeout``
    seconds (the child is killed)."""
    run = _RUNS.pop(key, None)
    if run is None:
        command = test.background_command()  # type: ignore[attr-defined]
        assert command is not None, "the test should have skipped"
        run = _Run(command)
    return run.wait(timeout)


def stop_all() -> None:
    """Kill what is still running (the session ends: interrupted, ``-x``, or a test not run)."""
    while _RUNS:
        _RUNS.popitem()[1].kill()
