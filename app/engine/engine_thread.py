"""The one thread that calls llama.cpp: a thread-safe inbox in, events out through a sink.

The inbox is a deque under a condition: requests join the back, cancels jump to the front, and the
thread sleeps on the condition while it has nothing to do (no polling). A request's prompt (chat
template and tokenizer, seconds for a chat of thousands of messages) is built first on a helper
thread, so the streams already running never wait for it. No request, call or reload
can end the thread: each inbox item is handled under a guard that settles it with the reason. If
the thread ends anyway (a fault in the engine itself), everything queued is settled with an
EngineError and `on_exit` is told why, so no caller waits forever.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .engine import Engine, Sink
from .errors import EngineError
from .events import refused
from .params import EngineConfig
from .sequence import Request

_ORDER = {"stop": 0, "reload": 0, "submit": 1, "cancel": 2, "call": 3}
RELOAD_NOTICE = "the engine was reloaded; this reply was cut short"
CLOSE_NOTICE = "the engine was closed"

ExitListener = Callable[[str], None]  # called on the engine thread with the reason it ended


class EngineThread:
    def __init__(self, config: EngineConfig, sink: Sink, on_exit: ExitListener | None = None):
        self._config = config
        self._sink = sink
        self._on_exit = on_exit
        self._inbox: deque[tuple[str, Any]] = deque()
        self._cond = threading.Condition()
        self._ready = Future()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._prompts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-prompts")
        self._engine_lock = threading.Lock()  # the prompt thread reads the engine's tokenizer under it
        self.engine: Engine | None = None
        self._gone: str | None = None  # set when the thread stops taking items: why
        self.failure: str | None = None  # why the thread ended, when it was not asked to stop

    # -- called from any thread -------------------------------------------------------------

    def start(self) -> None:
        """Load the model on the engine thread; raise its ModelLoadError here if it fails."""
        self._thread.start()
        self._ready.result()

    def submit(self, request: Request) -> None:
        """Build the request's prompt on the prompt thread, then queue it for the engine."""
        t_submit = time.monotonic()
        try:
            self._prompts.submit(self._prepare, request, t_submit)
        except RuntimeError:  # the threads have ended
            self._refuse(("submit", (request, t_submit)), self._gone or CLOSE_NOTICE)

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
        return self._thread.is_alive() and self.failure is None

    def _post(self, item, urgent: bool = False) -> None:
        with self._cond:
            if self._gone is None:
                if urgent:
                    self._inbox.appendleft(item)
                else:
                    self._inbox.append(item)
                self._cond.notify()
                return
        self._refuse(item, self._gone)  # the thread takes no more items: answer at once

    # -- the prompt thread -----------------------------------------------------------------

    def _prepare(self, request: Request, t_submit: float) -> None:
        with self._engine_lock:
            engine = self.engine
            if engine is None or self._gone is not None:
                prompt = None  # refused by _post
            else:
                prompt = engine.prepare(request)
        self._post(("submit", (request, t_submit, engine, prompt)))

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.engine = Engine(self._config, self._sink)
        except BaseException as e:  # the starter re-raises it
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            self._loop()
        except BaseException as e:  # a fault in the engine itself: nobody may be left waiting
            self._die(f"the engine stopped after an internal error: {e!r}")
        finally:
            self._prompts.shutdown(wait=False)

    def _loop(self) -> None:
        while True:
            items = self._take(block=not self.engine.has_work())
            if any(kind == "stop" for kind, _ in items):
                self._close(CLOSE_NOTICE, [item for item in items if item[0] != "stop"])
                return
            for kind, arg in items:
                try:
                    self._handle(kind, arg)
                except Exception as e:
                    self._item_failed(kind, arg, e)
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
            request, t_submit, built_by, prompt = arg
            if built_by is engine:
                engine.submit(request, t_submit, prompt)  # it answers a request it cannot take with an ERROR finish
            else:  # built for the engine a reload replaced: build it again for this one
                self._prompts.submit(self._prepare, request, t_submit)
        elif kind == "cancel":
            engine.cancel(arg)
        elif kind == "call":
            fn, future = arg
            _settle(future, lambda: fn(engine))
        elif kind == "reload":
            config, future = arg
            _settle(future, lambda: self._swap(config))

    def _item_failed(self, kind: str, arg, error: Exception) -> None:
        reason = f"internal error: {error!r}"
        if kind == "submit":  # only that request fails
            request, t_submit = arg[:2]
            self._sink([refused(request.request_id, reason, request.conversation_id, t_submit)])
        else:  # a cancel left its sequence in an unknown state: end every request rather than guess
            self.engine.fail_all(reason)

    def _swap(self, config: EngineConfig):
        new = Engine(config, self._sink)  # raises and keeps the old engine if the model is bad
        with self._engine_lock:  # the old tokenizer is freed: no prompt may be read with it meanwhile
            self.engine.shutdown(RELOAD_NOTICE)
            self.engine = new
        self._config = config
        return new.info

    def _close(self, notice: str, taken: list[tuple[str, Any]]) -> None:
        """Stop taking items; settle those taken with the stop and those still queued."""
        with self._cond:
            self._gone = notice
            items = taken + list(self._inbox)
            self._inbox.clear()
        for item in items:
            self._refuse(item, notice)
        with self._engine_lock:
            self.engine.shutdown(notice)

    def _die(self, reason: str) -> None:
        with self._cond:
            self.failure = self._gone = reason
            items = list(self._inbox)
            self._inbox.clear()
        for item in items:
            self._refuse(item, reason)
        try:
            self.engine.fail_all(reason)  # best effort: the engine is in an unknown state
        except BaseException:
            pass
        if self._on_exit is not None:
            self._on_exit(reason)

    def _refuse(self, item: tuple[str, Any], reason: str) -> None:
        """Settle an inbox item the thread will never handle."""
        kind, arg = item
        if kind == "submit":
            request, t_submit = arg[:2]
            self._sink([refused(request.request_id, reason, request.conversation_id, t_submit)])
        elif kind in ("call", "reload"):
            arg[1].set_exception(EngineError(reason))


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except Exception as e:  # every failure goes back to the caller; the engine goes on
        future.set_exception(e)
