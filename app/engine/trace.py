"""Steps and requests as a Chrome trace (trace-event JSON): opens in the Perfetto UI and chrome://tracing.

A track (a trace "thread") per conversation, a pane's chat in the window, with each request's
waiting, prefill and decode spans; a track of engine steps, each step's composition in its args;
and counters of the batch's tokens and sequences. Times are microseconds from the earliest
moment in the trace. It reads only `stats.py`'s values, so the bench and the window both use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence

from .stats import RequestStats, StepStats

STEP_TRACK = "engine steps"
NO_CONVERSATION = "requests without a conversation"


def trace_events(
    steps: Mapping[str, Sequence[StepStats]],
    requests: Iterable[RequestStats],
    *,
    track_names: Mapping[str, str] | None = None,
    process_name: str = "batch playground",
    pid: int = 1,
    origin: float | None = None,
) -> list[dict]:
    """The trace events of one process: `steps` maps a track name (an engine) to its steps,
    `requests` are finished requests' stats; `track_names` names a conversation's track (its id
    otherwise). `origin` (monotonic seconds) is time zero; by default the earliest moment seen."""
    requests = list(requests)
    if origin is None:
        origin = _earliest(steps, requests)
    events = [_meta(pid, 0, "process_name", process_name)]
    tid = 0
    for name, track in steps.items():
        tid += 1
        events += [_meta(pid, tid, "thread_name", name), _meta(pid, tid, "thread_sort_index", tid, key="sort_index")]
        events += _step_events(track, pid, tid, origin, name)
    tids: dict[str | None, int] = {}
    for st in requests:
        if st.conversation_id not in tids:
            tid += 1
            tids[st.conversation_id] = tid
            label = (
                NO_CONVERSATION if st.conversation_id is None else (track_names or {}).get(st.conversation_id, st.conversation_id)
            )
            events += [_meta(pid, tid, "thread_name", label), _meta(pid, tid, "thread_sort_index", tid, key="sort_index")]
        events += _request_events(st, pid, tids[st.conversation_id], origin)
    return events


def trace_document(events: list[dict]) -> dict:
    """The JSON object a trace file holds."""
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str, events: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace_document(events), f, separators=(",", ":"))


def _earliest(steps: Mapping[str, Sequence[StepStats]], requests: list[RequestStats]) -> float:
    times = [st.t_start for track in steps.values() for st in track[:1]]
    times += [st.t_submit for st in requests if st.t_submit > 0]
    return min(times, default=0.0)


def _meta(pid: int, tid: int, name: str, value, key: str = "name") -> dict:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {key: value}}


def _us(t: float, origin: float) -> float:
    return round((t - origin) * 1e6, 1)


def _step_events(steps: Sequence[StepStats], pid: int, tid: int, origin: float, track: str) -> list[dict]:
    events = []
    for st in steps:
        ts = _us(st.t_start, origin)
        args = {
            "tokens": st.n_tokens,
            "decode": st.n_decode,
            "prefill": st.n_prefill_tokens,
            "seqs": st.n_seqs,
            "batch_limit": st.batch_limit,
            "decode_ms": round(st.decode_s * 1e3, 3),
            "ubatches": st.n_ubatches,
            "attended": st.n_attended,
            "parts": [
                {
                    "request": p.request_id,
                    "conversation": p.conversation_id,
                    "tokens": p.n_tokens,
                    "decode": p.is_decode,
                    "start": p.start,
                }
                | ({"image_tokens": p.image_tokens} if p.image_tokens else {})
                for p in st.parts
            ],
        }
        name = f"step: {st.n_seqs} seqs, {st.n_tokens} tok"
        if st.n_image_tokens:  # a picture's rows: a decode of their own before the tokens'
            args |= {"image_tokens": st.n_image_tokens, "image_decode_ms": round(st.image_s * 1e3, 3)}
            name += f" ({st.n_image_tokens} image)"
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "name": name,
                "cat": "step",
                "ts": ts,
                "dur": _us(st.t_end, st.t_start),
                "args": args,
            }
        )
        counter = {"tokens": st.n_tokens, "seqs": st.n_seqs, "batch_limit": st.batch_limit}
        events.append({"ph": "C", "pid": pid, "tid": tid, "name": f"batch ({track})", "ts": ts, "args": counter})
    return events


def _request_events(st: RequestStats, pid: int, tid: int, origin: float) -> list[dict]:
    """Waiting (submit to admit), prefill (admit to first token), decode (first to last token):
    each span whose two ends are known."""
    spans = (
        ("waiting", st.t_submit, st.t_admit),
        ("prefill", st.t_admit, st.t_first_token),
        ("decode", st.t_first_token, st.t_last_token),
    )
    args = {
        "request": st.request_id,
        "prompt_tokens": st.prompt_tokens,
        "cached_tokens": st.cached_tokens,
        "gen_tokens": st.gen_tokens,
        "preemptions": st.preemptions,
    }
    if st.images:
        args |= {"images": st.images, "image_tokens": st.image_tokens, "encode_ms": round(st.encode_s * 1e3, 3)}
    events = []
    for name, start, end in spans:
        if math.isnan(start) or math.isnan(end) or end < start:
            continue
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "name": name,
                "cat": "request",
                "ts": _us(start, origin),
                "dur": _us(end, start),
                "args": args,
            }
        )
    return events
