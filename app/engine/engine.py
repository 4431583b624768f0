"""The engine: step() = schedule -> decode one batch -> sample and stream.

Built on the loader thread (the first model's on the engine thread); `prepare` runs on the prompt
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

from .adaptive import AdaptiveBatch
from .cell_map import CellMap, build_cell_map
from .chat_template import ChatTemplate
from .events import Event, Fault, FinishEvent, FinishReason, TokenEvent
from .history import TokenHistory
from .host_cache import HostBudget, HostCache
from .kv_cache import KVCacheManager
from .llama.context import LlamaBackend
from .params import EngineConfig, Policy, ServingMode, SpecType
from .pool import next_layout
from .probs import TokenProbs
from .prompt import Prompt, PromptBuilder
from .scheduler import Plan, Scheduler
from .sequence import Draw, Request, Sequence, SequenceStatus
from .speculation import Drafter, NgramDrafter, StepCost, could_pay
from .stats import ConversationTotals, EngineSnapshot, RequestStats, StepHistory, StepPart, StepStats

Sink = Callable[[list[Event]], None]

STEP_HISTORY = 4096  # recent steps kept for plots and benchmarks
EARLY_CANCELS_KEPT = 256
CONVERSATIONS_KEPT = 4096  # running totals of this many recent conversations (a pane's hit rate)
HISTORIES_KEPT = 256  # exact tokens of this many recent conversations (4 bytes a token)
CELL_MAP_EVERY_S = 0.1  # the KV cell map is rebuilt at most this often while busy, and whenever the engine idles
CHECK_CELLS_ENV = "BATCH_PLAYGROUND_CHECK_CELLS"  # "1": after each decode, the KV manager's count against llama.cpp's


def _greedy(seq: Sequence) -> bool:
    """A greedy reply: its tokens are the top ones (after the chain's penalties, if any; under a
    grammar, of its masked logits), so guesses of them can be checked exactly (speculative decoding
    drafts for these only). A lazy grammar still waiting for its trigger does not draft: a trigger
    among the guesses would leave the rows after it unmasked."""
    if seq.grammar is not None:
        return _greedy_in_grammar(seq) and seq.grammar.holds
    return seq.draw is Draw.ARGMAX or (seq.draw is Draw.CHAIN and seq.params.temperature <= 0)


def _greedy_in_grammar(seq: Sequence) -> bool:
    """A greedy reply under a grammar, with nothing else to move the likeliest token: its token is the
    top one of its masked logits, read with the others' in one pass."""
    params = seq.params
    return seq.grammar is not None and seq.draw is Draw.CHAIN and params.temperature <= 0 and not params.greedy_needs_chain


class Engine:
    def __init__(self, config: EngineConfig, sink: Sink, name: str | None = None, ram: HostBudget | None = None):
        if config.n_batch < config.capacity:
            raise ValueError("the batch size must hold at least one token per sequence")
        self.config = config
        self.name = name  # the model's name, told in every final event
        self._sink = sink
        self.backend = LlamaBackend(config)
        self.n_ctx_seq = self.backend.seq_room  # what one sequence may hold: the pool, or its stream of it
        # `ram`: the budget every model's RAM tier shares (None: one of its own). Another model's saves
        # may push this one's entries out: its figures are published then, weakly, so that the
        # cache never keeps an unloaded engine (and its saved cells) alive
        emit = weakref.WeakMethod(self._emit)
        host = HostCache(config.cache_ram_mib << 20, ram, lambda: emit()([])) if config.cache_ram_mib > 0 else None
        self.kv = KVCacheManager(self.backend, config.capacity, self.backend.n_ctx, config.kv_reuse, host, self.backend.streams)
        self.kv.check_cells = os.environ.get(CHECK_CELLS_ENV) == "1"
        max_running = 1 if config.mode is ServingMode.SEQUENTIAL else config.capacity
        self.scheduler = Scheduler(self.kv, config.n_batch, max_running, config.policy, config.static_window_ms / 1000)
        self.scheduler.set_static(config.mode is ServingMode.STATIC)
        self.set_itl_target(config.itl_target_ms)
        vocab = self.backend.vocab
        template = ChatTemplate(self.backend.chat_template, vocab.bos_text, vocab.eos_text, name or "the model")
        self.history = TokenHistory(HISTORIES_KEPT)
        self.prompts = PromptBuilder(
            template,
            vocab.tokenize,
            self.n_ctx_seq,
            config.overflow,
            vocab.special_texts,
            self.history if config.kv_reuse else None,
            vocab.spell,
        )
        self.layout_changes = 0
        self.layout_change_s = 0.0  # spent building the context again and moving the cells
        self._failed_move: tuple | None = None  # a change of layout that failed, and the chats it failed for
        self.steps = StepHistory(STEP_HISTORY)
        self._arrivals = 0
        self._generated = 0
        self._drafted = self._accepted = 0
        self.step_cost = StepCost()  # what a decode of n tokens takes here: whether a draft pays
        self._n_steps = 0
        self._step_s = self._decode_s = 0.0
        self._early_cancels: OrderedDict[str, bool] = OrderedDict()
        self.conversations = ConversationTotals(CONVERSATIONS_KEPT)
        self.snapshot = self._snapshot()
        self._cell_map_at = -math.inf
        self.cell_map: CellMap = build_cell_map(self.kv, self.scheduler, 0)

    @property
    def info(self):
        return self.backend.info

    def set_mode(self, mode: ServingMode) -> None:
        """Switch between batched, static and sequential serving at once: streams beyond the new limit
        pause, keeping their cells; switched to static, the streams running are the batch that runs now."""
        self.config = self.config.with_(mode=mode)
        self.scheduler.max_running = 1 if mode is ServingMode.SEQUENTIAL else self.config.capacity
        if (mode is ServingMode.STATIC) != self.scheduler.static:
            self.scheduler.set_static(mode is ServingMode.STATIC)
        self.snapshot = self._snapshot()  # readers see the paused streams before the next step

    def set_static_window(self, static_window_ms: float) -> None:
        """How long a static batch waits to fill; a batch being gathered now is due sooner or later."""
        self.config = self.config.with_(static_window_ms=static_window_ms)
        self.scheduler.static_window_s = static_window_ms / 1000

    def set_policy(self, policy: Policy) -> None:
        """Change the scheduling policy; the next step follows it."""
        self.config = self.config.with_(policy=policy)
        self.scheduler.policy = policy

    def set_itl_target(self, itl_target_ms: float | None) -> None:
        """Adapt the batch size to keep the inter-token latency under a target, or (None) stop adapting."""
        self.config = self.config.with_(itl_target_ms=itl_target_ms)
        limits = None
        if itl_target_ms:
            limits = AdaptiveBatch(itl_target_ms / 1000, self.config.capacity, self.config.n_batch)
        self.scheduler.limits = limits

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def ready_in(self) -> float:
        """Seconds before a step can do anything: 0, but while a static batch is being gathered."""
        return self.scheduler.ready_in()

    # -- requests in and out ---------------------------------------------------------------

    def prepare(self, request: Request) -> Prompt:
        """The request's prompt tokens; on the prompt thread: it reads the template, the tokenizer and
        the token histories (whose entries the engine thread replaces whole), and changes nothing."""
        try:
            problem = request.params.problem()
        except Exception as e:  # params of the wrong shape altogether
            problem = f"the sampling parameters cannot be read: {e!r}"
        if problem is None:
            problem = self._bad_tokens(request.reply_prefix)
        if problem is not None:
            return Prompt([], error=problem)
        prompt = self.prompts.prepare(request)
        if prompt.error is None and request.params.grammar is not None:
            try:  # compiled here, not on the engine thread; refused here when past llguidance's limits
                grammar = self.backend.constraints.new(request.params.grammar, request.params.grammar_triggers)
                prompt = dataclasses.replace(prompt, grammar=grammar)
            except ValueError as e:
                return Prompt([], error=str(e))
        return prompt

    def _bad_tokens(self, tokens) -> str | None:
        """A token llama.cpp does not know would abort the decode: refuse it here."""
        n_vocab = self.backend.vocab.n_vocab
        if not isinstance(tokens, tuple) or not all(type(t) is int and 0 <= t < n_vocab for t in tokens):
            return f"reply_prefix must be token ids between 0 and {n_vocab - 1}"
        return None

    def submit(self, request: Request, t_submit: float, prompt: Prompt | None = None) -> None:
        """Queue a request (its prompt built here unless given); one it cannot take ends at once with an ERROR finish."""
        stats = RequestStats(request.request_id, request.conversation_id, t_submit=t_submit)
        if self._early_cancels.pop(request.request_id, False):
            self._emit([FinishEvent(request.request_id, FinishReason.CANCELLED, "", stats, model=self.name)])
            return
        if self.backend.lost is not None:  # no context to run it in
            self._emit([self._failed(request.request_id, stats, self._lost_error(), Fault.UNAVAILABLE)])
            return
        prompt = prompt or self.prepare(request)
        if prompt.error is not None or not prompt.tokens:  # no token may reach a batch without a prompt
            error = prompt.error or "the prompt is empty: there is nothing to reply to"
            self._emit([self._failed(request.request_id, stats, error, prompt.fault)])
            return
        stats.prompt_tokens = len(prompt.tokens)
        self._arrivals += 1
        seq = Sequence(request, prompt.tokens, stats, self._arrivals, prompt.stop)
        seq.notice = prompt.notice
        seq.grammar = prompt.grammar
        seed = request.params.seed if request.params.seed is not None else random.getrandbits(32)
        seq.sampler = self.backend.samplers.new(request.params, seed, prompt.tokens)
        seq.draw = self._draw_for(request.params)
        self.scheduler.add(seq)

    def _draw_for(self, params, in_graph: bool | None = None) -> Draw:
        if params.n_probs is not None:
            return Draw.PROBS
        if params.grammar is not None:  # the constraint masks the logits on the host
            return Draw.CHAIN
        if self.config.backend_sampling if in_graph is None else in_graph:
            return Draw.IN_GRAPH
        return Draw.ARGMAX if params.temperature <= 0 and not params.greedy_needs_chain else Draw.CHAIN

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
        self.prompts.close()
        self.backend.close()

    def cut_all(self, notice: str) -> None:
        """End every request with `notice` (the model stays loaded)."""
        self._end_all(FinishReason.CANCELLED, notice=notice)

    def fail_all(self, error: str, fault: Fault = Fault.INTERNAL) -> None:
        self._end_all(FinishReason.ERROR, error=error, fault=fault)
        self.kv.clear()
        self.cell_map = build_cell_map(self.kv, self.scheduler, self._n_steps)  # the cleared pool, not the slots before

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
        drafting = self._draft(plan)
        # what the plan decided, before sampling moves the sequences on
        parts = tuple(
            StepPart(seq.request_id, seq.request.conversation_id, n + len(seq.draft), seq.is_decoding, len(seq.draft))
            for seq, n in plan
        )
        self._fill_batch(plan)
        t1 = time.perf_counter()
        rc = self.backend.decode()
        t2 = time.perf_counter()
        events: list[Event] = []
        if rc == 0:
            for seq, n in plan:
                if not seq.draft:
                    self.kv.commit(seq, n)
            self._sample_all([seq for seq, _ in plan if seq.row >= 0 and not seq.draft], events)
            for seq in drafting:
                self._verify(seq, events)
        else:
            for seq in drafting:
                seq.draft = []
            self._on_decode_failure(rc, plan, events)
        self._record_step(parts, t0, t1, t2)
        self._emit(events)
        if not self.scheduler.has_work():  # going idle: a change of layout the chats now allow keeps no one waiting
            self._fit_layout()
            self.snapshot = self._snapshot()
        return True

    def _fit_layout(self) -> None:
        """Change the KV layout when the chats at hand want the other one (pool.next_layout): every
        slot's cells move through their saved states; the step then schedules in the new layout."""
        backend = self.backend
        if not backend.movable:
            return
        scheduler = self.scheduler
        at_hand = (*scheduler.running, *scheduler.waiting)
        longest = max((len(s.tokens) for s in at_hand), default=0)
        if not backend.streams:  # a conversation kept for its next turn must fit a stream too
            longest = max(longest, max(len(s.tokens) for s in self.kv.slots))
        change = next_layout(backend.streams, backend.stream_cells, longest)
        if change is None:
            return
        # a move that failed is tried again only once the requests or the slots' chats changed
        attempt = (change.unified, frozenset(s.request_id for s in at_hand), tuple(s.owner for s in self.kv.slots))
        if attempt == self._failed_move:
            return
        t0 = time.perf_counter()
        why = backend.relayout(change, [s.seq_id for s in self.kv.slots if s.tokens])
        if why is None:
            self.kv.relayout(backend.streams, backend.n_ctx)
            self.layout_changes += 1
            self.layout_change_s += time.perf_counter() - t0
            self._failed_move = None
            return
        self._failed_move = attempt
        if backend.lost is not None:
            self.fail_all(self._lost_error(), Fault.UNAVAILABLE)
            return
        self.n_ctx_seq = self.prompts.n_ctx_seq = backend.seq_room  # a kept layout caps a chat at its stream
        if change.unified:
            self._end_outgrown(backend.stream_cells, why)

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

    def _draft(self, plan: Plan) -> list[Sequence]:
        """Give the greedy sequences decoding in this step a draft of their next tokens (speculation.py),
        within the step's token budget, their room and their reply's length; return those drafting."""
        decoding = [seq for seq, _ in plan if seq.is_decoding and _greedy(seq) and seq.params.speculate]
        if self.config.spec_type is SpecType.NONE or self.backend.drafts_refused or not decoding:
            return []
        model = self.backend.draft
        n_step = sum(n for _, n in plan)
        cells = min(self.kv.free_cells, self.backend.n_ctx) - n_step
        most = min(self.config.n_batch - n_step, cells, self.config.spec_draft_n_max)
        guess_s = model.guess_s if model else 0.0
        if not self.config.spec_draft_n_min and not could_pay(self.step_cost, n_step, most, guess_s):
            return []  # a step this large: no guess would pay, for any sequence of it
        lengths: list[tuple[Sequence, int]] = []
        for seq in decoding:
            if seq.drafter is None:
                kind = NgramDrafter if model is None else Drafter
                seq.drafter = kind(self.config.spec_draft_n_min, self.config.spec_draft_n_max)
            own_room = self.backend.n_ctx_seq - len(seq.tokens)  # its stream's, or the pool's
            left = seq.params.max_tokens - seq.num_generated - 1  # the token after the draft is one more
            room = min(self.config.n_batch - n_step, cells, own_room, left)
            n = seq.drafter.length(self.step_cost, n_step, room, guess_s)
            if model is None:
                seq.draft = seq.drafter.draft(seq.tokens, n)
                n = len(seq.draft)
            elif n < max(1, self.config.spec_draft_n_min):
                continue
            lengths.append((seq, n))
            n_step += n  # a draft model's may end sooner
            cells -= n
        if model is not None and lengths:
            self._guess(model, lengths)
        return [seq for seq, _ in lengths if seq.draft]

    def _guess(self, model, lengths: list[tuple[Sequence, int]]) -> None:
        """Drafts from the draft model for every sequence in `lengths` at once."""
        drafts = model.draft([(seq.slot_id, seq.tokens, n) for seq, n in lengths], self.config.spec_draft_p_min)
        for (seq, _), draft in zip(lengths, drafts, strict=True):
            seq.draft = draft if len(draft) >= self.config.spec_draft_n_min else []

    def _verify(self, seq: Sequence, events: list[Event]) -> None:
        """Take the tokens the greedy choice confirms: at each drafted row the top token (after the
        chain's penalties, drawn row by row so that each sees the tokens taken before it), as long as it
        is the draft's next; then one more (the first that differs, or the one after the whole draft)."""
        draft, seq.draft = seq.draft, []
        rows = list(range(seq.row, seq.row + len(draft) + 1))
        samplers, vocab = self.backend.samplers, self.backend.vocab
        if seq.grammar is not None:  # each row masked as the guesses before it leave the grammar
            self.backend.constraints.mask_drafted(seq.grammar, [samplers.row_logits(row) for row in rows], draft)
        tops = samplers.top_tokens(rows) if seq.draw is Draw.ARGMAX else None
        tokens = []
        for i, row in enumerate(rows):
            if tops is None or (seq.params.ignore_eos and vocab.is_eog(tops[i])):
                token = samplers.sample(seq.sampler, row)  # the chain's own draw: it bans end-of-generation when told to
            else:
                token = tops[i]
            tokens.append(token)
            if i == len(draft) or token != draft[i]:
                break
        accepted = len(tokens) - 1
        self.kv.commit_drafted(seq, draft[:accepted], len(draft))
        seq.drafter.verified(len(draft), accepted)
        seq.stats.drafted_tokens += len(draft)
        seq.stats.accepted_tokens += accepted
        self._drafted += len(draft)
        self._accepted += accepted
        for token in tokens:
            if seq.grammar is not None and self.backend.constraints.accept(seq.grammar, token) is not None:
                self._finish(seq, FinishReason.ERROR, events, error=self._constraint_error(seq), fault=Fault.REQUEST)
                break
            self._take(seq, token, None, events)
            if seq.status is SequenceStatus.FINISHED:
                break

    def _fill_batch(self, plan: Plan) -> None:
        batch = self.backend.batch
        batch.clear()
        # by slot: with a stream per sequence llama.cpp cuts the batch into a ubatch per run of
        # consecutive sequence ids, in batch order (split_equal); one pool does not mind the order
        for seq, n in sorted(plan, key=lambda p: p[0].slot_id):
            start = seq.num_computed
            if seq.draft:  # its next token and the guesses after it, each with its logits
                seq.row = batch.add_all(seq.slot_id, [seq.tokens[start], *seq.draft], start)
                continue
            wants_logits = start + n == len(seq.tokens)
            seq.row = batch.add(seq.slot_id, seq.tokens[start : start + n], start, wants_logits)
            if wants_logits and self.config.backend_sampling:  # else nothing is ever attached
                self._place_sampler(seq)

    def _place_sampler(self, seq: Sequence) -> None:
        """Attach the sequence's sampler to its slot for the decode graph, or (sampling on the host)
        take another's off it: llama.cpp would draw with that one and copy no logits."""
        wanted = seq.sampler if seq.draw is Draw.IN_GRAPH else None
        if not self.backend.samplers.attach(seq.slot_id, wanted):
            seq.draw = self._draw_for(seq.params, in_graph=False)  # one of its samplers cannot run there

    def _sample_all(self, seqs: list[Sequence], events: list[Event]) -> None:
        """Draw every sequence's next token: the constrained rows' logits masked first, all their masks
        filled together; greedy ones from one pass over their rows' logits."""
        constrained = [seq for seq in seqs if seq.grammar is not None]
        if constrained:
            samplers = self.backend.samplers
            self.backend.constraints.mask([(seq.grammar, samplers.row_logits(seq.row)) for seq in constrained])
            for seq in constrained:
                if seq.grammar.error is not None:  # a limit of llguidance's, the same on any machine
                    self._finish(seq, FinishReason.ERROR, events, error=self._constraint_error(seq), fault=Fault.REQUEST)
            seqs = [seq for seq in seqs if seq.status is not SequenceStatus.FINISHED]
        greedy = [seq for seq in seqs if seq.draw is Draw.ARGMAX or _greedy_in_grammar(seq)]
        top = dict(zip(greedy, self.backend.samplers.top_tokens([seq.row for seq in greedy]), strict=True))
        for seq in seqs:
            token, probs = top.get(seq), None
            if token is None or (seq.params.ignore_eos and self.backend.vocab.is_eog(token)):
                token, probs = self._draw(seq)  # the chain bans end-of-generation tokens when told to
            if seq.grammar is not None and self.backend.constraints.accept(seq.grammar, token) is not None:
                self._finish(seq, FinishReason.ERROR, events, error=self._constraint_error(seq), fault=Fault.REQUEST)
                continue
            self._take(seq, token, probs, events)

    @staticmethod
    def _constraint_error(seq: Sequence) -> str:
        return f"the grammar cannot go on: {seq.grammar.error or 'it refused the token drawn'}"

    def _take(self, seq: Sequence, token: int, probs: TokenProbs | None, events: list[Event]) -> None:
        now = time.monotonic()
        seq.tokens.append(token)
        seq.stats.on_token(now)
        self._generated += 1
        params = seq.params
        if self.backend.vocab.is_eog(token):  # never drawn with ignore_eos: its sampler bans them
            events.append(TokenEvent(seq.request_id, "", 1, now, token))  # not part of the reply
            self._finish(seq, FinishReason.STOP, events)
            return
        text = seq.stream.feed(self.backend.vocab.piece(token))
        first = seq.num_generated == 1  # the first token tells the prompt's cache figures
        cached, evaluated = (seq.stats.cached_tokens, seq.stats.evaluated_tokens) if first else (-1, -1)
        events.append(TokenEvent(seq.request_id, text, 1, now, token, cached, evaluated, probs))
        if seq.stream.stopped:
            self._finish(seq, FinishReason.STOP, events)
        elif seq.num_generated >= params.max_tokens:
            self._finish(seq, FinishReason.LENGTH, events)
        elif len(seq.tokens) >= self.n_ctx_seq:
            seq.notice = f"the context of {self.n_ctx_seq} tokens is full"
            self._finish(seq, FinishReason.CONTEXT, events)

    def _draw(self, seq: Sequence) -> tuple[int, TokenProbs | None]:
        params = seq.params
        if seq.draw is Draw.IN_GRAPH:
            return self.backend.samplers.sampled(seq.sampler, seq.row), None
        samplers = self.backend.samplers
        if seq.draw is Draw.PROBS:
            return samplers.sample_with_probs(seq.sampler, seq.row, params.n_probs, params.temperature <= 0)
        return samplers.sample(seq.sampler, seq.row), None

    def _on_decode_failure(self, rc: int, plan: Plan, events: list[Event]) -> None:
        # llama.cpp rolled the batch back; with more room the next step tries again
        if rc == 1 and self.scheduler.relieve_pressure():
            return
        reason = "the KV cache is full" if rc == 1 else f"llama_decode failed with code {rc}"
        fault = Fault.UNAVAILABLE if rc == 1 else Fault.INTERNAL  # a full cache frees up; a failed decode is a fault
        for seq, _ in plan:
            self._finish(seq, FinishReason.ERROR, events, error=reason, fault=fault)

    def _finish(
        self, seq: Sequence, reason: FinishReason, events: list[Event], error: str | None = None, fault: Fault | None = None
    ):
        if reason is not FinishReason.ERROR:
            tail = seq.stream.finish()
            if tail:
                events.append(TokenEvent(seq.request_id, tail, 0, time.monotonic()))
        self.scheduler.finish(seq)
        if seq.sampler is not None:
            self.backend.samplers.free(seq.sampler)
            seq.sampler = None
        seq.grammar = None
        seq.stats.t_finish = time.monotonic()
        self.conversations.add(seq.stats)
        if seq.request.conversation_id is not None:
            self.history.remember(seq.request.conversation_id, seq.tokens)
        fault = fault if reason is FinishReason.ERROR else None
        events.append(FinishEvent(seq.request_id, reason, seq.stream.text, seq.stats, error, seq.notice, self.name, fault))

    def _failed(self, request_id: str, stats: RequestStats, error: str, fault: Fault) -> FinishEvent:
        stats.t_finish = time.monotonic()
        return FinishEvent(request_id, FinishReason.ERROR, "", stats, error, model=self.name, fault=fault)

    # -- figures ---------------------------------------------------------------------------

    def _emit(self, events: list[Event]) -> None:
        """Publish a fresh snapshot (once a step) and hand the events to the client."""
        self.snapshot = self._snapshot()
        self._publish_cell_map()
        if events:
            self._sink(events)

    def _publish_cell_map(self) -> None:
        """Replace the KV cell map whole (readers on other threads take no lock): at most ten times a
        second while there is work, and on going idle, so that the last state is always shown."""
        now = time.monotonic()
        if now - self._cell_map_at >= CELL_MAP_EVERY_S or not self.scheduler.has_work():
            self._cell_map_at = now
            self.cell_map = build_cell_map(self.kv, self.scheduler, self._n_steps)

    def _record_step(self, parts: tuple[StepPart, ...], t0: float, t1: float, t2: float) -> None:
        n_tokens = sum(p.n_tokens for p in parts)
        n_decode = sum(p.is_decode for p in parts)
        scheduler = self.scheduler
        step = StepStats(
            t_end=time.monotonic(),
            n_tokens=n_tokens,
            n_seqs=len(parts),
            n_decode=n_decode,
            n_prefill_tokens=n_tokens - n_decode,
            step_s=time.perf_counter() - t0,
            decode_s=t2 - t1,
            batch_limit=scheduler.batch_limit,
            parts=parts,
        )
        self.steps.append(step)
        self.step_cost.observe(n_tokens, step.decode_s)
        self._step_s += step.step_s
        self._decode_s += step.decode_s
        if step.n_prefill_tokens >= step.n_tokens // 2 > 0:  # mostly prompt: what a token of it costs now
            self.kv.recompute_s_per_token = step.decode_s / step.n_tokens
        if scheduler.limits is not None:
            scheduler.limits.observe(step)
        self._n_steps += 1

    def _snapshot(self) -> EngineSnapshot:
        kv = self.kv
        return EngineSnapshot(
            cells_used=kv.cells_used,
            cells_total=kv.n_cells,
            slots_used=kv.slots_used,
            slots_total=len(kv.slots),
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            evictions=kv.evictions,
            preemptions=self.scheduler.preemptions,
            steps=self._n_steps,
            generated_tokens=self._generated,
            step_s=self._step_s,
            decode_s=self._decode_s,
            recomputed_tokens=kv.recomputed_tokens,
            paused=max(0, len(self.scheduler.running) - self.scheduler.batch_limit),
            drafted_tokens=self._drafted,
            accepted_tokens=self._accepted,
            kv_layout=self.backend.layout_text(),
            layout_changes=self.layout_changes,
            layout_change_s=self.layout_change_s,
            **self._tier_figures(),
        )

    def _tier_figures(self) -> dict[str, int]:
        host = self.kv.host
        if host is None:
            return {}
        return dict(
            saved_entries=len(host),
            saved_bytes=host.bytes_used,
            saves=host.saves,
            restores=host.restores,
            restored_tokens=host.restored_tokens,
        )
