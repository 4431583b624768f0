"""The one thread that decodes, for every loaded model: a thread-safe inbox in, events out through a sink.

It holds one Engine per model (its own context, scheduler and KV pool), by name; the first loaded is
the default. It steps the engines that have work in turn, one decode each, so two models share the
cores by steps and a model with nothing to do costs nothing. One thread rather than one per model:
each thread that decodes keeps its own team of llama.cpp's OpenMP workers, and with more of them
than cores an idle model's team slowed the busy one by 29% (docs/performance.md).

The inbox is a deque under a condition: requests join the back; cancels, loads and unloads jump to
the front, and the thread sleeps on the condition while no engine has work (no polling). A
request's prompt (chat template and tokenizer, up to a second for the largest request) is built
first on a helper thread, and a model is loaded on another, so the streams already running never
wait for either; a request cancelled before its prompt is built is never built. A model that is
replaced or unloaded is freed on the prompt thread, after any prompt it is reading: a reload or an
unload never waits behind a build. No request, call, load or unload can end the thread: each inbox item is
handled under a guard that settles it with the reason. If the thread ends anyway (a fault in an
engine itself), everything queued is settled with an EngineError and `on_exit` is told why, so no
caller waits forever.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .engine import Engine, Sink
from .errors import EngineError, UnknownModelError
from .events import Fault, dropped, refused
from .host_cache import HostBudget
from .params import EngineConfig
from .sequence import Request

# all taken at once run before the next decode in this order: a model in place before the requests
# meant for it, a cancel after its own submit, a call after both
_ORDER = {"stop": 0, "install": 0, "unload": 0, "submit": 1, "cancel": 2, "call": 3}
RELOAD_NOTICE = "the engine was reloaded; this reply was cut short"
CLOSE_NOTICE = "the engine was closed"

ExitListener = Callable[[str], None]  # called on the engine thread with the reason it ended


def model_name(path: str) -> str:
    """A model's name unless it is given one: its file name without .gguf."""
    return os.path.basename(path).removesuffix(".gguf")


def unload_notice(name: str) -> str:
    return f"the model {name} was unloaded; this reply was cut short"


class EngineThread:
    def __init__(self, config: EngineConfig, sink: Sink, on_exit: ExitListener | None = None, name: str | None = None):
        self._first = (name or model_name(config.model_path), config)
        self._sink = sink
        self._on_exit = on_exit
        self._inbox: deque[tuple[str, Any]] = deque()
        self._cond = threading.Condition()
        self._ready = Future()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._prompts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-prompts")
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-loader")
        # requests queued for the prompt thread, and those of them cancelled meanwhile (under _cond)
        self._building: set[str] = set()
        self._dropped: set[str] = set()
        # name -> engine, the default first; replaced whole, never changed in place, so any thread may read it
        self.engines: dict[str, Engine] = {}
        self._last_stepped: str | None = None  # the next step goes to the next model with work after it
        self._gone: str | None = None  # set when the thread stops taking items: why
        self.failure: str | None = None  # why the thread ended, when it was not asked to stop

    @property
    def engine(self) -> Engine | None:
        """The default model's engine (the first loaded), or None before the start."""
        return next(iter(self.engines.values()), None)

    # -- called from any thread -------------------------------------------------------------

    def start(self) -> None:
        """Load the first model on the engine thread; raise its ModelLoadError here if it fails."""
        self._thread.start()
        self._ready.result()

    def submit(self, request: Request) -> None:
        """Build the request's prompt on the prompt thread, then queue it for its model's engine."""
        t_submit = time.monotonic()
        with self._cond:
            self._building.add(request.request_id)
        try:
            self._prompts.submit(self._prepare, request, t_submit)
        except RuntimeError:  # the threads have ended
            with self._cond:
                self._building.discard(request.request_id)
            self._refuse(("submit", (request, t_submit)), self._gone or CLOSE_NOTICE)

    def cancel(self, request_id: str, model: str | None = None) -> None:
        with self._cond:
            if request_id in self._building:  # not built yet: the prompt thread drops it unread
                self._dropped.add(request_id)
                return
        self._post(("cancel", (request_id, model)), urgent=True)

    def call(self, fn: Callable[[Engine], Any], model: str | None = None) -> Future:
        """Run fn(engine of `model`, None: the default) on the engine thread between two steps."""
        future: Future = Future()
        self._post(("call", (fn, future, model)))
        return future

    def load(self, config: EngineConfig, name: str | None = None) -> Future:
        """Load another model beside those loaded, as `name` (None: its file name); the future gives its ModelInfo."""
        return self._build(config, name or model_name(config.model_path), replaces=None)

    def reload(self, config: EngineConfig, model: str | None = None, name: str | None = None) -> Future:
        """Load `config` in place of `model` (None: the default), named `name` (None: its file name).

        If it loads, it takes the old one's place (requests in flight end with a notice); else the old stays.
        """
        return self._build(config, name or model_name(config.model_path), replaces=model or next(iter(self.engines), None))

    def unload(self, model: str) -> Future:
        """Free a model; its requests end with a notice. The last model loaded cannot be unloaded."""
        future: Future = Future()
        self._post(("unload", (model, future)), urgent=True)
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

    def _build(self, config: EngineConfig, name: str, replaces: str | None) -> Future:
        """Load an engine on the loader thread (the engine thread goes on stepping), then hand it over."""
        future: Future = Future()

        def build() -> None:
            try:
                self._check_name(name, replaces)  # before a load of seconds that could only be refused
                engine = Engine(config, self._sink, name, self._ram)
            except Exception as e:  # a bad model or bad settings: the caller hears why
                future.set_exception(e)
                return
            self._post(("install", (name, engine, replaces, future)), urgent=True)

        try:
            self._loader.submit(build)
        except RuntimeError:  # the threads have ended
            future.set_exception(EngineError(self._gone or CLOSE_NOTICE))
        return future

    # -- the prompt thread -----------------------------------------------------------------

    def _prepare(self, request: Request, t_submit: float) -> None:
        with self._cond:
            self._building.discard(request.request_id)
            if request.request_id in self._dropped:
                self._dropped.discard(request.request_id)
                self._sink([dropped(request.request_id, request.conversation_id, t_submit, request.model)])
                return
        engine = self._find(request.model) if self._gone is None else None
        prompt = engine.prepare(request) if engine is not None else None  # none: refused later
        self._post(("submit", (request, t_submit, engine, prompt)))

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        name, config = self._first
        self._ram = HostBudget()  # one budget for the RAM tiers of all the models this thread holds
        try:
            self.engines = {name: Engine(config, self._sink, name, self._ram)}
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
            self._loader.shutdown(wait=False)

    def _loop(self) -> None:
        while True:
            items = self._take(block=not any(engine.has_work() for engine in self.engines.values()))
            if any(kind == "stop" for kind, _ in items):
                self._close(CLOSE_NOTICE, [item for item in items if item[0] != "stop"])
                return
            for kind, arg in items:
                try:
                    self._handle(kind, arg)
                except Exception as e:
                    self._item_failed(kind, arg, e)
            engine = self._next_with_work()
            if engine is not None:
                try:
                    engine.step()
                except Exception as e:  # a bug must not leave clients waiting forever
                    engine.fail_all(f"internal error: {e!r}")

    def _take(self, block: bool) -> list[tuple[str, Any]]:
        with self._cond:
            while block and not self._inbox:
                self._cond.wait()
            items = list(self._inbox)
            self._inbox.clear()
        items.sort(key=lambda item: _ORDER[item[0]])
        return items

    def _next_with_work(self) -> Engine | None:
        """The first engine with work after the one stepped last: the models take turns, a decode each."""
        names = list(self.engines)
        start = names.index(self._last_stepped) + 1 if self._last_stepped in names else 0
        for name in names[start:] + names[:start]:
            if self.engines[name].has_work():
                self._last_stepped = name
                return self.engines[name]
        return None

    def _handle(self, kind: str, arg) -> None:
        if kind == "submit":
            self._take_request(*arg)
        elif kind == "cancel":
            request_id, model = arg
            engine = self._find(model)
            if engine is not None:  # else its model is gone, and with it the request
                engine.cancel(request_id)
        elif kind == "call":
            fn, future, model = arg
            _settle(future, lambda: fn(self._named(model)))
        elif kind == "install":
            name, engine, replaces, future = arg
            _settle(future, lambda: self._install(name, engine, replaces))
        elif kind == "unload":
            name, future = arg
            _settle(future, lambda: self._unload(name))

    def _take_request(self, request: Request, t_submit: float, built_by: Engine | None, prompt) -> None:
        engine = self._find(request.model)
        if engine is None:
            error = f"no model named {request.model!r} is loaded"
            self._sink([refused(request.request_id, error, request.conversation_id, t_submit, request.model)])
        elif built_by is engine:
            engine.submit(request, t_submit, prompt)  # it answers a request it cannot take with an ERROR finish
        else:  # built for an engine since replaced (or none): build it again for this one
            with self._cond:
                self._building.add(request.request_id)
            self._prompts.submit(self._prepare, request, t_submit)

    def _item_failed(self, kind: str, arg, error: Exception) -> None:
        reason = f"internal error: {error!r}"
        if kind == "submit":  # only that request fails
            request, t_submit = arg[:2]
            self._sink([refused(request.request_id, reason, request.conversation_id, t_submit, request.model, Fault.INTERNAL)])
        elif kind == "cancel":  # it left its sequence in an unknown state: end that engine's requests rather than guess
            engine = self._find(arg[1])
            if engine is not None:
                engine.fail_all(reason)

    # -- the models ------------------------------------------------------------------------

    def _find(self, name: str | None) -> Engine | None:
        return self.engine if name is None else self.engines.get(name)

    def _named(self, name: str | None) -> Engine:
        engine = self._find(name)
        if engine is None:
            raise UnknownModelError(f"no model named {name!r} is loaded; loaded: {', '.join(self.engines)}")
        return engine

    def _check_name(self, name: str, replaces: str | None) -> None:
        if replaces is not None:
            self._named(replaces)
        if name in self.engines and name != replaces:
            raise ValueError(f"a model named {name!r} is already loaded: give this one another name")

    def _install(self, name: str, engine: Engine, replaces: str | None):
        try:
            self._check_name(name, replaces)  # again: another load may have taken the name meanwhile
        except Exception:
            engine.shutdown(CLOSE_NOTICE)  # it holds no requests, nor did a prompt read it: this frees it
            raise
        if replaces is None:
            self.engines = {**self.engines, name: engine}
        else:  # in the old one's place, so the default stays the default
            old = self.engines[replaces]
            self.engines = {(name if n == replaces else n): (engine if n == replaces else e) for n, e in self.engines.items()}
            self._retire(old, RELOAD_NOTICE)
        return engine.info

    def _unload(self, name: str) -> None:
        engine = self._named(name)
        if len(self.engines) == 1:
            raise ValueError(f"{name} is the only model loaded: load another first, or reload it with another model")
        self.engines = {n: e for n, e in self.engines.items() if n != name}
        self._retire(engine, unload_notice(name))

    def _retire(self, engine: Engine, notice: str) -> Future:
        """End an engine's requests now; free its model on the prompt thread, after any prompt being
        read with its tokenizer (that thread runs one task at a time), so nobody here waits for it."""
        engine.cut_all(notice)
        try:
            return self._prompts.submit(engine.backend.close)
        except RuntimeError:  # the prompt thread has ended: nothing reads the tokenizer now
            engine.backend.close()
            return _done()

    # -- the end ---------------------------------------------------------------------------

    def _close(self, notice: str, taken: list[tuple[str, Any]]) -> None:
        """Stop taking items; settle those taken with the stop and those still queued."""
        with self._cond:
            self._gone = notice
            items = taken + list(self._inbox)
            self._inbox.clear()
        for item in items:
            self._refuse(item, notice)
        freed = [self._retire(engine, notice) for engine in self.engines.values()]
        for future in freed:  # before the thread ends: its caller may exit the process next
            future.result()

    def _die(self, reason: str) -> None:
        with self._cond:
            self.failure = self._gone = reason
            items = list(self._inbox)
            self._inbox.clear()
        for item in items:
            self._refuse(item, reason)
        for engine in self.engines.values():
            try:
                engine.fail_all(reason, Fault.UNAVAILABLE)  # best effort; served again after a restart
            except BaseException:
                pass
        if self._on_exit is not None:
            self._on_exit(reason)

    def _refuse(self, item: tuple[str, Any], reason: str) -> None:
        """Settle an inbox item the thread will never handle."""
        kind, arg = item
        if kind == "submit":
            request, t_submit = arg[:2]
            self._sink([refused(request.request_id, reason, request.conversation_id, t_submit, request.model)])
        elif kind == "install":
            _, engine, _, future = arg
            engine.shutdown(reason)  # loaded while the thread ended: nobody will use it
            future.set_exception(EngineError(reason))
        elif kind in ("call", "unload"):
            arg[1].set_exception(EngineError(reason))


def _done() -> Future:
    future: Future = Future()
    future.set_result(None)
    return future


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except Exception as e:  # every failure goes back to the caller; the engine goes on
        future.set_exception(e)
