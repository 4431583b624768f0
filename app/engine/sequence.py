"""One request in flight: its tokens, where it stands, how it samples.

Who changes what: the scheduler its status (and its place in the queues), the KV manager its slot
and how many of its tokens the slot holds, the engine its tokens and its sampling. What one step decides for it is the step's (sched/plan.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, auto

import numpy as np

from .images import image_key
from .params import Priority
from .positions import PositionTable
from .sampling.draw import Draw
from .sampling.params import SamplingParams
from .stats import RequestStats
from .text_stream import TextStream
from .thoughts import Thoughts


@dataclass(frozen=True)
class Request:
    """What a client submits. Either `messages` (rendered with the chat template) or `prompt`."""

    request_id: str
    params: SamplingParams
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    conversation_id: str | None = None  # keeps KV cells between the turns of one chat
    priority: Priority = Priority.NORMAL  # served first under the priority policy
    # the reply's first tokens, given: it goes on from them (a branch from another token of a reply)
    reply_prefix: tuple[int, ...] = ()
    model: str | None = None  # the name of the loaded model that serves it (None: the default model)
    builtin_template: bool = False  # messages rendered with the built-in ChatML template, not the model's
    # more variables for the chat template (`chat_template_kwargs`: enable_thinking, reasoning_effort, ...)
    template_kwargs: Mapping[str, object] | None = None
    # a chat's thoughts apart from its answer (TokenEvent.reasoning), or left in it as the model wrote them
    # (llama-server's --reasoning-format none); where they are is known either way
    separate_thoughts: bool = True
    # tokens a reply may think for before its family's closing marker is put in (None: no limit)
    reasoning_budget: int | None = None
    # a last assistant message (no tool calls) is the reply's start, which the reply continues
    # (llama-server's prefill, vLLM's continue_final_message); False: a new turn starts after it
    continue_final: bool = True
    # the chat template's generation prompt at the prompt's end (False: vLLM's add_generation_prompt
    # false, the model writes its turn's header itself); a continued last message has it always
    add_generation_prompt: bool = True


class SequenceStatus(Enum):
    """Where a sequence stands; the scheduler alone changes it. WAITING (Scheduler.add; again when
    preempted: its cells given back, its tokens kept) -> RUNNING (admitted, once the KV manager gave
    it a slot) -> FINISHED (Scheduler.finish, which the engine calls when the reply ends, is
    cancelled or fails, from either of the others). A RUNNING sequence beyond the batch limit is
    paused, not moved: it keeps its slot and cells, and skips steps until the limit takes it in."""

    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    def __init__(self, request: Request, prompt_tokens: list[int], stats: RequestStats, arrival: int, stop: tuple[str, ...] = ()):
        self.request = request
        self.request_id = request.request_id
        self.params = request.params
        self.tokens = list(prompt_tokens)  # prompt, then every generated token
        self.num_prompt_tokens = len(prompt_tokens)
        self.num_computed = 0  # leading tokens whose KV cells this sequence's slot holds (the KV manager's)
        self.status = SequenceStatus.WAITING
        self.slot_id: int | None = None  # the llama.cpp sequence id whose cells it uses (the KV manager's slot)
        self.bypassed = 0  # requests admitted ahead of it while it waited for room (bounded)
        self.queued_step = 0  # the scheduler's step when it last joined the queue
        self.t_queued = 0.0  # time.monotonic() when the scheduler first queued it (a static batch's window)
        self.turn_start = 0  # tokens it had generated when last admitted: its turn's share so far
        self.sampler = None
        self.grammar = None  # its llguidance Constraint, when its replies must follow a grammar
        self.draw = Draw.CHAIN
        self.drafter = None  # spec.drafters.Drafter (an NgramDrafter without a draft model), made at its first draft
        self.stream = TextStream(request.params.stop + stop)
        self.stats = stats
        self.arrival = arrival  # submission order, for fair queues
        self.notice: str | None = None
        self.thoughts = Thoughts(None)  # the reply's thoughts and answer apart (set from its prompt)
        self.marker_tokens: frozenset[int] = frozenset()  # control tokens its split must read written out
        self.close_tokens: tuple[int, ...] = ()  # put in when its reasoning budget runs out
        self.thoughts_closed = False  # its budget's closing marker was put in (once a reply)
        self.images: dict[int, object] = {}  # its pictures' embeddings by key (numpy), where its tokens hold them
        self.images_whole = False  # its pictures' tokens attend both ways: each is decoded whole
        self.positions: PositionTable | None = None  # where its pictures sit, when not a position a token (M-RoPE)

    def position(self, i: int) -> int:
        """Where its token `i` sits (positions.py): its index, but after a picture placed in 2D."""
        return i if self.positions is None else self.positions.of(i)

    def picture_positions(self, start: int, end: int) -> np.ndarray:
        """The positions of its tokens [start, end) of one picture, (sections, end - start): one a
        token, or M-RoPE's time, row, column and last."""
        if self.positions is None:
            return np.arange(start, end, dtype=np.int32)[None]
        return self.positions.rows(start, end)

    def chunk(self, limit: int, stretch: bool = False) -> int:
        """How many of its pending tokens the next step may read, at most `limit`: a chunk is a
        picture (or the rest of one) then text, or text alone, never text then a picture (a step
        decodes its pictures before its texts). A picture decoded whole is taken whole: beyond the
        limit with `stretch` (past a step's budget: it is a decode of its own), else not at all (the free cells)."""
        if not self.images:
            return limit
        tokens, start = self.tokens, self.num_computed
        j = start
        if j < len(tokens) and tokens[j] < 0:
            key, offset = image_key(tokens[j])
            picture_end = j - offset + len(self.images[key])
            if self.images_whole:
                if picture_end - j > limit:
                    return picture_end - j if stretch else 0
                j = picture_end
            elif picture_end - start >= limit:
                return limit
            else:
                j = picture_end
        end = min(start + limit, len(tokens))
        while j < end and tokens[j] >= 0:
            j += 1
        return j - start

    @property
    def at_whole_picture(self) -> bool:
        """Its next pending token begins a picture decoded whole (a decode of its own)."""
        return self.images_whole and self.num_computed < len(self.tokens) and self.tokens[self.num_computed] < 0

    @property
    def budget_spent(self) -> bool:
        """It is thinking, and has thought for as many tokens as its budget allows."""
        budget = self.request.reasoning_budget
        return (
            budget is not None
            and not self.thoughts_closed
            and self.thoughts.in_thought
            and self.stats.reasoning_tokens >= budget
            and bool(self.close_tokens)
        )

    @property
    def thinks_on_budget(self) -> bool:
        """Thinking with a budget: its tokens are taken one at a time (no draft runs past the budget)."""
        return self.request.reasoning_budget is not None and self.thoughts.in_thought

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.num_prompt_tokens

    @property
    def num_pending(self) -> int:
        """Tokens still to evaluate: the prompt's unread part, or the last sampled token."""
        return len(self.tokens) - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.status is SequenceStatus.RUNNING and self.num_pending == 1 and self.num_generated > 0

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id}, {self.status.name}, computed={self.num_computed}/"
            f"{len(self.tokens)}, slot={self.slot_id})"
        )
