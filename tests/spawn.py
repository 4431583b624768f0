"""Start an OpenAI-compatible server process on a free loopback port and wait until it is healthy.

The tests use it for `python -m app serve` and for llama.cpp's llama-server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(port: int, *flags: str) -> list[str]:
    """This project's server, from this checkout, with the Python running now."""
    return [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port), *flags]


@contextmanager
def running(command: list[str], port: int, timeout: float = 120.0):
    """Run `command` (a server listening on `port`) until the block ends; yield its base URL."""
    log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on a full pipe
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, process, log, timeout)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_healthy(port: int, process: subprocess.Popen, log, timeout: float) -> None:
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
