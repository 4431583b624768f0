"""The engine's figures in the Prometheus text format, for GET /metrics.

Each figure has a line without labels, for every model together (what a server of one model has
always shown), then a line per model labelled `model="name"`. The KV layout is a gauge, 1 where each
sequence has a stream of its own and 0 where they share one pool (together: how many models run
streams), beside counters of its changes while chats ran and the seconds they took.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

from app.engine.events import FinishEvent
from app.engine.stats import EngineSnapshot, StepStats, hit_rate

PREFIX = "batch_playground_"
RATE_WINDOW_S = 10.0  # tokens/s and sequences per step are averaged over the last 10 s of steps


@dataclass
class Totals:
    """Running totals over finished requests."""

    requests: dict[str, int] = field(default_factory=dict)  # finish reason -> count
    prompt_tokens: int = 0
    cached_tokens: int = 0
    evaluated_tokens: int = 0
    gen_tokens: int = 0

    def add(self, ev: FinishEvent) -> None:
        st = ev.stats
        self.requests[ev.reason.value] = self.requests.get(ev.reason.value, 0) + 1
        self.prompt_tokens += st.prompt_tokens
        self.cached_tokens += st.cached_tokens
        self.evaluated_tokens += st.evaluated_tokens
        self.gen_tokens += st.gen_tokens


class Stored(Protocol):
    """The Responses API's stored responses, as /metrics shows them."""

    bytes: int
    dropped: int

    def __len__(self) -> int: ...


class ServedTotals:
    """Totals over every finished request (panes and API alike), all models' and each model's; fed by
    the client's listener. `stored`: the server's stored responses, if it keeps any."""

    def __init__(self, stored: Stored | None = None):
        self.all = Totals()
        self.by_model: dict[str, Totals] = {}
        self.stored = stored

    def on_events(self, events) -> None:
        for ev in events:
            if isinstance(ev, FinishEvent):
                self.all.add(ev)
                if ev.model is not None:  # else refused before it reached a model
                    self.by_model.setdefault(ev.model, Totals()).add(ev)


@dataclass(frozen=True)
class ModelFigures:
    """One model's engine as /metrics shows it: its snapshot and its steps of the last RATE_WINDOW_S."""

    snapshot: EngineSnapshot
    steps: Sequence[StepStats]


def prometheus_text(models: dict[str, ModelFigures], totals: ServedTotals) -> str:
    """Every figure for all `models` together, then for each model."""
    steps = [st for m in models.values() for st in m.steps]
    streams = sum(_streams(m.snapshot) for m in models.values())
    together = _figures(_sum(m.snapshot for m in models.values()), steps, totals.all, streams)
    each = {
        name: _figures(m.snapshot, m.steps, totals.by_model.get(name, Totals()), _streams(m.snapshot))
        for name, m in models.items()
    }
    lines: list[str] = []
    for i, (kind, name, help_text, value) in enumerate(together):
        lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} {kind}", f"{PREFIX}{name} {value:g}"]
        lines += [f"{PREFIX}{name}{{model={_label(model)}}} {figures[i][3]:g}" for model, figures in each.items()]
    lines += [f"# HELP {PREFIX}requests_total requests finished, by reason", f"# TYPE {PREFIX}requests_total counter"]
    for reason, count in sorted(totals.all.requests.items()):
        lines.append(f'{PREFIX}requests_total{{reason="{reason}"}} {count}')
    for model in models:
        for reason, count in sorted(totals.by_model.get(model, Totals()).requests.items()):
            lines.append(f'{PREFIX}requests_total{{model={_label(model)},reason="{reason}"}} {count}')
    if totals.stored is not None:
        for kind, name, help_text, value in _stored_figures(totals.stored):
            lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} {kind}", f"{PREFIX}{name} {value}"]
    return "\n".join(lines) + "\n"


def _stored_figures(stored: Stored) -> list[tuple[str, str, str, int]]:
    """The stored responses of every model together (one store serves them all), as whole numbers (`:g` would round bytes)."""
    return [
        ("gauge", "responses_stored", "stored responses of the Responses API kept", len(stored)),
        ("gauge", "responses_stored_bytes", "memory holding the stored responses and their conversations", stored.bytes),
        ("counter", "responses_dropped_total", "stored responses dropped for room, least recently used first", stored.dropped),
    ]


def _sum(snapshots) -> EngineSnapshot:
    """Every model's figures added up (the words, the KV layout's, left out)."""
    snapshots = list(snapshots)
    numbers = [f.name for f in fields(EngineSnapshot) if not isinstance(f.default, str)]
    return EngineSnapshot(**{name: sum(getattr(s, name) for s in snapshots) for name in numbers})


def _streams(s: EngineSnapshot) -> int:
    """1 where the engine runs a KV stream per sequence (llama.cpp's kv_unified off), 0 where one pool."""
    return int(s.kv_layout.startswith("a stream per sequence"))


def _label(value: str) -> str:
    """A label value, quoted and escaped as the text format wants."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _figures(s: EngineSnapshot, steps: Sequence[StepStats], totals: Totals, streams: int) -> list[tuple[str, str, str, float]]:
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
        (
            "counter",
            "prompt_tokens_recomputed_total",
            "prompt tokens computed again after they were computed once (evicted, preempted, or sent twice)",
            s.recomputed_tokens,
        ),
        ("counter", "evictions_total", "idle conversations evicted from the KV cache", s.evictions),
        ("counter", "preemptions_total", "running requests preempted for room", s.preemptions),
        ("gauge", "kv_ram_entries", "evicted sequences whose KV cells are kept in host RAM", s.saved_entries),
        ("gauge", "kv_ram_bytes", "host RAM holding evicted KV cells", s.saved_bytes),
        ("counter", "kv_ram_saves_total", "sequences' KV cells saved to host RAM", s.saves),
        ("counter", "kv_ram_restores_total", "sequences' KV cells restored from host RAM", s.restores),
        ("counter", "kv_ram_restored_tokens_total", "prompt tokens restored from host RAM, not computed", s.restored_tokens),
        (
            "gauge",
            "kv_layout_streams",
            "1 where each sequence has a KV stream of its own, 0 where they share one pool (every model: those with streams)",
            streams,
        ),
        (
            "counter",
            "kv_layout_changes_total",
            "KV layout changes while chats ran (streams to one pool or back)",
            s.layout_changes,
        ),
        ("counter", "kv_layout_change_seconds_total", "seconds spent changing the KV layout", s.layout_change_s),
        ("counter", "draft_tokens_total", "tokens drafted ahead and verified (speculative decoding)", s.drafted_tokens),
        ("counter", "draft_accepted_tokens_total", "drafted tokens the model confirmed", s.accepted_tokens),
    ]


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0
