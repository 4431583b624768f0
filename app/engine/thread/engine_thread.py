"""The one thread that decodes, for every loaded model: a thread-safe inbox in, events out through a sink.

It holds one Engine per model (its own context, scheduler and KV pool), by name; the first loaded is
the default. It steps the engines that have work in turn, one decode each, so two models share the
cores by steps and a model with nothing to do costs nothing. One thread rather than one per model:
each thread that decodes keeps its own team of llama.cpp's OpenMP workers, and with more of them
than cores an idle model's team slowed the busy one by 29% (docs/performance.md).

The inbox is a deque of commands (inbox.py) under a condition: requests join the back; cancels,
loads and unloads jump to the front, and the thread sleeps on the condition while no engine has work (no polling). A
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

from ..engine import Engine, Sink
from ..errors import EngineError, UnknownModelError
from ..events import Fault, dropped
from ..kv.host_cache import HostBudget
from ..params import EngineConfig
from ..sequence import Request
from .inbox import Call, Cancel, Command, Install, Stop, Submit, Unload

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
        self.sink = sink
        self._on_exit = on_exit
        self._inbox: deque[Command] = deque()
        self._cond = threading.Condition()
        self._ready = Future()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._prompts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-prompts")
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-loader")
        # requests queued for the prompt thread, and those of them cancelled meanwhile (under _cond)
        self._building: set[str] = set()
        self._dropped: set[str] = set()
        self._reading: tuple[str, Engine] | None = None  # the request whose prompt is being built, and its engine
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
            Submit(request, t_submit).refuse(self, self._gone or CLOSE_NOTICE)

    def cancel(self, request_id: str, model: str | None = None) -> None:
        with self._cond:
            if request_id in self._building:  # not built yet: the prompt thread drops it unread
                self._dropped.add(request_id)
                return
            if self._reading is not None and self._reading[0] == request_id:  # being built: its template may loop
                self._dropped.add(request_id)  # the prompt thread drops it once built
                self._reading[1].intake.prompts.interrupt()  # under the lock: the prompt thread is still on this request
                return
        self._post(Cancel(request_id, model))

    def call(self, fn: Callable[[Engine], Any], model: str | None = None) -> Future:
        """Run fn(engine of `model`, None: the default) on the engine thread between two steps."""
        future: Future = Future()
        self._post(Call(fn, future, model))
        return future

    def read_vocab(self, fn: Callable[[Any], Any], model: str | None = None) -> Future:
        """Run fn(the tokenizer of `model`, None: the default) on the prompt thread, where a model
        replaced or unloaded is freed only after the task before it: tokens read beside the steps."""
        return self._on_prompt_thread(lambda: fn(self.named(model).backend.vocab))

    def read_prompts(self, fn: Callable[[Any], Any], model: str | None = None) -> Future:
        """Run fn(the PromptBuilder of `model`, None: the default) on the prompt thread, between
        two requests' prompts (its chat template renders one job at a time)."""
        return self._on_prompt_thread(lambda: fn(self.named(model).intake.prompts))

    def _on_prompt_thread(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()

        def read() -> None:
            try:
                future.set_result(fn())
            except Exception as e:  # an unknown model, a bad token: the caller hears why
                future.set_exception(e)

        try:
            self._prompts.submit(read)
        except RuntimeError:  # the threads have ended
            future.set_exception(EngineError(self._gone or CLOSE_NOTICE))
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
        self._post(Unload(model, future))
        return future

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread.is_alive():
            self._post(Stop())
            self._thread.join(timeout)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.failure is None

    def _post(self, command: Command) -> None:
        with self._cond:
            if self._gone is None:
                if command.URGENT:
                    self._inbox.appendleft(command)
                else:
                    self._inbox.append(command)
                self._cond.notify()
                return
        command.refuse(self, self._gone)  # the thread takes no more commands: answer at once

    def _build(self, config: EngineConfig, name: str, replaces: str | None) -> Future:
        """Load an engine on the loader thread (the engine thread goes on stepping), then hand it over."""
        future: Future = Future()

        def build() -> None:
            try:
                self._check_name(name, replaces)  # before a load of seconds that could only be refused
                engine = Engine(config, self.sink, name, self._ram)
            except Exception as e:  # a bad model or bad settings: the caller hears why
                future.set_exception(e)
                return
            self._post(Install(name, engine, replaces, future))

        try:
            self._loader.submit(build)
        except RuntimeError:  # the threads have ended
            future.set_exception(EngineError(self._gone or CLOSE_NOTICE))
        return future

    # -- the prompt thread -----------------------------------------------------------------

    def _prepare(self, request: Request, t_submit: float) -> None:
        with self._cond:
            self._building.discard(request.request_id)
            if self._was_dropped(request, t_submit):
                return
            engine = self.find(request.model) if self._gone is None else None
            self._reading = (request.request_id, engine) if engine is not None else None
        try:
            prompt = engine.intake.prepare(request) if engine is not None else None  # none: refused later
        finally:
            with self._cond:
                self._reading = None
                cancelled = self._was_dropped(request, t_submit)  # while it was being built
        if not cancelled:  # a cancelled one's prompt holds nothing to free
            self._post(Submit(request, t_submit, engine, prompt))

    def _was_dropped(self, request: Request, t_submit: float) -> bool:
        """Under _cond: whether the request was cancelled before it reached its engine (its final event sent here)."""
        if request.request_id not in self._dropped:
            return False
        self._dropped.discard(request.request_id)
        self.sink([dropped(request.request_id, request.conversation_id, t_submit, request.model)])
        return True

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        name, config = self._first
        self._ram = HostBudget()  # one budget for the RAM tiers of all the models this thread holds
        try:
            self.engines = {name: Engine(config, self.sink, name, self._ram)}
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
            commands = self._take(self._idle_s())
            if any(isinstance(command, Stop) for command in commands):
                self._close(CLOSE_NOTICE, [command for command in commands if not isinstance(command, Stop)])
                return
            for command in commands:
                try:
                    command.handle(self)
                except Exception as e:
                    command.failed(self, e)
            engine = self._next_with_work()
            if engine is not None:
                try:
                    engine.step()
                except Exception as e:  # a bug must not leave clients waiting forever
                    engine.fail_all(f"internal error: {e!r}")

    def _idle_s(self) -> float | None:
        """How long the thread may wait for its inbox: not at all while an engine can step; while a
        static batch gathers, until it is due; for ever (None) with no work anywhere."""
        waits = [engine.ready_in() for engine in self.engines.values() if engine.has_work()]
        return min(waits) if waits else None

    def _take(self, wait_s: float | None) -> list[Command]:
        with self._cond:
            if wait_s != 0:
                self._cond.wait_for(lambda: self._inbox, wait_s)
            commands = list(self._inbox)
            self._inbox.clear()
        commands.sort(key=lambda command: command.ORDER)
        return commands

    def _next_with_work(self) -> Engine | None:
        """The first engine with work after the one stepped last: the models take turns, a decode each."""
        names = list(self.engines)
        start = names.index(self._last_stepped) + 1 if self._last_stepped in names else 0
        for name in names[start:] + names[:start]:
            if self.engines[name].has_work():
                self._last_stepped = name
                return self.engines[name]
        return None

    # -- what the commands call (inbox.Host) ----------------------------------------------

    def take_request(self, submit: Submit) -> None:
        request = submit.request
        engine = self.find(request.model)
        if engine is None:
            submit.refuse(self, f"no model named {request.model!r} is loaded")
        elif submit.built_by is engine:
            engine.submit(request, submit.t_submit, submit.prompt)  # it answers a request it cannot take with an ERROR finish
        else:  # built for an engine since replaced (or none): build it again for this one
            with self._cond:
                self._building.add(request.request_id)
            self._prompts.submit(self._prepare, request, submit.t_submit)

    # -- the models ------------------------------------------------------------------------

    def find(self, name: str | None) -> Engine | None:
        return self.engine if name is None else self.engines.get(name)

    def named(self, name: str | None) -> Engine:
        engine = self.find(name)
        if engine is None:
            raise UnknownModelError(f"no model named {name!r} is loaded; loaded: {', '.join(self.engines)}")
        return engine

    def _check_name(self, name: str, replaces: str | None) -> None:
        if replaces is not None:
            self.named(replaces)
        if name in self.engines and name != replaces:
            raise ValueError(f"a model named {name!r} is already loaded: give this one another name")

    def install_model(self, name: str, engine: Engine, replaces: str | None):
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

    def remove_model(self, name: str) -> None:
        engine = self.named(name)
        if len(self.engines) == 1:
            raise ValueError(f"{name} is the only model loaded: load another first, or reload it with another model")
        self.engines = {n: e for n, e in self.engines.items() if n != name}
        self._retire(engine, unload_notice(name))

    def _retire(self, engine: Engine, notice: str) -> Future:
        """End an engine's requests now; free its model on the prompt thread, after any prompt being
        read with its tokenizer (that thread runs one task at a time), so nobody here waits for it.
        The prompt it reads then ends at once: its chat template's sandbox is closed first."""
        engine.cut_all(notice)
        engine.intake.prompts.close()  # a chat template rendering now stops, so the model is freed without waiting for it
        try:
            return self._prompts.submit(engine.backend.close)
        except RuntimeError:  # the prompt thread has ended: nothing reads the tokenizer now
            engine.backend.close()
            return _done()

    # -- the end ---------------------------------------------------------------------------

    def _close(self, notice: str, taken: list[Command]) -> None:
        """Stop taking commands; settle those taken with the stop and those still queued."""
        with self._cond:
            self._gone = notice
            commands = taken + list(self._inbox)
            self._inbox.clear()
        for command in commands:
            command.refuse(self, notice)
        freed = [self._retire(engine, notice) for engine in self.engines.values()]
        for future in freed:  # before the thread ends: its caller may exit the process next
            future.result()

    def _die(self, reason: str) -> None:
        with self._cond:
            self.failure = self._gone = reason
            commands = list(self._inbox)
            self._inbox.clear()
        for command in commands:
            command.refuse(self, reason)
        for engine in self.engines.values():
            try:
                engine.fail_all(reason, Fault.UNAVAILABLE)  # best effort; served again after a restart
            except BaseException:
                pass
        if self._on_exit is not None:
            self._on_exit(reason)


def _done() -> Future:
    future: Future = Future()
    future.set_result(None)
    return future
