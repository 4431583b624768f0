"""The one thread that calls llama.cpp: a thread-safe inbox in, events out through a sink.

The inbox is a deque under a condition: requests join the back, cancels jump to the front, and the
thread sleeps on the condition while it has nothing to do (no polling).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .engine import Engine, Sink
from .errors import EngineError
from .params import EngineConfig
from .sequence import Request

_ORDER = {"stop": 0, "reload": 0, "submit": 1, "cancel": 2, "call": 3}
RELOAD_NOTICE = "the engine was reloaded; this reply was cut short"
CLOSE_NOTICE = "the engine was closed"


class EngineThread:
    def __init__(self, config: EngineConfig, sink: Sink):
        self._config = config
        self._sink = sink
        self._inbox: deque[tuple[str, Any]] = deque()
        self._cond = threading.Condition()
        self._ready = Future()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self.engine: Engine | None = None

    # -- called from any thread -------------------------------------------------------------

    def start(self) -> None:
        """Load the model on the engine thread; raise its ModelLoadError here if it fails."""
        self._thread.start()
        self._ready.result()

    def submit(self, request: Request) -> None:
        self._post(("submit", (request, time.monotonic())))

    def cancel(self, request_id: str) -> None:
        self._post(("cancel", request_id), urgent=True)

    def call(self, fn: Callable[[Engine], Any]) -> Future:
        """Run fn(engine) on the engine thread between two steps."""
        future: Future = Future()
        self._post(("call", (fn, future)))
        return future

    def reload(self, config: EngineConfig) -> Future:
        """Load `config`; on success swap engines (requests in flight end with a notice), else keep the old."""
        future: Future = Future()
        self._post(("reload", (config, future)), urgent=True)
        return future

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._post(("stop", None), urgent=True)
            self._thread.join(timeout)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _post(self, item, urgent: bool = False) -> None:
        with self._cond:
            if urgent:
                self._inbox.appendleft(item)
            else:
                self._inbox.append(item)
            self._cond.notify()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.engine = Engine(self._config, self._sink)
        except BaseException as e:  # the starter re-raises it
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        while True:
            for kind, arg in self._take(block=not self.engine.has_work()):
                if kind == "stop":
                    self.engine.shutdown(CLOSE_NOTICE)
                    return
                self._handle(kind, arg)
            try:
                self.engine.step()
            except Exception as e:  # a bug must not leave clients waiting forever
                self.engine.fail_all(f"internal error: {e!r}")

    def _take(self, block: bool) -> list[tuple[str, Any]]:
        with self._cond:
            while block and not self._inbox:
                self._cond.wait()
            items = list(self._inbox)
            self._inbox.clear()
        # all of these run before the next decode, in this order: a reload before the requests
        # meant for the new engine, a cancel after its own submit, a call after both
        items.sort(key=lambda item: _ORDER[item[0]])
        return items

    def _handle(self, kind: str, arg) -> None:
        engine = self.engine
        if kind == "submit":
            engine.submit(*arg)
        elif kind == "cancel":
            engine.cancel(arg)
        elif kind == "call":
            fn, future = arg
            _settle(future, lambda: fn(engine))
        elif kind == "reload":
            config, future = arg
            _settle(future, lambda: self._swap(config))

    def _swap(self, config: EngineConfig):
        new = Engine(config, self._sink)  # raises and keeps the old engine if the model is bad
        self.engine.shutdown(RELOAD_NOTICE)
        self.engine = new
        self._config = config
        return new.info


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except (EngineError, ValueError, OSError) as e:
        future.set_exception(e)
