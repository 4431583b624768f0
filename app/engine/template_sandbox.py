"""A model's chat template run in a child process (template_worker.py) under a budget of time,
characters and memory: a template that loops is killed, and the next render gets a fresh process.

One sandbox per model; a render blocks its caller (the prompt thread) for at most its time budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

from .template_worker import read_frame, write_frame

START_SECONDS = 30.0  # for the child to import Jinja, on a machine busy loading a model


class SandboxFault(Exception):
    """A render did not answer: `kind` is "time" (over its budget), "interrupted", "closed" or "crashed"."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _worker_command() -> tuple[list[str], dict[str, str]]:
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the app package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    return [sys.executable, "-m", "app.engine.template_worker"], env


def _kill(process: subprocess.Popen) -> None:
    try:
        process.kill()
    except OSError:
        pass


class TemplateSandbox:
    def __init__(self):
        self._lock = threading.Lock()  # one job at a time
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._killed_for: str | None = None  # why the running process was killed: "time", "interrupted" or "closed"
        self._closed = False
        self._start()  # now: it imports Jinja while the model loads

    def run(self, job: dict, seconds: float) -> dict:
        """The worker's answer to `job`; SandboxFault when it gave none within `seconds`."""
        with self._lock:
            if self._closed:
                raise SandboxFault("closed")
            if self._process is None or self._process.poll() is not None:  # killed, or died since
                self._start()
            process = self._process
            if not self._ready:
                self._exchange(process, None, START_SECONDS)
                self._ready = True
            return self._exchange(process, job, seconds)

    def interrupt(self) -> None:
        """Kill the render in progress, if any (from any thread): it fails as interrupted; the next gets a fresh process."""
        self._kill_for("interrupted")

    def close(self) -> None:
        """Kill the render in progress, if any (from any thread): it fails as closed, and so do later ones."""
        self._closed = True
        self._kill_for("closed")

    def _start(self) -> None:
        command, env = _worker_command()
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self._ready = False
        self._killed_for = None
        weakref.finalize(self, _kill, self._process)

    def _exchange(self, process: subprocess.Popen, job: dict | None, seconds: float) -> dict:
        """Send `job` (None: only read, the ready frame) and read the answer, killing the process at `seconds`."""
        timer = threading.Timer(seconds, self._kill_for, ("time",))
        timer.start()
        try:
            if job is not None:
                write_frame(process.stdin, job)
            answer = read_frame(process.stdout)
        except (OSError, ValueError):  # a broken pipe, a torn frame: the process died
            answer = None
        finally:
            timer.cancel()
        if isinstance(answer, dict):
            return answer
        _kill(process)
        process.wait()
        self._process = None  # the next run starts a fresh one
        raise SandboxFault(self._killed_for or "crashed")

    def _kill_for(self, reason: str) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            self._killed_for = reason
            _kill(process)
