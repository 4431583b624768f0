"""The engine's figures in the Prometheus text format, for GET /metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.engine.events import FinishEvent
from app.engine.stats import EngineSnapshot, StepStats, hit_rate

PREFIX = "batch_playground_"
RATE_WINDOW_S = 10.0  # tokens/s and sequences per step are averaged over the last 10 s of steps


class ServedTotals:
    """Running totals over every finished request (panes and API alike), fed by the client's listener."""

    def __init__(self):
        self.requests: dict[str, int] = {}  # finish reason -> count
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.evaluated_tokens = 0
        self.gen_tokens = 0

    def on_events(self, events) -> None:
        for ev in events:
            if isinstance(ev, FinishEvent):
                st = ev.stats
                self.requests[ev.reason.value] = self.requests.get(ev.reason.value, 0) + 1
                self.prompt_tokens += st.prompt_tokens
                self.cached_tokens += st.cached_tokens
                self.evaluated_tokens += st.evaluated_tokens
                self.gen_tokens += st.gen_tokens


def prometheus_text(snapshot: EngineSnapshot, steps: Sequence[StepStats], totals: ServedTotals) -> str:
    """The figures of `snapshot`, of `steps` (those of the last RATE_WINDOW_S) and of `totals`."""
    lines: list[str] = []
    for kind, name, help_text, value in _figures(snapshot, steps, totals):
        lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} {kind}", f"{PREFIX}{name} {value:g}"]
    lines += [f"# HELP {PREFIX}requests_total requests finished, by reason", f"# TYPE {PREFIX}requests_total counter"]
    for reason, count in sorted(totals.requests.items()):
        lines.append(f'{PREFIX}requests_total{{reason="{reason}"}} {count}')
    return "\n".join(lines) + "\n"


def _figures(s: EngineSnapshot, steps: Sequence[StepStats], totals: ServedTotals) -> list[tuple[str, str, str, float]]:
    """(kind, name, help, value) of every single-valued metric."""
    rate = hit_rate(totals.cached_tokens, totals.evaluated_tokens)
    window = f"over the last {RATE_WINDOW_S:g} s"
    return [
        (
            "gauge",
            "generation_tokens_per_second",
            f"tokens generated per second {window}",
            sum(st.n_decode for st in steps) / RATE_WINDOW_S,
        ),
        (
            "gauge",
            "prompt_tokens_per_second",
            f"prompt tokens read per second {window}",
            sum(st.n_prefill_tokens for st in steps) / RATE_WINDOW_S,
        ),
        ("gauge", "sequences_per_step", f"mean sequences in one decode step {window}", _mean([st.n_seqs for st in steps])),
        (
            "gauge",
            "kv_cache_hit_rate",
            "cached / (cached + evaluated) prompt tokens, all requests",
            0.0 if math.isnan(rate) else rate,
        ),
        ("gauge", "kv_cells_used", "KV cells holding tokens", s.cells_used),
        ("gauge", "kv_cells_free", "KV cells free", s.cells_total - s.cells_used),
        ("gauge", "kv_cells_total", "KV cells in the pool", s.cells_total),
        ("gauge", "slots_used", "sequence slots holding a conversation", s.slots_used),
        ("gauge", "slots_total", "sequence slots (parallel capacity)", s.slots_total),
        ("gauge", "requests_running", "requests being decoded", s.running),
        ("gauge", "requests_waiting", "requests waiting for a slot or cells", s.waiting),
        ("counter", "decode_steps_total", "decode steps run", s.steps),
        ("counter", "generated_tokens_total", "tokens generated", s.generated_tokens),
        ("counter", "prompt_tokens_total", "prompt tokens of finished requests", totals.prompt_tokens),
        ("counter", "prompt_tokens_cached_total", "prompt tokens reused from the KV cache", totals.cached_tokens),
        ("counter", "prompt_tokens_evaluated_total", "prompt tokens computed", totals.evaluated_tokens),
        ("counter", "evictions_total", "idle conversations evicted from the KV cache", s.evictions),
        ("counter", "preemptions_total", "running requests preempted for room", s.preemptions),
        ("gauge", "kv_ram_entries", "evicted sequences whose KV cells are kept in host RAM", s.saved_entries),
        ("gauge", "kv_ram_bytes", "host RAM holding evicted KV cells", s.saved_bytes),
        ("counter", "kv_ram_saves_total", "sequences' KV cells saved to host RAM", s.saves),
        ("counter", "kv_ram_restores_total", "sequences' KV cells restored from host RAM", s.restores),
        ("counter", "kv_ram_restored_tokens_total", "prompt tokens restored from host RAM, not computed", s.restored_tokens),
    ]


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0
