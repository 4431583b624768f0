"""A model's chat template run in a child process (worker.py) under a budget of time,
characters and (on Linux) memory: a template that loops is killed, and the next render gets a fresh process.

One sandbox per model; a render blocks its caller (the prompt thread) for at most its time budget.
The child gets an environment of its own (an allow-list: no tokens, keys or proxy credentials), and
every process killed is waited for and its pipes closed, so cancels leave no descriptor behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import NoReturn

from .worker import read_frame, write_frame

START_SECONDS = 30.0  # for the child to import Jinja, on a machine busy loading a model
REAP_SECONDS = 2.0  # for a killed child to be gone (it dies at once; a busy machine schedules it late)
# what Python needs to start and find Jinja (a user's site-packages: HOME, APPDATA), and Jinja to render
# (strftime_now reads TZ), with the locale (LC_*) beside; nothing that may hold a secret
ENV_NAMES = frozenset(
    {"PATH", "HOME", "USERPROFILE", "APPDATA", "SYSTEMROOT", "WINDIR", "TMPDIR", "TEMP", "TMP"}
    | {"LANG", "LANGUAGE", "TZ", "PYTHONHOME", "PYTHONUTF8"}
)


class SandboxFault(Exception):
    """A render did not answer: `kind` is "time" (over its budget), "interrupted", "closed" or "crashed"."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def worker_environment(parent: dict[str, str]) -> dict[str, str]:
    """The child's environment: the allow-listed names and locale of `parent`, and the path to this app."""
    env = {name: value for name, value in parent.items() if name.upper() in ENV_NAMES or name.startswith("LC_")}
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the app package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, parent.get("PYTHONPATH")]))
    return env


def _end(process: subprocess.Popen) -> None:
    """Kill `process` if it runs, wait for it (no zombie) and close its pipes."""
    try:
        process.kill()
    except OSError:
        pass
    try:
        process.wait(REAP_SECONDS)
    except subprocess.TimeoutExpired:
        pass  # Popen's own bookkeeping reaps it later
    for pipe in (process.stdin, process.stdout):
        try:
            pipe.close()
        except OSError:  # a write still buffered to a dead reader
            pass


def _end_all(live: list[subprocess.Popen]) -> None:
    for process in live:
        _end(process)


class TemplateSandbox:
    def __init__(self):
        self._lock = threading.Lock()  # one job at a time; its holder owns the process's pipes
        self._state = threading.Lock()  # the fields below, between the job's thread and those that stop it
        self._process: subprocess.Popen | None = None
        self._live: list[subprocess.Popen] = []  # the process, shared with the finalizer
        self._exchanging = False  # a frame is awaited from the process
        self._rendering = False  # ... and it is a render's answer (not the start's)
        self._exchanges = 0  # counts them, so a late timer kills no later one
        self._ready = False
        self._killed_for: str | None = None  # why the running process was killed: "time", "interrupted" or "closed"
        self._closed = False
        weakref.finalize(self, _end_all, self._live)
        self._start()  # now: it imports Jinja while the model loads

    def run(self, job: dict, seconds: float) -> dict:
        """The worker's answer to `job`; SandboxFault when it gave none within `seconds`."""
        with self._lock:
            if self._closed:
                raise SandboxFault("closed")
            if self._process is None or self._process.poll() is not None:  # killed, or died since
                self._discard()
                self._start()
            if not self._ready:
                self._exchange(None, START_SECONDS)
                self._ready = True
            return self._exchange(job, seconds)

    def interrupt(self) -> None:
        """Kill the render in progress, if any (from any thread): it fails as interrupted; the next gets
        a fresh process. An idle process, or one starting, is left alone: the next render needs it."""
        with self._state:
            if self._rendering:
                self._kill("interrupted")

    def close(self) -> None:
        """Kill the process (from any thread) and wait for it: a render in progress fails as closed,
        and so do later ones."""
        with self._state:
            self._closed = True
            self._kill("closed")
        if self._lock.acquire(timeout=REAP_SECONDS):  # a render just killed gives it back at once
            try:
                self._discard()
            finally:
                self._lock.release()

    def _start(self) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.engine.prompt.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=worker_environment(dict(os.environ)),
        )
        with self._state:
            self._process = process
            self._live.append(process)
            self._ready = False
            self._killed_for = None
            if self._closed:  # closed while this one started: close() may have missed it
                self._kill("closed")

    def _exchange(self, job: dict | None, seconds: float) -> dict:
        """Send `job` (None: only read, the ready frame) and read the answer, killing the process at `seconds`."""
        process = self._process
        with self._state:
            stopped = self._killed_for is not None  # killed before it was asked (closed)
            self._exchanges += 1
            self._exchanging, self._rendering = not stopped, job is not None and not stopped
        if stopped:
            self._failed()
        timer = threading.Timer(seconds, self._kill_if_exchanging, (self._exchanges, "time"))
        timer.start()
        try:
            if job is not None:
                write_frame(process.stdin, job)
            answer = read_frame(process.stdout)
        except (OSError, ValueError):  # a broken pipe, a torn frame: the process died
            answer = None
        finally:
            timer.cancel()
            with self._state:
                self._exchanging = self._rendering = False
        if not isinstance(answer, dict):
            self._failed()
        return answer

    def _failed(self) -> NoReturn:
        kind = self._killed_for or "crashed"
        self._discard()  # the next run starts a fresh one
        raise SandboxFault(kind)

    def _discard(self) -> None:
        """Under the job lock: end the process, if any, for good."""
        process = self._process
        if process is None:
            return
        _end(process)
        with self._state:
            self._process = None
        self._live.remove(process)

    def _kill_if_exchanging(self, exchange: int, reason: str) -> None:
        with self._state:
            if self._exchanging and self._exchanges == exchange:  # not a later one: the timer fired late
                self._kill(reason)

    def _kill(self, reason: str) -> None:
        """Under the state lock: kill the process; the job's thread reaps it."""
        process = self._process
        if process is not None and self._killed_for is None:
            self._killed_for = reason
            try:
                process.kill()
            except OSError:
                pass
