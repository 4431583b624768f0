"""The engine's asyncio face: `async for event in client.generate(...)`, on one model or several.

The one place where a thread hop happens: the engine thread hands each step's events to
`loop.call_soon_threadsafe`, and they are dispatched to per-request queues on the event loop.
Models are loaded, unloaded and addressed by name (the file name without .gguf, or an alias); the
first loaded is the default, which every call without a model uses. Readers on any thread get each
model's figures as immutable values (snapshot, recent steps, model info), never the engine itself;
if the engine thread ends, every open stream ends with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from pathlib import Path

from .engine.cell_map import CellMap
from .engine.errors import EngineError, UnknownModelError
from .engine.events import Event, FinishEvent, refused
from .engine.model_info import ModelInfo
from .engine.params import EngineConfig, Policy, Priority, ServingMode
from .engine.prompt.caps import TemplateCaps
from .engine.sampling.params import SamplingParams
from .engine.sequence import Request
from .engine.stats import EngineSnapshot, StepStats
from .engine.thread.engine_thread import EngineThread, model_name

Listener = Callable[[list[Event]], None]
FailureListener = Callable[[str], None]  # the reason the engine thread ended

_ids = itertools.count(1)


def new_request_id() -> str:
    return f"req-{next(_ids)}"


class EngineClient:
    def __init__(self, config: EngineConfig, name: str | None = None):
        # the models to load at the start, by name, the default first; once started, the engine
        # thread's engines are the truth, and they are read back here when it closes (for a restart)
        self._models: dict[str, EngineConfig] = {name or model_name(config.model_path): config}
        self._thread: EngineThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, asyncio.Queue] = {}
        self._stream_models: dict[str, str | None] = {}  # request id -> the model it was sent to
        self._listeners: list[Listener] = []
        self._failure_listeners: list[FailureListener] = []

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the models (off the event loop), the default first; raises ModelLoadError with the reason, and then none stays loaded."""
        self._loop = asyncio.get_running_loop()
        (name, config), *more = self._models.items()
        thread = EngineThread(config, self._on_events, self._on_engine_exit, name)
        load = self._loop.run_in_executor(None, thread.start)
        try:
            await asyncio.shield(load)
        except asyncio.CancelledError:
            # the model goes on loading in its own thread: stop that engine as soon as it is up
            load.add_done_callback(lambda f: f.exception() or self._loop.run_in_executor(None, thread.stop))
            raise
        self._thread = thread
        models = dict(self._models)
        try:
            for name, config in more:
                await asyncio.wrap_future(thread.load(config, name))
        except BaseException:
            await self.close()
            self._models = models
            raise

    async def load_model(self, config: EngineConfig, name: str | None = None) -> str:
        """Load another model beside those loaded and return its name (`name`, else its file name
        without .gguf). Raises ModelLoadError (a bad file) or ValueError (the name is taken)."""
        self._check_running()
        name = name or model_name(config.model_path)
        await asyncio.wrap_future(self._thread.load(config, name))
        return name

    async def unload_model(self, name: str) -> None:
        """Free a model; its running and waiting requests end with a notice that it was unloaded.
        Raises UnknownModelError, or ValueError for the last model loaded (reload it instead)."""
        self._check_running()
        await asyncio.wrap_future(self._thread.unload(name))

    async def reload(self, config: EngineConfig, model: str | None = None, name: str | None = None) -> ModelInfo:
        """Put `config` in place of `model` (None: the default), named `name` (None: its file name);
        the old one stays if the new one fails to load."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.reload(config, model, name))

    async def close(self) -> None:
        if self._thread is not None:
            self._models = {name: engine.config for name, engine in self._thread.engines.items()} or self._models
            await self._loop.run_in_executor(None, self._thread.stop)
            self._thread = None

    async def restart(self) -> None:
        """A fresh engine thread with the same models and settings, after the last one ended (or to reset it)."""
        await self.close()
        await self.start()

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive

    @property
    def failure(self) -> str | None:
        """Why the engine thread ended on its own, or None while it runs (or was closed on purpose)."""
        return self._thread.failure if self._thread is not None else None

    def _check_running(self) -> None:
        if not self.is_running:
            raise EngineError(self.failure or "the engine is not running")

    # -- the models, and their read-only figures: safe on any thread (immutable values) --------
    # `model` is a loaded model's name, None the default's; a name not loaded (just unloaded, say)
    # reads as nothing there: None, or no steps

    @property
    def models(self) -> dict[str, ModelInfo]:
        """The loaded models by name, the default first (none before the start)."""
        return {name: engine.info for name, engine in self._engines.items()}

    @property
    def default_model(self) -> str:
        """The name of the model that requests without one go to: the first loaded."""
        return next(iter(self._engines or self._models))

    @property
    def config(self) -> EngineConfig:
        """The default model's settings."""
        return self.config_of(None)

    def config_of(self, model: str | None) -> EngineConfig:
        engine = self._engine_of(model)
        if engine is not None:
            return engine.config
        if not self._engines and (model is None or model in self._models):  # not started, or closed
            return self._models[model or self.default_model]
        raise UnknownModelError(self._unknown(model))

    @property
    def snapshot(self) -> EngineSnapshot | None:
        """The default model's engine after its last step; None before the start."""
        return self.snapshot_of(None)

    def snapshot_of(self, model: str | None) -> EngineSnapshot | None:
        engine = self._engine_of(model)
        return engine.figures.snapshot if engine else None

    def cell_map_of(self, model: str | None = None) -> CellMap | None:
        """A model's KV cells by slot, and its RAM tier (rebuilt at most ten times a second); None before the start."""
        engine = self._engine_of(model)
        return engine.figures.cell_map if engine else None

    def recent_steps(self, seconds: float | None = None, model: str | None = None) -> tuple[StepStats, ...]:
        """A model's steps of the last `seconds` (all those kept when None), oldest first."""
        engine = self._engine_of(model)
        if engine is None:
            return ()
        return engine.figures.steps.since(-math.inf if seconds is None else time.monotonic() - seconds)

    @property
    def model_info(self) -> ModelInfo | None:
        return self.model_info_of(None)

    def model_info_of(self, model: str | None) -> ModelInfo | None:
        engine = self._engine_of(model)
        return engine.info if engine else None

    @property
    def _engines(self) -> dict:
        return self._thread.engines if self._thread else {}

    def _engine_of(self, model: str | None):
        engines = self._engines  # one read: the engine thread replaces the dict, never changes it
        return next(iter(engines.values()), None) if model is None else engines.get(model)

    def _unknown(self, model: str) -> str:
        return f"no model named {model!r} is loaded; loaded: {', '.join(self._engines or self._models)}"

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(events)` on the event loop for every batch of events (plots, metrics)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_failure_listener(self, listener: FailureListener) -> None:
        """Call `listener(reason)` on the event loop if the engine thread ever ends on its own."""
        self._failure_listeners.append(listener)

    # -- requests --------------------------------------------------------------------------

    def generate(
        self,
        messages: Sequence[dict[str, str]] | None = None,
        params: SamplingParams | None = None,
        *,
        prompt: str | None = None,
        conversation_id: str | None = None,
        request_id: str | None = None,
        priority: Priority = Priority.NORMAL,
        reply_prefix: Sequence[int] = (),
        model: str | None = None,
        template_kwargs: Mapping[str, object] | None = None,
        separate_thoughts: bool = True,
        reasoning_budget: int | None = None,
        continue_final: bool = True,
        add_generation_prompt: bool = True,
    ) -> AsyncIterator[Event]:
        """Stream one reply of `model` (None: the default): TokenEvents, then exactly one FinishEvent.
        A thinking model's thoughts come apart from its answer unless `separate_thoughts` is False;
        `reasoning_budget`, `template_kwargs`, `continue_final` and `add_generation_prompt`: as `Request`'s.

        Leaving the loop early (break, an exception, the task cancelled) cancels the request, so
        its sequence never lingers in the engine. Raises EngineError if the engine is not running,
        UnknownModelError if no model of that name is loaded.
        """
        request = Request(
            request_id=request_id or new_request_id(),
            params=params or SamplingParams(),
            messages=tuple(dict(m) for m in messages) if messages is not None else None,
            prompt=prompt,
            conversation_id=conversation_id,
            priority=priority,
            reply_prefix=tuple(reply_prefix),
            model=model,
            template_kwargs=template_kwargs,
            separate_thoughts=separate_thoughts,
            reasoning_budget=reasoning_budget,
            continue_final=continue_final,
            add_generation_prompt=add_generation_prompt,
        )
        return self._stream(request)

    async def reply(self, request: Request) -> AsyncIterator[Event]:
        """A pane's reply (the workspace's ReplySource): `generate` for one request value, and an
        engine that is not running, or a model not loaded, ends it with an ERROR that says so."""
        try:
            async with aclosing(self._stream(request)) as events:
                async for event in events:
                    yield event
        except EngineError as e:  # raised before the request was submitted: nothing was streamed
            yield refused(request.request_id, str(e), request.conversation_id, model=request.model)

    def model_label(self, model: str | None) -> str:
        """The model file that serves `model` (None: the default)."""
        info = self.models.get(model) if model else self.model_info
        return Path(info.path if info else self.config.model_path).name

    async def _stream(self, request: Request) -> AsyncIterator[Event]:
        self._check_running()
        model = request.model
        if model is not None and model not in self._engines:
            raise UnknownModelError(self._unknown(model))
        queue: asyncio.Queue = asyncio.Queue()
        self._streams[request.request_id] = queue
        self._stream_models[request.request_id] = model
        finished = False
        try:
            self._thread.submit(request)
            while not finished:
                event = await queue.get()
                finished = isinstance(event, FinishEvent)
                yield event
        finally:
            self._streams.pop(request.request_id, None)
            self._stream_models.pop(request.request_id, None)
            if not finished and self._thread is not None:
                self._thread.cancel(request.request_id, model)

    async def complete(self, messages=None, params=None, **kwargs) -> FinishEvent:
        """Run one request to its end and return its FinishEvent."""
        async for event in self.generate(messages, params, **kwargs):
            if isinstance(event, FinishEvent):
                return event
        raise RuntimeError("the stream ended without a final event")

    def cancel(self, request_id: str) -> None:
        if self._thread is not None:
            self._thread.cancel(request_id, self._stream_models.get(request_id))

    # settings of one model's engine, switched live (no reload); the engine keeps them in its config

    async def set_mode(self, mode: ServingMode, model: str | None = None) -> None:
        """Batched, static or sequential serving."""
        await self.call(lambda engine: engine.configure(mode=mode), model)

    async def set_static_window(self, static_window_ms: float, model: str | None = None) -> None:
        """How long a static batch waits for requests to fill it (ms)."""
        await self.call(lambda engine: engine.configure(static_window_ms=static_window_ms), model)

    async def set_policy(self, policy: Policy, model: str | None = None) -> None:
        await self.call(lambda engine: engine.configure(policy=policy), model)

    async def set_itl_target(self, itl_target_ms: float | None, model: str | None = None) -> None:
        """Adapt the batch size to this inter-token latency target (ms), or None for a fixed batch."""
        await self.call(lambda engine: engine.configure(itl_target_ms=itl_target_ms), model)

    async def tokenize(
        self, text: str, model: str | None = None, add_special: bool = False, parse_special: bool = True
    ) -> list[int]:
        """`text`'s token ids in `model`'s vocabulary (read on the prompt thread, beside the steps);
        `add_special`: with its BOS; `parse_special`: control-token texts read as those tokens."""
        self._check_running()
        return await asyncio.wrap_future(
            self._thread.read_vocab(lambda vocab: vocab.tokenize(text, add_special, parse_special), model)
        )

    async def spell(self, tokens: list[int], model: str | None = None) -> list[bytes]:
        """Each token's bytes, control tokens written out; a ValueError for an id the model does not have."""
        self._check_running()
        return await asyncio.wrap_future(
            self._thread.read_vocab(lambda vocab: [vocab.spell(t) for t in _known(vocab, tokens)], model)
        )

    async def apply_template(self, request: Request) -> str:
        """The prompt text `request`'s chat makes (llama-server's /apply-template), read on the prompt
        thread; a RequestError (a ChatTemplateError where the template failed) says why there is none."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.read_prompts(lambda prompts: prompts.text_of(request), request.model))

    async def template_facts(self, model: str | None = None) -> tuple[str, TemplateCaps]:
        """`model`'s chat template and its capabilities (PromptBuilder.template_facts), read on the prompt thread."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.read_prompts(lambda prompts: prompts.template_facts(), model))

    async def detokenize(self, tokens: list[int], model: str | None = None) -> str:
        """The text of `tokens` (llama-server's /detokenize); a ValueError for an id the model does not have."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.read_vocab(lambda vocab: vocab.detokenize(_known(vocab, tokens)), model))

    async def call(self, fn, model: str | None = None):
        """Run fn(engine of `model`) on the engine thread and await its result."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.call(fn, model))

    # -- events from the engine thread --------------------------------------------------------

    def _on_events(self, events: list[Event]) -> None:
        loop = self._loop
        try:
            loop.call_soon_threadsafe(self._dispatch, events)
        except RuntimeError:
            pass  # the loop closed while the engine was finishing: nobody is listening

    def _dispatch(self, events: list[Event]) -> None:
        streams = self._streams
        for event in events:
            queue = streams.get(event.request_id)
            if queue is not None:
                queue.put_nowait(event)
        for listener in self._listeners:
            listener(events)

    def _on_engine_exit(self, reason: str) -> None:
        try:
            self._loop.call_soon_threadsafe(self._engine_died, reason)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting

    def _engine_died(self, reason: str) -> None:
        """End every open stream at once with the reason, then tell the listeners (the window's banner)."""
        self._dispatch([refused(request_id, reason) for request_id in self._streams])
        for listener in self._failure_listeners:
            listener(reason)


def _known(vocab, tokens: list[int]) -> list[int]:
    """`tokens`, if every one is in the vocabulary (llama.cpp would read past its tables otherwise)."""
    bad = next((t for t in tokens if not 0 <= t < vocab.n_vocab), None)
    if bad is not None:
        raise ValueError(f"token {bad} is not in the model's vocabulary (its ids go from 0 to {vocab.n_vocab - 1})")
    return tokens
