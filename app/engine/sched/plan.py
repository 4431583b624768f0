"""What one step decided (as vLLM's SchedulerOutput): made by the scheduler, given drafts by the
speculator and batch rows by the engine, each time as a new plan; read by everyone after. It is
the only state a step keeps: a sequence holds its lifetime state, never one step's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..sequence import Sequence


@dataclass(frozen=True)
class StepPlan:
    # which sequences, in the scheduler's order, and how many of its pending tokens each evaluates
    n_tokens: Mapping[Sequence, int]
    # the tokens the step could take: the scheduler's budget for who waited on it (Scheduler.token_budget)
    budget: int = 0
    # the tokens guessed after its next one, of each sequence that drafts (verified in this step)
    drafts: Mapping[Sequence, tuple[int, ...]] = field(default_factory=dict)
    # the first batch row whose logits each sequence reads, of those whose logits are read
    rows: Mapping[Sequence, int] = field(default_factory=dict)

    @property
    def seqs(self) -> tuple[Sequence, ...]:
        return tuple(self.n_tokens)

    def __bool__(self) -> bool:
        return bool(self.n_tokens)

    def with_drafts(self, drafts: Mapping[Sequence, tuple[int, ...]]) -> StepPlan:
        return replace(self, drafts={seq: d for seq, d in drafts.items() if d})

    def with_rows(self, rows: Mapping[Sequence, int]) -> StepPlan:
        return replace(self, rows=rows)
