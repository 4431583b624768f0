"""One pane's chat and the life of its replies, without Qt.

A reply: the request built from the chat and the pane's settings, the text as it streams (kept
here until the window takes it, so eight panes are painted in one pass), a save every two seconds
(a kill loses only the last ones), and how its final event becomes messages and notices.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import aclosing
from dataclasses import dataclass

from app.client import new_request_id
from app.engine.errors import EngineError
from app.engine.events import FinishEvent, FinishReason, TokenEvent, refused
from app.engine.images import Image
from app.engine.probs import TokenChoice, TokenProbs
from app.engine.sampling.constraints import ConstraintError
from app.engine.sampling.params import SamplingParams
from app.engine.sequence import Request

from .chat_store import NOTICE, Chat, Thought
from .evented import Signal
from .metrics import MetricsStore
from .pane_params import PaneParams
from .source import ReplySource, Sources

CHECKPOINT_S = 2.0  # a streaming reply is saved this often: a kill or a power cut loses at most this much
LENGTH_NOTE = "cut at Max tokens"  # the notice after a reply that max tokens cut begins so


@dataclass(frozen=True)
class Branch:
    """A reply's first tokens, the last one a rival of the token drawn there, and the turns before it;
    or (no tokens) the text a reply starts with, as given ("Start the reply with…"): sent as a last
    assistant message, which the model continues."""

    tokens: tuple[int, ...]
    text: str
    probs: tuple[TokenProbs, ...]  # how likely each of them was
    messages: tuple[dict[str, str], ...] = ()

    @property
    def is_given(self) -> bool:
        """A start given as text (no tokens drawn, no probabilities)."""
        return bool(self.text) and not self.tokens

    @classmethod
    def at(cls, probs: list[TokenProbs], index: int, rival: TokenChoice, messages) -> Branch:
        taken = (*probs[:index], TokenProbs(rival, probs[index].top))
        text = b"".join(p.chosen.piece for p in taken).decode("utf-8", "replace")
        return cls(tuple(p.chosen.token for p in taken), text, taken, tuple(dict(m) for m in messages))


NO_PREFIX = Branch((), "", ())


class ThinkingClock:
    """A reply's thinking as it streams: when its first thought came, when its answer began after
    them, and its thought tokens (the engine's `TokenEvent.thought`)."""

    def __init__(self):
        self.t_first_thought = math.nan
        self.t_answer = math.nan
        self.tokens = 0

    def on_token(self, event: TokenEvent) -> None:
        if event.thought:
            self.tokens += event.n_tokens
            if math.isnan(self.t_first_thought):
                self.t_first_thought = event.t
        elif event.text and self.tokens and math.isnan(self.t_answer):
            self.t_answer = event.t

    @property
    def is_thinking(self) -> bool:
        return self.tokens > 0 and math.isnan(self.t_answer)

    @property
    def seconds(self) -> float:
        """From the first thought to the answer's first text (to now while it still thinks)."""
        if math.isnan(self.t_first_thought):
            return math.nan
        end = self.t_answer if not math.isnan(self.t_answer) else time.monotonic()
        return end - self.t_first_thought

    def thought(self, text: str, tokens: int | None = None) -> Thought:
        return Thought(text, self.seconds if text else math.nan, self.tokens if tokens is None else tokens)


class PaneSession:
    """A pane's chat, settings and draft, and its reply: at most one at a time."""

    def __init__(self, chat: Chat, params: PaneParams, colour: str, sources: Sources, metrics: MetricsStore):
        self.chat, self.colour, self.sources, self.metrics = chat, colour, sources, metrics
        self._params = params
        self.draft = ""  # typed in the pane and not sent
        self.attached: list[Image] = []  # pictures attached and not sent: they go with the next message
        self.reply_start = ""  # what each reply starts with, given (a prefill the model continues); "": none
        self.sampling_override: SamplingParams | None = None  # exact params instead of the sliders (benchmarks)
        self.measure_logprobs = False  # the replies' log-probabilities are wanted (a fan-out compares them)
        self.reply_probs: list[TokenProbs] = []  # the running or last reply's tokens, how likely each was
        self.turn_probs: dict[int, tuple[str, list[TokenProbs]]] = {}  # replies drawn token by token, by message index
        self._task: asyncio.Task | None = None  # the running reply
        self._tasks: set[asyncio.Task] = set()  # every task started here, held until done: the loop holds them weakly
        self._request_id: str | None = None
        self._source: ReplySource = sources.local  # where the running reply comes from
        self._received: list[str] = []  # the reply so far
        self._taken = 0  # how many of those the window has taken
        self._thought: list[str] = []  # its thoughts so far (a thinking model's), and how many the window has taken
        self._thought_taken = 0
        self.thinking = ThinkingClock()  # how long the running reply thought, and for how many tokens
        self._prefix = NO_PREFIX  # what the running reply goes on from (a branch)
        self._reply_is_json = False  # the running reply was asked for as JSON: kept as a mark on it
        self._owes_end = False
        self.chat_changed = Signal()  # Chat: save it
        self.params_changed = Signal()  # PaneParams
        self.text_received = Signal()  # streamed text waits in take_text(): show it soon
        self.reply_started = Signal()  # a reply begins after the chat's messages as they are now
        self.reply_ended = Signal()  # FinishEvent, or None when the task was cancelled; the chat holds the outcome
        self.draft_restored = Signal()  # str: a refused turn's text, back in the message field
        self.send_refused = Signal()  # str: why nothing was sent (an output format that cannot constrain a reply)
        self.attachments_changed = Signal()  # list[Image]: the pictures the next message will show
        metrics.add_pane(chat.chat_id)

    # -- state ---------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.chat.chat_id

    @property
    def params(self) -> PaneParams:
        return self._params

    def set_params(self, params: PaneParams) -> None:
        if params != self._params:
            self._params = params
            self.params_changed.emit(params)

    @property
    def model(self) -> str | None:
        """The loaded model this pane talks to (None: the default)."""
        return self._params.model or None

    @property
    def is_blank(self) -> bool:
        """No messages and nothing typed: closing the pane or giving it another chat loses nothing."""
        return not self.chat.messages and not self.draft.strip() and not self.attached

    @property
    def is_busy(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def streamed(self) -> str:
        """The running reply's text so far (its answer, where the model thinks)."""
        return "".join(self._received)

    @property
    def streamed_thoughts(self) -> str:
        """The running reply's thoughts so far."""
        return "".join(self._thought)

    @property
    def reply_logprobs(self) -> list[float]:
        """The log-probability of each token of the running or last reply, when they were asked for."""
        return [p.chosen.logprob for p in self.reply_probs]

    # -- actions -------------------------------------------------------------------------------

    def attach(self, image: Image) -> None:
        """A picture for the next message (one already attached is not added twice)."""
        if image not in self.attached:
            self.attached.append(image)
            self.attachments_changed.emit(list(self.attached))

    def detach(self, index: int) -> None:
        if 0 <= index < len(self.attached):
            del self.attached[index]
            self.attachments_changed.emit(list(self.attached))

    def send(self, text: str) -> bool:
        """Add a user turn (its text and the pictures attached) and start the reply; False while a
        reply is still running or when there is nothing to send. In completion mode the text is
        added as typed (pictures are not: the model continues a text), and nothing typed lets the
        model go on with the text."""
        if self.is_busy or self._format_refused():
            return False
        if self._params.completion and (text or self.chat.messages):
            if self.attached:
                self.send_refused.emit("Not sent: completion mode continues a text; pictures need a chat (turn ✎ off)")
                return False
            if text:
                self.chat.add("user", text)
        elif text.strip() or self.attached:
            self.chat.add("user", text.strip(), images=self.attached)
            self.attached = []
            self.attachments_changed.emit([])
        else:
            return False
        self._start_reply(self._given_start())
        return True

    def stop(self) -> None:
        if self.is_busy and self._request_id:
            self._source.cancel(self._request_id)

    def regenerate(self) -> bool:
        if self.is_busy or self._format_refused() or self.chat.drop_last_reply() is None:
            return False
        self._start_reply(self._given_start())
        return True

    def _given_start(self) -> Branch | None:
        return Branch((), self.reply_start, ()) if self.reply_start else None

    def go_on_from(self, branch: Branch) -> None:
        """Start a reply from `branch`'s tokens (the chat holds the turns before it)."""
        if not self._format_refused():
            self._start_reply(branch)

    def _format_refused(self) -> bool:
        """The pane's output format cannot constrain a reply (an invalid schema or grammar): say why, send nothing."""
        problem = None if self.sampling_override is not None else self._params.format_problem()
        if problem is not None:
            self.send_refused.emit(f"Not sent: {problem}")
        return problem is not None

    def rename(self, name: str) -> None:
        self.chat.rename(name)
        self.chat_changed.emit(self.chat)

    async def clear(self) -> None:
        await self.shutdown()  # a running reply ends first, so it cannot land in the cleared chat
        self.chat.clear()
        self.turn_probs.clear()
        self.metrics.panes[self.key].context_tokens = 0
        self.chat_changed.emit(self.chat)

    async def shutdown(self) -> None:
        """Cancel the running reply and wait until its source has let it go."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._owes_end:  # cancelled before it started: it ends here, as stopped
            self._end_reply(None)

    def spawn(self, coro) -> asyncio.Task:
        """Run `coro` on the event loop, held until it is done."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def take_text(self) -> str:
        """The text streamed since the last call."""
        text = "".join(self._received[self._taken :])
        self._taken = len(self._received)
        return text

    def take_thoughts(self) -> str:
        """The thoughts streamed since the last call (take them before the text: they came first)."""
        text = "".join(self._thought[self._thought_taken :])
        self._thought_taken = len(self._thought)
        return text

    # -- one reply -----------------------------------------------------------------------------

    def _start_reply(self, prefix: Branch | None = None) -> None:
        self._source = self.sources.for_endpoint(self._params.endpoint())
        self.chat.model = self._source.model_label(self.model)
        self.chat_changed.emit(self.chat)
        request_id = self._request_id = new_request_id()
        self.metrics.track(request_id, self.key, time.monotonic())  # now, so the readout resets at once
        self._prefix = prefix or NO_PREFIX
        self._reply_is_json = self._params.json_replies and not self._params.completion
        self._owes_end = True  # until _end_reply: a task cancelled before it ran still ends its reply
        self.reply_started.emit()
        self._task = self.spawn(self._reply(request_id))

    def _request(self, request_id: str) -> Request:
        p = self._params
        start = self._prefix.text if self._prefix.is_given else ""  # the model continues it
        completion = {"prompt": self.chat.as_text(p.system_prompt) + start} if p.completion else {}  # no chat template
        messages = None if p.completion else tuple(self.chat.for_model(p.system_prompt))
        if messages is not None and start:
            messages += ({"role": "assistant", "content": start},)
        return Request(
            request_id,
            self._sampling(),
            messages=messages,
            conversation_id=self.key,
            priority=p.priority,
            reply_prefix=self._prefix.tokens,
            model=self.model,
            builtin_template=p.builtin_template,
            **(p.thinking() if not p.completion else {}),
            **completion,
        )

    def _sampling(self) -> SamplingParams:
        params = self.sampling_override or self._params.sampling()
        if self.measure_logprobs and params.n_probs is None:
            params = params.with_(n_probs=0)  # the drawn token's probability only
        return params

    async def _reply(self, request_id: str) -> None:
        final: FinishEvent | None = None
        checkpoints = self.spawn(self._checkpoints())
        self.reply_probs = list(self._prefix.probs)
        self.thinking = ThinkingClock()
        if self._prefix.text:
            self._receive(self._prefix.text)
        try:
            stream = self._source.reply(self._request(request_id))
            async with aclosing(stream):  # leaving early closes the stream, which cancels the request
                async for event in stream:
                    if isinstance(event, TokenEvent):
                        if event.probs is not None:
                            self.reply_probs.append(event.probs)
                        self.thinking.on_token(event)
                        if event.reasoning:
                            self._receive(event.reasoning, self._thought)
                        self._receive(event.text)
                    else:
                        final = event
        except EngineError as e:  # the engine is not running: the window's banner offers a restart
            final = refused(request_id, str(e))
        except ConstraintError as e:  # the output format was spoilt between the send and its start
            final = refused(request_id, f"the output format: {e}")
        finally:
            checkpoints.cancel()
            self._end_reply(final)

    def _receive(self, text: str, into: list[str] | None = None) -> None:
        """Streamed text (into the answer, or the thoughts), kept until the window takes it."""
        if self._taken == len(self._received) and self._thought_taken == len(self._thought):  # the first since the last take
            self.text_received.emit()
        (self._received if into is None else into).append(text)

    async def _checkpoints(self) -> None:
        """Save the reply so far with the chat (marked as streaming in its file), every CHECKPOINT_S."""
        while True:
            await asyncio.sleep(CHECKPOINT_S)
            if self.streamed != (self.chat.streaming or "") or self.streamed_thoughts != self.chat.streaming_thoughts:
                self.chat.streaming, self.chat.streaming_thoughts = self.streamed, self.streamed_thoughts
                self.chat_changed.emit(self.chat)

    def _end_reply(self, final: FinishEvent | None) -> None:
        self._owes_end = False
        self.chat.streaming, self.chat.streaming_thoughts = None, ""
        streamed, thought = self.streamed, self.thinking.thought(self.streamed_thoughts)
        self._received, self._taken, self._thought, self._thought_taken = [], 0, [], 0
        if final is not None and final.reason is FinishReason.ERROR:
            error = final.error or "the engine could not answer"
            if streamed.strip() or thought.text:  # what was streamed stays, marked as cut
                self.chat.add_cut_reply(streamed, f"cut short: {error}", thought)
            else:
                self._drop_failed_turn(error)
        else:
            text = self._prefix.text + final.text if final is not None else streamed
            if final is not None:
                thought = self.thinking.thought(final.reasoning, final.stats.reasoning_tokens)
            if text.strip() or thought.text:
                self.chat.add("assistant", text, json=self._reply_is_json, thoughts=thought)
                if self.reply_probs and not self._prefix.is_given:  # drawn token by token when the pane shows probabilities
                    self.turn_probs[len(self.chat.messages) - 1] = (text, self.reply_probs)
            note = final.notice if final is not None else None
            if final is None or (final.reason is FinishReason.CANCELLED and not note):
                note = "stopped"
            elif (
                final.reason is FinishReason.LENGTH
                and not note
                and not self._params.completion
                and self.sampling_override is None
            ):
                # completion goes on; a reply of a set length (Show batching's) was meant to stop there
                note = f"{LENGTH_NOTE} ({self._params.max_tokens}): raise it in ⚙ for longer replies"
            if note:
                self.chat.add(NOTICE, note)
        self.chat_changed.emit(self.chat)
        self.reply_ended.emit(final)

    def _drop_failed_turn(self, error: str) -> None:
        """Take back the user turn that was refused, so the next message is not refused too; its
        text goes back to the message field unless something else was typed there."""
        images = self.chat.last_user_images()
        text = self.chat.drop_last_reply()
        if text is not None:
            self.chat.messages.pop()
            if not self.draft:
                self.draft = text
                self.draft_restored.emit(text)
            if images and not self.attached:  # its pictures wait with it
                self.attached = list(images)
                self.attachments_changed.emit(list(self.attached))
        self.chat.add(NOTICE, f"not answered: {error}")
