"""The engine's asyncio face: `async for event in client.generate(...)`.

The one place where a thread hop happens: the engine thread hands each step's events to
`loop.call_soon_threadsafe`, and they are dispatched to per-request queues on the event loop.
Readers on any thread get the engine's figures as immutable values (snapshot, recent steps, model
info), never the engine itself; if the engine thread ends, every open stream ends with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence

from .engine.backend import ModelInfo
from .engine.engine_thread import EngineThread
from .engine.errors import EngineError
from .engine.events import Event, FinishEvent, refused
from .engine.params import EngineConfig, Policy, Priority, SamplingParams, ServingMode
from .engine.sequence import Request
from .engine.stats import EngineSnapshot, StepStats

Listener = Callable[[list[Event]], None]
FailureListener = Callable[[str], None]  # the reason the engine thread ended

_ids = itertools.count(1)


def new_request_id() -> str:
    return f"req-{next(_ids)}"


class EngineClient:
    def __init__(self, config: EngineConfig):
        self.config = config
        self._thread: EngineThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, asyncio.Queue] = {}
        self._listeners: list[Listener] = []
        self._failure_listeners: list[FailureListener] = []

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model (off the event loop); raises ModelLoadError with the reason."""
        self._loop = asyncio.get_running_loop()
        thread = EngineThread(self.config, self._on_events, self._on_engine_exit)
        load = self._loop.run_in_executor(None, thread.start)
        try:
            await asyncio.shield(load)
        except asyncio.CancelledError:
            # the model goes on loading in its own thread: stop that engine as soon as it is up
            load.add_done_callback(lambda f: f.exception() or self._loop.run_in_executor(None, thread.stop))
            raise
        self._thread = thread

    async def reload(self, config: EngineConfig):
        """Swap to a new configuration or model; the old one stays if the new one fails to load."""
        self._check_running()
        info = await asyncio.wrap_future(self._thread.reload(config))
        self.config = config
        return info

    async def close(self) -> None:
        if self._thread is not None:
            await self._loop.run_in_executor(None, self._thread.stop)
            self._thread = None

    async def restart(self) -> None:
        """A fresh engine thread on the same configuration, after the last one ended (or to reset it)."""
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

    # -- read-only figures, safe on any thread (the engine publishes them as immutable values) --

    @property
    def snapshot(self) -> EngineSnapshot | None:
        """The engine as a whole after its last step; None before the start."""
        engine = self._engine
        return engine.snapshot if engine else None

    def recent_steps(self, seconds: float | None = None) -> tuple[StepStats, ...]:
        """The steps of the last `seconds` (all those kept when None), oldest first."""
        engine = self._engine
        if engine is None:
            return ()
        return engine.steps.since(-math.inf if seconds is None else time.monotonic() - seconds)

    @property
    def model_info(self) -> ModelInfo | None:
        engine = self._engine
        return engine.info if engine else None

    @property
    def _engine(self):
        return self._thread.engine if self._thread else None

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

    async def generate(
        self,
        messages: Sequence[dict[str, str]] | None = None,
        params: SamplingParams | None = None,
        *,
        prompt: str | None = None,
        conversation_id: str | None = None,
        request_id: str | None = None,
        priority: Priority = Priority.NORMAL,
        reply_prefix: Sequence[int] = (),
    ) -> AsyncIterator[Event]:
        """Stream one reply: TokenEvents, then exactly one FinishEvent.

        Leaving the loop early (break, an exception, the task cancelled) cancels the request, so
        its sequence never lingers in the engine. Raises EngineError if the engine is not running.
        """
        self._check_running()
        request = Request(
            request_id=request_id or new_request_id(),
            params=params or SamplingParams(),
            messages=tuple(dict(m) for m in messages) if messages is not None else None,
            prompt=prompt,
            conversation_id=conversation_id,
            priority=priority,
            reply_prefix=tuple(reply_prefix),
        )
        queue: asyncio.Queue = asyncio.Queue()
        self._streams[request.request_id] = queue
        finished = False
        try:
            self._thread.submit(request)
            while not finished:
                event = await queue.get()
                finished = isinstance(event, FinishEvent)
                yield event
        finally:
            self._streams.pop(request.request_id, None)
            if not finished and self._thread is not None:
                self._thread.cancel(request.request_id)

    async def complete(self, messages=None, params=None, **kwargs) -> FinishEvent:
        """Run one request to its end and return its FinishEvent."""
        async for event in self.generate(messages, params, **kwargs):
            if isinstance(event, FinishEvent):
                return event
        raise RuntimeError("the stream ended without a final event")

    def cancel(self, request_id: str) -> None:
        if self._thread is not None:
            self._thread.cancel(request_id)

    async def set_mode(self, mode: ServingMode) -> None:
        """Batched or sequential serving, switched live (no reload)."""
        await self.call(lambda engine: engine.set_mode(mode))
        self.config = self.config.with_(mode=mode)

    async def set_policy(self, policy: Policy) -> None:
        await self.call(lambda engine: engine.set_policy(policy))
        self.config = self.config.with_(policy=policy)

    async def set_itl_target(self, itl_target_ms: float | None) -> None:
        """Adapt the batch size to this inter-token latency target (ms), or None for a fixed batch."""
        await self.call(lambda engine: engine.set_itl_target(itl_target_ms))
        self.config = self.config.with_(itl_target_ms=itl_target_ms)

    async def call(self, fn):
        """Run fn(engine) on the engine thread and await its result."""
        self._check_running()
        return await asyncio.wrap_future(self._thread.call(fn))

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
