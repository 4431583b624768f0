"""The engine: step() = plan -> batch -> decode -> draw -> finish; what a step decided is its StepPlan.

Built on the loader thread (the first model's on the engine thread); its intake runs on the prompt
thread; everything else on the engine thread."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable

from .events import Event, Fault, FinishEvent, FinishReason, TokenEvent, failed
from .figures import Figures
from .images import image_key
from .kv.history import TokenHistory
from .kv.host_cache import HostBudget, HostCache
from .kv.layout_move import LayoutMove
from .kv.manager import KVCacheManager
from .llama.batch import seq_runs
from .llama.context import LlamaBackend
from .params import EngineConfig
from .positions import Positions
from .probs import TokenProbs
from .prompt.builder import Prompt
from .prompt.intake import Intake
from .prompt.template_file import read_template_file
from .sampling.draw import draw_for
from .sampling.drawer import Drawer
from .sched.plan import StepPlan
from .sched.scheduler import Scheduler
from .sequence import Request, Sequence, SequenceStatus
from .spec.speculator import Speculator
from .stats import RequestStats
from .step_cost import StepCost
from .thoughts import Thoughts

Sink = Callable[[list[Event]], None]

EARLY_CANCELS_KEPT = 256
HISTORIES_KEPT = 256  # exact tokens of this many recent conversations (4 bytes a token)
CHECK_CELLS_ENV = "BATCH_PLAYGROUND_CHECK_CELLS"  # "1": after each decode, the KV manager's count against llama.cpp's


class Engine:
    def __init__(self, config: EngineConfig, sink: Sink, name: str | None = None, ram: HostBudget | None = None):
        if config.n_batch < config.capacity:
            raise ValueError("the batch size must hold at least one token per sequence")
        self.config = config
        self.name = name  # the model's name, told in every final event
        self._sink = sink
        # a template file instead of the model's own: checked before the model loads
        template = read_template_file(config.chat_template_file) if config.chat_template_file else None
        self.backend = LlamaBackend(config)
        if template is not None:
            self.backend.chat_template = template
            self.backend.info = dataclasses.replace(self.backend.info, has_chat_template=True)
        self.n_ctx_seq = self.backend.seq_room  # what one sequence may hold: the pool, or its stream of it
        # `ram`: the budget every model's RAM tier shares (None: one of its own). Another model's saves
        # may push this one's entries out: its figures are published then, weakly, so that the
        # cache never keeps an unloaded engine (and its saved cells) alive
        emit = weakref.WeakMethod(self._emit)
        host = HostCache(config.cache_ram_mib << 20, ram, lambda: emit()([])) if config.cache_ram_mib > 0 else None
        self.positions = Positions()  # where pictures placed in 2D sit (M-RoPE); learnt from the prompts
        self.kv = KVCacheManager(
            self.backend, config.capacity, self.backend.n_ctx, config.kv_reuse, host, self.backend.streams, self.positions
        )
        self.kv.check_cells = os.environ.get(CHECK_CELLS_ENV) == "1"
        self.scheduler = Scheduler(self.kv, config.n_batch, config.capacity, config.policy, n_ubatch=config.n_ubatch)
        self.scheduler.follow(config, adapt_afresh=True)
        self.history = TokenHistory(HISTORIES_KEPT)
        self.intake = Intake(self.backend, self.n_ctx_seq, config.overflow, self.history if config.kv_reuse else None, name)
        self._arrivals = 0
        self._early_cancels: OrderedDict[str, bool] = OrderedDict()
        self._preserved_tokens: dict[tuple[str, ...], frozenset[int]] = {}  # by the texts asked for
        step_cost = StepCost()
        self.speculator = Speculator(config, self.backend, self.kv, step_cost)
        self.drawer = Drawer(self.backend)
        self.layout_move = LayoutMove(self.backend, self.kv)
        self.figures = Figures(self.backend, self.kv, self.scheduler, self.speculator, self.layout_move, step_cost)

    @property
    def info(self):
        return self.backend.info

    def configure(self, **changes) -> None:
        """Change serving settings (mode, static_window_ms, policy, itl_target_ms) at once; the next
        step follows them, and readers see paused streams before it."""
        self.config = self.config.with_(**changes)
        self.scheduler.follow(self.config, adapt_afresh="itl_target_ms" in changes)
        self.figures.publish()

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def ready_in(self) -> float:
        """Seconds before a step can do anything: 0, but while a static batch is being gathered."""
        return self.scheduler.ready_in()

    # -- requests in and out ---------------------------------------------------------------

    def submit(self, request: Request, t_submit: float, prompt: Prompt | None = None) -> None:
        """Queue a request (its prompt built here unless given); one it cannot take ends at once with an ERROR finish."""
        stats = RequestStats(request.request_id, request.conversation_id, t_submit=t_submit)
        if self._early_cancels.pop(request.request_id, False):
            self._emit([FinishEvent(request.request_id, FinishReason.CANCELLED, "", stats, model=self.name)])
            return
        if self.backend.lost is not None:  # no context to run it in
            self._emit([failed(request.request_id, stats, self._lost_error(), Fault.UNAVAILABLE, self.name)])
            return
        prompt = prompt or self.intake.prepare(request)
        if prompt.error is not None or not prompt.tokens:  # no token may reach a batch without a prompt
            error = prompt.error or "the prompt is empty: there is nothing to reply to"
            self._emit([failed(request.request_id, stats, error, prompt.fault, self.name)])
            return
        stats.prompt_tokens = len(prompt.tokens)
        self._arrivals += 1
        seq = Sequence(request, prompt.tokens, stats, self._arrivals, prompt.stop)
        seq.notice = prompt.notice
        seq.grammar = prompt.grammar
        text = prompt.tokens
        if prompt.images:
            seq.images = prompt.images
            seq.images_whole = self.backend.vision.non_causal
            self.positions.learn(prompt.layouts)
            seq.positions = self.positions.table(prompt.tokens, prompt.layouts)
            text = [t for t in prompt.tokens if t >= 0]  # what the penalties look back at: the texts
            stats.image_tokens = len(prompt.tokens) - len(text)
            stats.images = len(prompt.images)
            stats.encode_s = prompt.encode_s
        seed = request.params.seed if request.params.seed is not None else random.getrandbits(32)
        seq.sampler = self.backend.samplers.new(request.params, seed, text, prompt.logit_bias)
        seq.draw = draw_for(request.params, self.config.backend_sampling)
        seq.thoughts = Thoughts(prompt.thinking, prompt.opened, request.separate_thoughts, prompt.closed)
        seq.thoughts.prime(prompt.prefill)  # a prefill's thoughts or answer: the reply goes on from them
        seq.marker_tokens = prompt.marker_tokens | self._preserved(request.params.preserved)
        seq.close_tokens = prompt.close_tokens
        self.scheduler.add(seq)

    def cancel(self, request_id: str) -> None:
        seq = self.scheduler.find(request_id)
        if seq is None:
            # a Stop pressed before the request got here: remember it (a few, not forever)
            self._early_cancels[request_id] = True
            while len(self._early_cancels) > EARLY_CANCELS_KEPT:
                self._early_cancels.popitem(last=False)
            return
        events: list[Event] = []
        self._finish(seq, FinishReason.CANCELLED, events)
        self._emit(events)

    def shutdown(self, notice: str) -> None:
        """End every request with `notice`, then free the model."""
        self.cut_all(notice)
        self.intake.prompts.close()
        self.backend.close()

    def cut_all(self, notice: str) -> None:
        """End every request with `notice` (the model stays loaded)."""
        self._end_all(FinishReason.CANCELLED, notice=notice)

    def fail_all(self, error: str, fault: Fault = Fault.INTERNAL) -> None:
        self._end_all(FinishReason.ERROR, error=error, fault=fault)
        self.kv.clear()
        self.figures.rebuild_cell_map()  # the cleared pool, not the slots before

    def _end_all(self, reason: FinishReason, notice: str | None = None, error: str | None = None, fault: Fault | None = None):
        events: list[Event] = []
        for seq in (*self.scheduler.running, *self.scheduler.waiting):
            seq.notice = notice or seq.notice
            self._finish(seq, reason, events, error=error, fault=fault)
        self._emit(events)

    # -- one step --------------------------------------------------------------------------

    def step(self) -> bool:
        """Run one decode step; False when there was nothing to do."""
        t0 = time.perf_counter()
        self._fit_layout()
        plan = self.scheduler.schedule()
        if not plan:
            return False
        plan = self._fill_batch(self.speculator.draft(plan))
        parts = self.figures.parts(plan)
        ubatches = self._ubatches()
        t1 = time.perf_counter()
        rc, image_s = self._decode()
        t2 = time.perf_counter()
        events: list[Event] = []
        try:
            if rc == 0:
                self._finish_step(plan, events)
            else:
                self._on_decode_failure(rc, plan, events)
            self.figures.record_step(parts, plan.budget, ubatches, t0, t1, t2, image_s)
        finally:  # a fault after a request's final event was made must not lose it: its client would wait for ever
            self._emit(events)
        if not self.scheduler.has_work():  # going idle: a change of layout the chats now allow keeps no one waiting
            self._fit_layout()
            self.figures.snapshot = self.figures.take_snapshot()
        return True

    def _ubatches(self) -> int:
        """The passes llama.cpp will cut this step's decodes into, in this layout (pictures' rows are a decode of their own)."""
        batches = (self.backend.image_batch, self.backend.batch)
        return sum(self.kv.layout.ubatches(seq_runs(b.seq_id, b.n_tokens)) for b in batches if b is not None and b.n_tokens)

    def _decode(self) -> tuple[int, float]:
        """The step's pictures, then its tokens (whose logits the draw reads: a decode keeps only its
        own); llama.cpp's return code, and the seconds the pictures took."""
        images = self.backend.image_batch
        image_s = 0.0
        if images is not None and images.n_tokens:
            t = time.perf_counter()
            rc = self.backend.decode_images()
            image_s = time.perf_counter() - t
            if rc != 0 or not self.backend.batch.n_tokens:
                return rc, image_s
        return self.backend.decode(), image_s

    def _fill_batch(self, plan: StepPlan) -> StepPlan:
        """The plan's tokens into the batch, its pictures' rows into the image batch; the plan with
        the rows whose logits each sequence reads."""
        batch = self.backend.batch
        batch.clear()
        if self.backend.image_batch is not None:
            self.backend.image_batch.clear()
        rows: dict[Sequence, int] = {}
        # by slot: with a stream per sequence llama.cpp cuts the batch into a ubatch per run of
        # consecutive sequence ids, in batch order (split_equal); one pool does not mind the order
        for seq, n in sorted(plan.n_tokens.items(), key=lambda p: p[0].slot_id):
            start = seq.num_computed
            draft = plan.drafts.get(seq)
            if draft:  # its next token and the guesses after it, each with its logits
                rows[seq] = batch.add_all(seq.slot_id, [seq.tokens[start], *draft], seq.position(start))
                continue
            wants_logits = start + n == len(seq.tokens)
            if seq.images:
                start, n = self._add_pictures(seq, start, n)
            row = batch.add(seq.slot_id, seq.tokens[start : start + n], seq.position(start), wants_logits) if n else -1
            if row >= 0:
                rows[seq] = row
            if wants_logits and self.config.backend_sampling:  # else nothing is ever attached
                self.drawer.place(seq)
        return plan.with_rows({seq: rows[seq] for seq in plan.seqs if seq in rows})

    def _add_pictures(self, seq: Sequence, start: int, n: int) -> tuple[int, int]:
        """The picture the chunk begins with (sched: a chunk is a picture then text, or text) into
        the image batch; the text's start and length that are left."""
        end, tokens = start + n, seq.tokens
        if tokens[start] >= 0:
            return start, n
        key, offset = image_key(tokens[start])
        embd = seq.images[key]
        stop = min(end, start - offset + len(embd))
        self.backend.image_batch.add(seq.slot_id, embd[offset : offset + stop - start], seq.picture_positions(start, stop))
        return stop, end - stop

    def _finish_step(self, plan: StepPlan, events: list[Event]) -> None:
        """After a decode: count the cells written, draw every next token, verify the drafts."""
        for seq, n in plan.n_tokens.items():
            if seq not in plan.drafts:
                self.kv.commit(seq, n)
        drawing = {seq: row for seq, row in plan.rows.items() if seq not in plan.drafts}
        for drawn in self.drawer.draw_all(drawing):
            if drawn.error is not None:
                self._finish(drawn.seq, FinishReason.ERROR, events, error=drawn.error, fault=Fault.REQUEST)
            else:
                self._take(drawn.seq, drawn.token, drawn.probs, events)
        for seq, draft in plan.drafts.items():
            for token in self.speculator.verify(seq, draft, plan.rows[seq], self.drawer):
                error = self.drawer.refusal(seq, token)
                if error is not None:
                    self._finish(seq, FinishReason.ERROR, events, error=error, fault=Fault.REQUEST)
                    break
                self._take(seq, token, None, events)
                if seq.status is SequenceStatus.FINISHED:
                    break
        for seq in (*drawing, *plan.drafts):  # after all of a step's tokens: a draft's are taken whole
            if seq.status is SequenceStatus.RUNNING and seq.budget_spent and self._may_close(seq):
                self._close_thoughts(seq, time.monotonic(), events)

    def _may_close(self, seq: Sequence) -> bool:
        """Whether its thoughts' closing marker may go in: no grammar holds the reply, or the one
        that does takes the marker next (gpt-oss's tool calls after an analysis message)."""
        grammar = seq.grammar
        return grammar is None or not grammar.holds or self.backend.constraints.takes(grammar, seq.close_tokens)

    def _fit_layout(self) -> None:
        """Move the KV layout when the chats at hand want the other one (kv/layout_move.py); a move
        that failed leaves the chats that cannot stay in the kept layout to end."""
        failed = self.layout_move.fit((*self.scheduler.running, *self.scheduler.waiting))
        if failed is None:
            return
        if self.backend.lost is not None:
            self.fail_all(self._lost_error(), Fault.UNAVAILABLE)
            return
        self.n_ctx_seq = self.intake.prompts.n_ctx_seq = self.backend.seq_room  # a kept layout caps a chat at its stream
        if failed.unified:
            self._end_outgrown(self.backend.stream_cells, failed.why)

    def _end_outgrown(self, stream_cells: int, why: str) -> None:
        """The chats that needed one pool end, with why: a stream cannot hold them."""
        events: list[Event] = []
        for seq in [s for s in (*self.scheduler.running, *self.scheduler.waiting) if len(s.tokens) > stream_cells]:
            if seq.is_decoding:  # a reply that reached the end of its stream
                seq.notice = f"the context of {stream_cells} tokens is full (the KV layout could not change: {why})"
                self._finish(seq, FinishReason.CONTEXT, events)
            else:
                error = f"a stream holds {stream_cells} tokens, this chat needs {len(seq.tokens)}: {why}"
                self._finish(seq, FinishReason.ERROR, events, error=error, fault=Fault.UNAVAILABLE)
        self._emit(events)

    def _lost_error(self) -> str:
        return f"the model has no KV memory now ({self.backend.lost}): load it again"

    def _take(self, seq: Sequence, token: int, probs: TokenProbs | None, events: list[Event]) -> None:
        now = time.monotonic()
        seq.tokens.append(token)
        seq.stats.on_token(now)
        self.figures.generated += 1
        if self.backend.vocab.is_eog(token):  # never drawn with ignore_eos: its sampler bans them
            events.append(TokenEvent(seq.request_id, "", 1, now, token))  # not part of the reply
            self._finish(seq, FinishReason.STOP, events)
            return
        first = seq.num_generated == 1  # the first token tells the prompt's cache figures
        cached, evaluated = (seq.stats.cached_tokens, seq.stats.evaluated_tokens) if first else (-1, -1)
        answer, reasoning, thinking = self._split(seq, self._piece(seq, token), 1, now)
        event = TokenEvent(seq.request_id, answer, 1, now, token, cached, evaluated, probs, reasoning=reasoning, thought=thinking)
        events.append(event)
        self._ended(seq, events)

    def _preserved(self, texts: tuple[str, ...]) -> frozenset[int]:
        """The tokens of `texts` that are one token each (a control token among them is written out)."""
        if not texts:
            return frozenset()
        found = self._preserved_tokens.get(texts)
        if found is None:
            tokens = (self.backend.vocab.tokenize(text, add_special=False) for text in texts)
            found = self._preserved_tokens[texts] = frozenset(t[0] for t in tokens if len(t) == 1)
        return found

    def _piece(self, seq: Sequence, token: int) -> bytes:
        """A token's bytes; a control token that spells a thinking marker (gpt-oss's <|channel|>) or a
        tool syntax's (SamplingParams.preserved) written out."""
        piece = self.backend.vocab.piece(token)
        return self.backend.vocab.spell(token) if not piece and token in seq.marker_tokens else piece

    def _split(self, seq: Sequence, data: bytes, n: int, now: float) -> tuple[str, str, bool]:
        """A token's bytes as (answer, thought) text, and whether they were thoughts (counted so)."""
        was = seq.thoughts.in_thought
        thought, answer = seq.thoughts.feed(seq.stream.feed(data))
        thinking = was or seq.thoughts.in_thought
        if thinking:
            seq.stats.reasoning_tokens += n
        elif answer and seq.stats.reasoning_tokens and math.isnan(seq.stats.t_first_answer):
            seq.stats.t_first_answer = now
        return answer, thought, thinking

    def _close_thoughts(self, seq: Sequence, now: float, events: list[Event]) -> None:
        """The reasoning budget ran out: the family's closing marker goes into the reply, as tokens the
        next step reads as it reads a prompt's, and the answer follows (llama.cpp forces the same
        tokens, one draw at a time)."""
        seq.thoughts_closed = True
        for token in seq.close_tokens:
            seq.tokens.append(token)
            if seq.sampler is not None:
                self.backend.samplers.accept(seq.sampler, token)
            self.drawer.refusal(seq, token)  # a lazy grammar reads the marker's text as the reply's
        n = len(seq.close_tokens)
        seq.stats.on_inserted(n, now)
        self.figures.generated += n
        data = b"".join(self._piece(seq, token) for token in seq.close_tokens)
        answer, thought, _ = self._split(seq, data, 0, now)
        seq.stats.reasoning_tokens += n
        events.append(TokenEvent(seq.request_id, answer, n, now, reasoning=thought, thought=True))
        self._ended(seq, events)

    def _ended(self, seq: Sequence, events: list[Event]) -> bool:
        """End the reply where a stop string, its max tokens or the context say so."""
        if seq.stream.stopped:
            self._finish(seq, FinishReason.STOP, events)
        elif seq.num_generated >= seq.params.max_tokens:
            self._finish(seq, FinishReason.LENGTH, events)
        elif len(seq.tokens) >= self.n_ctx_seq:
            seq.notice = f"the context of {self.n_ctx_seq} tokens is full"
            self._finish(seq, FinishReason.CONTEXT, events)
        else:
            return False
        return True

    def _on_decode_failure(self, rc: int, plan: StepPlan, events: list[Event]) -> None:
        # llama.cpp rolled the batch back; with more room the next step tries again. The pictures'
        # decode before it may have gone through: their cells go, to be written again
        for seq in plan.seqs:
            if seq.images and seq.slot_id is not None:
                self.kv.drop_uncounted(seq)
        if rc == 1 and self.scheduler.relieve_pressure():
            return
        reason = "the KV cache is full" if rc == 1 else f"llama_decode failed with code {rc}"
        fault = Fault.UNAVAILABLE if rc == 1 else Fault.INTERNAL  # a full cache frees up; a failed decode is a fault
        for seq in plan.seqs:
            self._finish(seq, FinishReason.ERROR, events, error=reason, fault=fault)

    def _finish(
        self, seq: Sequence, reason: FinishReason, events: list[Event], error: str | None = None, fault: Fault | None = None
    ):
        if reason is not FinishReason.ERROR:
            thought, answer = seq.thoughts.feed(seq.stream.finish())
            last_thought, last_answer = seq.thoughts.finish()
            thought, answer = thought + last_thought, answer + last_answer
            if thought or answer:
                events.append(TokenEvent(seq.request_id, answer, 0, time.monotonic(), reasoning=thought))
        self.scheduler.finish(seq)
        if seq.sampler is not None:
            self.backend.samplers.free(seq.sampler)
            seq.sampler = None
        seq.grammar = None
        seq.stats.t_finish = time.monotonic()
        self.figures.conversations.add(seq.stats)
        if seq.request.conversation_id is not None:
            self.history.remember(seq.request.conversation_id, seq.tokens)
        fault = fault if reason is FinishReason.ERROR else None
        reply = seq.thoughts
        events.append(
            FinishEvent(seq.request_id, reason, reply.answer, seq.stats, error, seq.notice, self.name, fault, reply.reasoning)
        )

    def _emit(self, events: list[Event]) -> None:
        """Publish the figures (once a step) and hand the events to the client."""
        self.figures.publish()
        if events:
            self._sink(events)
