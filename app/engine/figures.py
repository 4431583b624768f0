"""The engine's figures: its running counts, the recent steps, what each conversation has had, and
the snapshot and KV cell map that readers on other threads take (each replaced whole, never changed
in place: no lock)."""

from __future__ import annotations

import math
import time

from .cell_map import CellMap, PictureCells, build_cell_map
from .kv.layout_move import LayoutMove
from .kv.manager import KVCacheManager
from .sched.plan import StepPlan
from .sched.scheduler import Scheduler
from .spec.speculator import Speculator
from .stats import ConversationTotals, EngineSnapshot, StepHistory, StepPart, StepStats
from .step_cost import StepCost

STEP_HISTORY = 4096  # recent steps kept for plots and benchmarks
CONVERSATIONS_KEPT = 4096  # running totals of this many recent conversations (a pane's hit rate)
CELL_MAP_EVERY_S = 0.1  # the KV cell map is rebuilt at most this often while busy, and whenever the engine idles


class Figures:
    def __init__(
        self,
        backend,
        kv: KVCacheManager,
        scheduler: Scheduler,
        speculator: Speculator,
        layout_move: LayoutMove,
        step_cost: StepCost,
    ):
        self.backend, self.kv, self.scheduler = backend, kv, scheduler
        self.speculator, self.layout_move = speculator, layout_move
        self.step_cost = step_cost  # what a decode of n tokens takes here: whether a draft pays
        self.steps = StepHistory(STEP_HISTORY)
        self.conversations = ConversationTotals(CONVERSATIONS_KEPT)
        self.generated = 0
        self.n_steps = 0
        self.step_s = self.decode_s = 0.0
        self.last_step: StepStats | None = None
        self.snapshot = self.take_snapshot()
        self._cell_map_at = -math.inf
        self._pictures = PictureCells()  # each slot's picture cells, read from the tokens written since
        self.cell_map: CellMap = build_cell_map(kv, scheduler, 0, self._pictures)

    @staticmethod
    def parts(plan: StepPlan) -> tuple[StepPart, ...]:
        """What the plan decided for each sequence, before sampling moves the sequences on."""
        return tuple(
            StepPart(
                seq.request_id,
                seq.request.conversation_id,
                n + len(plan.drafts.get(seq, ())),
                seq.is_decoding,
                len(plan.drafts.get(seq, ())),
                sum(1 for t in seq.tokens[seq.num_computed : seq.num_computed + n] if t < 0) if seq.images else 0,
                seq.num_computed,
            )
            for seq, n in plan.n_tokens.items()
        )

    def record_step(
        self, parts: tuple[StepPart, ...], budget: int, ubatches: int, t0: float, t1: float, t2: float, image_s: float = 0.0
    ) -> None:
        n_tokens = sum(p.n_tokens for p in parts)
        n_decode = sum(p.is_decode for p in parts)
        n_image = sum(p.image_tokens for p in parts)
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
            token_budget=budget,
            held_back=scheduler.limits is not None and scheduler.limits.in_burst,  # as it was planned
            n_ubatches=ubatches,
            n_image_tokens=n_image,
            image_s=image_s,
            n_attended=sum(self.kv.layout.chunk_attention(p.start, p.n_tokens) for p in parts if not p.is_decode),
        )
        self.steps.append(step)
        self.last_step = step
        if n_tokens > n_image:  # what a decode of tokens costs (a picture's rows are a decode of their own)
            self.step_cost.observe(n_tokens - n_image, step.decode_s - image_s)
        self.step_s += step.step_s
        self.decode_s += step.decode_s
        if step.n_prefill_tokens >= step.n_tokens // 2 > 0:  # mostly prompt: what a token of it costs now
            self.kv.recompute_s_per_token = step.decode_s / step.n_tokens
        if scheduler.limits is not None:
            scheduler.limits.observe(step)
        self.n_steps += 1

    def publish(self) -> None:
        """A fresh snapshot (once a step), and the cell map when it is due."""
        self.snapshot = self.take_snapshot()
        self._publish_cell_map()

    def _publish_cell_map(self) -> None:
        """Replace the KV cell map whole: at most ten times a second while there is work, and on
        going idle, so that the last state is always shown."""
        now = time.monotonic()
        if now - self._cell_map_at >= CELL_MAP_EVERY_S or not self.scheduler.has_work():
            self._cell_map_at = now
            self.rebuild_cell_map()

    def rebuild_cell_map(self) -> None:
        self.cell_map = build_cell_map(self.kv, self.scheduler, self.n_steps, self._pictures)

    def take_snapshot(self) -> EngineSnapshot:
        kv, scheduler = self.kv, self.scheduler
        return EngineSnapshot(
            cells_used=kv.cells_used,
            cells_total=kv.n_cells,
            slots_used=kv.slots_used,
            slots_total=len(kv.slots),
            running=len(scheduler.running),
            waiting=len(scheduler.waiting),
            evictions=kv.evictions,
            preemptions=scheduler.preemptions,
            steps=self.n_steps,
            generated_tokens=self.generated,
            step_s=self.step_s,
            decode_s=self.decode_s,
            recomputed_tokens=kv.recomputed_tokens,
            paused=max(0, len(scheduler.running) - scheduler.batch_limit),
            drafted_tokens=self.speculator.drafted,
            accepted_tokens=self.speculator.accepted,
            kv_layout=self.backend.layout_text(),
            layout_changes=self.layout_move.changes,
            layout_change_s=self.layout_move.change_s,
            step_size=step_size_line(self.last_step, self.scheduler.limits is not None),
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


def step_size_line(step: StepStats | None, adaptive: bool) -> str:
    """The last step's token budget in words, and who decided it: "prompt chunks of 512: no reply
    generating", "128 tokens a step: 8 replies generating", or the adaptive batch's, which holds
    the chunks back while a burst makes steps slower than usual."""
    if step is None or not step.token_budget:
        return ""
    if not step.n_decode:
        return f"prompt chunks of {step.token_budget}: no reply generating"
    replies = f"{step.n_decode} repl{'y' if step.n_decode == 1 else 'ies'} generating"
    if adaptive and step.token_budget <= step.n_decode:
        slow = "; steps run slow for a moment," if step.held_back else ","
        return f"replies only: {step.n_decode} generating{slow} and a prompt chunk beside them would pass the latency target"
    held = "held back while steps run slow, " if step.held_back else ""
    who = f"the adaptive batch's, {held}" if adaptive else ""
    return f"{step.token_budget} tokens a step: {who}{replies}"
