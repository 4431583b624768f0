"""What the engine thread's inbox holds: one frozen command per kind, each knowing what it does on the
engine thread (`handle`), what it answers when the thread will never run it (`refuse`), and what a
failure while handling it costs (`failed`). The thread only takes, orders and dispatches them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..errors import EngineError
from ..events import Fault, refused

if TYPE_CHECKING:
    from ..engine import Engine, Sink
    from ..model_info import ModelInfo
    from ..prompt.builder import Prompt
    from ..sequence import Request


class Host(Protocol):
    """What the commands need of the engine thread."""

    sink: Sink

    def find(self, name: str | None) -> Engine | None: ...
    def named(self, name: str | None) -> Engine: ...
    def take_request(self, submit: Submit) -> None: ...
    def install_model(self, name: str, engine: Engine, replaces: str | None) -> ModelInfo: ...
    def remove_model(self, name: str) -> None: ...


@dataclass(frozen=True)
class Command:
    # all taken at once run before the next decode in this order: a model in place before the
    # requests meant for it, a cancel after its own submit, a call after both
    ORDER: ClassVar[int]
    URGENT: ClassVar[bool] = False  # jumps to the front of the inbox

    def handle(self, host: Host) -> None:
        raise NotImplementedError

    def refuse(self, host: Host, reason: str) -> None:
        """The thread takes no more commands: answer whoever waits."""

    def failed(self, host: Host, error: Exception) -> None:
        """Handling it raised: settle what it leaves open."""
        self.refuse(host, f"internal error: {error!r}")


@dataclass(frozen=True)
class Stop(Command):
    ORDER = 0
    URGENT = True

    def handle(self, host: Host) -> None:  # the thread stops on seeing it, before handling anything
        raise AssertionError("a stop is never handled")


@dataclass(frozen=True)
class Install(Command):
    """A model loaded on the loader thread, to take its place (beside the others, or as `replaces`)."""

    ORDER = 0
    URGENT = True
    name: str
    engine: Engine
    replaces: str | None
    future: Future

    def handle(self, host: Host) -> None:
        _settle(self.future, lambda: host.install_model(self.name, self.engine, self.replaces))

    def refuse(self, host: Host, reason: str) -> None:
        self.engine.shutdown(reason)  # loaded while the thread ended: nobody will use it
        self.future.set_exception(EngineError(reason))


@dataclass(frozen=True)
class Unload(Command):
    ORDER = 0
    URGENT = True
    name: str
    future: Future

    def handle(self, host: Host) -> None:
        _settle(self.future, lambda: host.remove_model(self.name))

    def refuse(self, host: Host, reason: str) -> None:
        self.future.set_exception(EngineError(reason))


@dataclass(frozen=True)
class Submit(Command):
    """A request whose prompt the prompt thread built (`prompt`) with `built_by`'s template and tokenizer."""

    ORDER = 1
    request: Request
    t_submit: float
    built_by: Engine | None = None
    prompt: Prompt | None = None

    def handle(self, host: Host) -> None:
        host.take_request(self)

    def refuse(self, host: Host, reason: str, fault: Fault = Fault.UNAVAILABLE) -> None:
        request = self.request
        host.sink([refused(request.request_id, reason, request.conversation_id, self.t_submit, request.model, fault)])

    def failed(self, host: Host, error: Exception) -> None:  # only that request fails
        self.refuse(host, f"internal error: {error!r}", Fault.INTERNAL)


@dataclass(frozen=True)
class Cancel(Command):
    ORDER = 2
    URGENT = True
    request_id: str
    model: str | None

    def handle(self, host: Host) -> None:
        engine = host.find(self.model)
        if engine is not None:  # else its model is gone, and with it the request
            engine.cancel(self.request_id)

    def failed(self, host: Host, error: Exception) -> None:
        # it left its sequence in an unknown state: end that engine's requests rather than guess
        engine = host.find(self.model)
        if engine is not None:
            engine.fail_all(f"internal error: {error!r}")


@dataclass(frozen=True)
class Call(Command):
    """fn(engine of `model`) between two steps; its result or exception goes to `future`."""

    ORDER = 3
    fn: Callable[[Engine], Any]
    future: Future
    model: str | None

    def handle(self, host: Host) -> None:
        _settle(self.future, lambda: self.fn(host.named(self.model)))

    def refuse(self, host: Host, reason: str) -> None:
        self.future.set_exception(EngineError(reason))


def _settle(future: Future, fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except Exception as e:  # every failure goes back to the caller; the engine goes on
        future.set_exception(e)
