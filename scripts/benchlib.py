"""What the benchmarks in scripts/ share: their common flags, the app and llama.cpp's own programs
found and run, servers started and awaited, ways interleaved over repeats, medians, tables, JSON.

A script imports it as `import benchlib`: Python puts a script's own folder first on its path. It
imports nothing of the app, so a script that drives the app only through $PYTHON runs on any
python3 (scripts/gpu-check hands them a GPU build that way).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the interpreter that runs the app: .venv's, or another with its own llama-cpp-python build
PYTHON = os.environ.get("PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")
W = TypeVar("W")


# -- the command line


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A script's parser, its docstring the help as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_model(p: argparse.ArgumentParser, help: str = "GGUF file (default: the bundled model)") -> None:
    # absolute: the app's commands run from the repository root, not from the caller's folder
    p.add_argument("--model", type=os.path.abspath, help=help)


def add_repeats(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument("--repeats", type=int, default=default, help=f"interleaved runs of every way; medians (default {default})")


def add_threads(p: argparse.ArgumentParser, default: int | None = os.cpu_count()) -> None:
    shown = default or "the app's"
    p.add_argument("--threads", type=int, default=default, help=f"llama.cpp threads (default: {shown})")


def add_json(p: argparse.ArgumentParser, help: str = "write every measurement here") -> None:
    p.add_argument("--json", metavar="PATH", help=help)


def text_arg(value: str) -> str:
    """A flag's text, or with @PATH that file's."""
    if value.startswith("@"):
        with open(value[1:]) as f:
            return f.read().strip()
    return value


# -- the app and llama.cpp's programs


def run(command: Sequence[str]) -> str:
    """Run quietly and return its stdout; on failure its output goes to stderr, then the error."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-4000:])
        raise subprocess.CalledProcessError(done.returncode, command)
    return done.stdout


def app_says(code: str) -> str:
    """What `code` prints, run by the app's interpreter."""
    return run([PYTHON, "-c", code]).strip()


def model_or_bundled(model: str | None) -> str:
    return model or app_says("from app.default_model import default_model_path as d; print(d())")


def app_bench(*flags: str) -> dict:
    """`python -m app bench FLAGS`: its one run's figures (what it writes with --json)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bench.json")
        run([PYTHON, "-m", "app", "bench", *flags, "--json", path])
        with open(path) as f:
            return json.load(f)["runs"][0]


def peers_bin() -> str:
    """The folder holding llama.cpp's llama-batched-bench and llama-server: $LLAMA_PEERS_BIN, else
    scripts/build-llama-peers' (it builds them the first time, its progress on stderr)."""
    if os.environ.get("LLAMA_PEERS_BIN"):
        return os.environ["LLAMA_PEERS_BIN"]
    out = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "build-llama-peers")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return out.strip().splitlines()[-1]


def repack_flags() -> list[str]:
    """llama.cpp's AMX weight packing crashes llama_decode on this CPU family (the engine loads
    without it too, see app/engine/llama/context.py): where the build has AMX, a peer runs with --no-repack."""
    amx = app_says("from app.engine.llama.devices import build_has_amx as b; print(b())")
    return ["--no-repack"] if amx == "True" else []


# -- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(port: int, *flags: str) -> list[str]:
    """The app's server on loopback, run by the app's interpreter."""
    return [PYTHON, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port), *flags]


@dataclass(frozen=True)
class Server:
    url: str
    pid: int


@contextmanager
def running(command: list[str], port: int, timeout: float = 120.0) -> Iterator[Server]:
    """Run `command` (a server listening on `port`) until the block ends."""
    log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on a full pipe
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(port, process, log, timeout)
        yield Server(f"http://127.0.0.1:{port}", process.pid)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_healthy(port: int, process: subprocess.Popen, log, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{process.args[0]} exited: {log.read().decode(errors='replace')[-500:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{process.args[0]} did not answer /health within {timeout:g} s")


# -- repeats and medians


def interleave(repeats: int, ways: Iterable[W]) -> Iterator[tuple[int, W]]:
    """(repeat, way): every way once a repeat, in turn, so a shared machine's drift slows all alike."""
    ways = list(ways)
    for repeat in range(repeats):
        for way in ways:
            yield repeat, way


def progress(repeat: int, repeats: int, text: str) -> None:
    print(f"# repeat {repeat + 1}/{repeats}, {text}", file=sys.stderr, flush=True)


class Samples:
    """Each way's measurements, in the order taken: numbers, or dicts of them."""

    def __init__(self, ways: Iterable[Any] = ()):
        self.by_way: dict[Any, list] = {way: [] for way in ways}

    def add(self, way, sample):
        self.by_way.setdefault(way, []).append(sample)
        return sample

    def __getitem__(self, way) -> list:
        return self.by_way[way]

    def median(self, way, key=None) -> float:
        """The median of a way's samples, or of their `key`."""
        return statistics.median(s if key is None else s[key] for s in self.by_way[way])

    def medians(self, way) -> dict[str, float]:
        """Of dict samples: the median of each key."""
        return {key: self.median(way, key) for key in self.by_way[way][0]}


# -- output


def table(columns: Sequence[tuple[str, str]], rows: Iterable[Sequence], heading_note: str = "") -> None:
    """Print a fixed-width table. A column is (title, format spec: '>10.1f', '<18'); its title takes
    the spec's alignment and width; `heading_note` follows the titles."""
    widths = [re.match(r"[<>^]?\d*", spec).group() for _, spec in columns]
    print(" ".join(f"{title:{width}}" for (title, _), width in zip(columns, widths)) + heading_note)
    for row in rows:
        print(" ".join(f"{cell:{spec}}" for cell, (_, spec) in zip(row, columns)))


def markdown_table(columns: Sequence[tuple[str, str]], rows: Iterable[Sequence[str]]) -> None:
    """Print a Markdown table: a column is (title, '<' or '>'), its cells already formatted."""
    print("| " + " | ".join(title for title, _ in columns) + " |")
    print("|" + "|".join("---:" if align == ">" else "---" for _, align in columns) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def write_json(path: str | None, data) -> None:
    """Write `data` to `path`, when one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)


def qt_app():
    """The QApplication, on the offscreen platform unless QT_QPA_PLATFORM names another."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # read when the application is made, not on import
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(sys.argv[:1])
