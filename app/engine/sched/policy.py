"""Scheduling policies: in which order the sequences get their share of a step's token budget.

The scheduler walks the order a policy returns and gives each sequence its share: one token to a
sequence that is generating, a chunk of the prompt to one still reading it, admission (a slot and
a first chunk) to one still waiting. What is left when the budget runs out waits for the next step.
See `Policy` in params.py for what each one does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ..params import Policy
from ..sequence import Sequence, SequenceStatus

Order = Callable[[list[Sequence], Iterable[Sequence]], list[Sequence]]

# waiting prompts within this factor of the oldest waiting prompt's length are read together
LENGTH_GROUP_RATIO = 2.0


def work_left(seq: Sequence) -> int:
    """Tokens still to evaluate plus tokens still to generate (at most max_tokens)."""
    return seq.num_pending + max(0, seq.params.max_tokens - seq.num_generated)


def _stage(seq: Sequence) -> int:
    if seq.status is not SequenceStatus.RUNNING:
        return 2
    return 0 if seq.is_decoding else 1


def _decode_first(running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    # a stable sort keeps admission order among the running and queue order among the waiting
    return sorted([*running, *waiting], key=_stage)


def _fcfs(running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    return sorted([*running, *waiting], key=lambda s: s.arrival)


def _shortest_first(running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    return sorted([*running, *waiting], key=lambda s: (work_left(s), s.arrival))


def _length_group(running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    queue = list(waiting)
    if not queue:
        return _decode_first(running, ())
    head = max(queue[0].num_pending, 1)

    def out_of_group(seq: Sequence) -> bool:
        return abs(math.log(max(seq.num_pending, 1) / head)) > math.log(LENGTH_GROUP_RATIO)

    group = [s for s in queue if not out_of_group(s)]
    return _decode_first(running, group)  # the others wait for a step whose head is like them


def _priority(running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    return sorted(_decode_first(running, waiting), key=lambda s: -s.request.priority)


ORDERS: dict[Policy, Order] = {
    Policy.FCFS: _fcfs,
    Policy.DECODE_FIRST: _decode_first,
    Policy.SHORTEST_FIRST: _shortest_first,
    Policy.LENGTH_GROUP: _length_group,
    Policy.PRIORITY: _priority,
}


def service_order(policy: Policy, running: list[Sequence], waiting: Iterable[Sequence]) -> list[Sequence]:
    return ORDERS[policy](running, waiting)


def preemption_victim(policy: Policy, running: list[Sequence]) -> Sequence:
    """Who gives its cells back when they run out: the latest admitted (of the lowest priority)."""
    if policy is Policy.PRIORITY:
        lowest = min(s.request.priority for s in running)
        return [s for s in running if s.request.priority == lowest][-1]
    return running[-1]
