"""What the engine tells its clients: streamed text, and one final event per request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

from .probs import TokenProbs
from .stats import RequestStats


class FinishReason(str, Enum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max tokens reached
    CONTEXT = "context"  # the context is full
    CANCELLED = "cancelled"
    ERROR = "error"


class Fault(str, Enum):
    """Whose fault an ERROR finish is: what a server answers (400, 503 or 500) and whether to retry."""

    REQUEST = "request"  # the request cannot be served as sent (a prompt longer than the context)
    UNAVAILABLE = "unavailable"  # the engine cannot serve now (it stopped, the model went): retry later
    INTERNAL = "internal"  # the engine failed on a request it should have served
    TEMPLATE = "template"  # the model's chat template failed on it: the built-in template may serve it


@dataclass(frozen=True, slots=True)
class TokenEvent:
    request_id: str
    text: str  # may be empty while a character or a possible stop string is held back
    n_tokens: int  # tokens this event accounts for (0 for a final flush)
    t: float  # monotonic time
    token: int = -1  # the sampled token id (-1 for a final flush)
    # on a reply's first token only: its prompt's tokens found in the KV cache and computed, so a
    # client can show the hit rate while the reply streams (-1 on every other event)
    cached: int = -1
    evaluated: int = -1
    probs: TokenProbs | None = None  # how likely the token was, when the request asked (n_probs)
    # a chat's thoughts: what this token adds to them (`text` is the answer's part), when its model
    # thinks and its request keeps them apart (Request.separate_thoughts)
    reasoning: str = ""
    thought: bool = False  # the token was one of its thoughts (counted in RequestStats.reasoning_tokens)


@dataclass(frozen=True, slots=True)
class FinishEvent:
    request_id: str
    reason: FinishReason
    text: str  # the whole reply (its answer, where its thoughts are kept apart)
    stats: RequestStats
    error: str | None = None  # why, when reason is ERROR
    notice: str | None = None  # something the user should know (e.g. old turns were dropped)
    model: str | None = None  # the name of the model that served it (None: not said)
    fault: Fault | None = None  # whose fault, when reason is ERROR (None: not said, taken as INTERNAL)
    reasoning: str = ""  # the whole reply's thoughts, when kept apart from its answer (`text`)

    @property
    def ok(self) -> bool:
        return self.reason not in (FinishReason.ERROR, FinishReason.CANCELLED)


Event = TokenEvent | FinishEvent


def refused(
    request_id: str,
    error: str,
    conversation_id: str | None = None,
    t_submit: float | None = None,
    model: str | None = None,
    fault: Fault = Fault.UNAVAILABLE,
) -> FinishEvent:
    """The final event of a request that no engine step served (its engine is gone, or it was refused)."""
    stats = _unserved(request_id, conversation_id, t_submit)
    return FinishEvent(request_id, FinishReason.ERROR, "", stats, error, model=model, fault=fault)


def failed(request_id: str, stats: RequestStats, error: str, fault: Fault, model: str | None) -> FinishEvent:
    """A request the engine took and could not serve at all (no prompt, no context)."""
    stats.t_finish = time.monotonic()
    return FinishEvent(request_id, FinishReason.ERROR, "", stats, error, model=model, fault=fault)


def dropped(request_id: str, conversation_id: str | None, t_submit: float, model: str | None) -> FinishEvent:
    """The final event of a request cancelled before it reached its engine."""
    return FinishEvent(request_id, FinishReason.CANCELLED, "", _unserved(request_id, conversation_id, t_submit), model=model)


def _unserved(request_id: str, conversation_id: str | None, t_submit: float | None) -> RequestStats:
    now = time.monotonic()
    return RequestStats(request_id, conversation_id, t_submit=now if t_submit is None else t_submit, t_finish=now)
