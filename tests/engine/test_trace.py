"""The Chrome trace of steps and requests (app/engine/trace.py), the step timeline's columns
(app/workspace/step_columns.py), and `bench --trace`."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from helpers import Started, run

from app.cli import main as cli_main
from app.engine.sampling.params import SamplingParams
from app.engine.stats import RequestStats, StepPart, StepStats
from app.engine.trace import NO_CONVERSATION, STEP_TRACK, trace_document, trace_events, write_trace
from app.workspace.step_columns import PartKind, StepColumns, step_summary


def _step(t_end: float, parts: tuple[StepPart, ...], step_s: float = 0.01, limit: int = 4, ubatches: int = 1) -> StepStats:
    return StepStats(
        t_end=t_end,
        n_tokens=sum(p.n_tokens for p in parts),
        n_seqs=len(parts),
        n_decode=sum(p.is_decode for p in parts),
        n_prefill_tokens=sum(p.n_tokens for p in parts if not p.is_decode),
        step_s=step_s,
        decode_s=step_s / 2,
        batch_limit=limit,
        parts=parts,
        n_ubatches=ubatches,
        n_attended=sum(p.n_tokens * (p.start + p.n_tokens) for p in parts if not p.is_decode),
    )


STEPS = (
    _step(10.01, (StepPart("r1", "a", 5, False),)),
    _step(10.02, (StepPart("r1", "a", 1, True, start=5), StepPart("r2", "b", 7, False, start=3)), ubatches=2),
    _step(10.03, (StepPart("r1", "a", 1, True), StepPart("r2", "b", 1, True))),
)


def _request(rid: str, conversation: str | None, submit: float, admit: float, first: float, last: float) -> RequestStats:
    return RequestStats(rid, conversation, t_submit=submit, t_admit=admit, t_first_token=first, t_last_token=last)


def _by_track(events: list[dict]) -> dict[str, list[dict]]:
    names = {ev["tid"]: ev["args"]["name"] for ev in events if ev["ph"] == "M" and ev["name"] == "thread_name"}
    tracks: dict[str, list[dict]] = {name: [] for name in names.values()}
    for ev in events:
        if ev["ph"] == "X":
            tracks[names[ev["tid"]]].append(ev)
    return tracks


@pytest.mark.unit
def test_steps_and_requests_become_tracks_of_complete_events_in_microseconds(tmp_path):
    requests = [
        _request("r1", "a", 10.0, 10.0, 10.02, 10.03),
        _request("r2", "b", 10.0, 10.01, 10.03, 10.03),
        _request("r3", None, 10.0, math.nan, math.nan, math.nan),  # refused before admission: no span
    ]
    path = tmp_path / "trace.json"
    write_trace(str(path), trace_events({STEP_TRACK: STEPS}, requests, track_names={"a": "pane 1: chat"}))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "batch playground"}} in events
    tracks = _by_track(events)
    assert list(tracks) == [STEP_TRACK, "pane 1: chat", "b", NO_CONVERSATION]
    steps = tracks[STEP_TRACK]
    assert [(ev["ts"], ev["dur"]) for ev in steps] == [(0.0, 10000.0), (10000.0, 10000.0), (20000.0, 10000.0)]
    assert steps[1]["args"] | {"parts": None} == {
        "tokens": 8, "decode": 1, "prefill": 7, "seqs": 2, "batch_limit": 4, "decode_ms": 5.0, "parts": None,
        "ubatches": 2, "attended": 7 * (3 + 7),
    }  # fmt: skip
    assert steps[1]["args"]["parts"] == [
        {"request": "r1", "conversation": "a", "tokens": 1, "decode": True, "start": 5},
        {"request": "r2", "conversation": "b", "tokens": 7, "decode": False, "start": 3},
    ]
    pane = tracks["pane 1: chat"]
    assert [(ev["name"], ev["ts"], ev["dur"]) for ev in pane] == [
        ("waiting", 0.0, 0.0),
        ("prefill", 0.0, 20000.0),
        ("decode", 20000.0, 10000.0),
    ]
    assert [ev["name"] for ev in tracks["b"]] == ["waiting", "prefill", "decode"]
    assert tracks[NO_CONVERSATION] == []  # its track is named, its spans unknown
    counters = [ev for ev in events if ev["ph"] == "C"]
    assert [ev["args"] for ev in counters][1] == {"tokens": 8, "seqs": 2, "batch_limit": 4}


@pytest.mark.unit
def test_a_step_column_stacks_its_parts_in_batch_order_and_forgets_the_old():
    columns = StepColumns(keep_s=60)
    assert columns.add(STEPS) == 3 and columns.add(STEPS) == 0  # each step taken once
    assert columns.keys == ["a", "b"]
    x0, w, y0, h = columns.rects("b", is_decode=False)
    assert (x0.tolist(), w.tolist(), y0.tolist(), h.tolist()) == ([10.01], [0.01], [1.0], [7.0])  # above a's token
    x0, _, y0, h = columns.rects("a", is_decode=True)
    assert x0.tolist() == [10.01, 10.02] and y0.tolist() == [0, 0] and h.tolist() == [1, 1]
    assert columns.rects("a", True, since=10.025)[0].tolist() == [10.02]
    assert columns.step_at(10.015) is STEPS[1] and columns.step_at(9.0) is None
    text = step_summary(STEPS[1], {"a": "first pane"})
    assert "8 tokens: 1 decode, 7 prompt" in text and "2 sequences of a limit of 4: 2 idle" in text
    assert "first pane: 1 decode" in text and "b: 7 prompt chunk" in text
    columns.add([_step(100.0, (StepPart("r9", "c", 1, True),))])
    assert list(columns.steps) == [columns.step_at(99.995)] and columns.keys == ["c"]


@pytest.mark.unit
def test_a_pictures_rows_are_a_rectangle_of_their_own_below_the_text_after_them():
    parts = (StepPart("r1", "a", 1, True), StepPart("r2", "b", 20, False, image_tokens=16))
    step = _step(10.05, parts)
    step = StepStats(**{**step.__dict__, "n_image_tokens": 16, "image_s": 0.002})
    columns = StepColumns(keep_s=60)
    columns.add([step])
    _, _, y0, h = columns.kind_rects("b", PartKind.IMAGE)
    assert (y0.tolist(), h.tolist()) == ([1.0], [16.0])  # above a's token, as decoded: first
    _, _, y0, h = columns.rects("b", is_decode=False)
    assert (y0.tolist(), h.tolist()) == ([17.0], [4.0])  # the text after it
    text = step_summary(step, {})
    assert "of which 16 image (2.0 ms, a decode of their own)" in text and "b: 20 prompt chunk, 16 of them a picture's" in text


@pytest.mark.tiny
def test_a_trace_of_the_engine_matches_its_steps_and_gives_each_request_three_spans(tiny_config):
    async def scenario():
        async with Started(tiny_config) as client:
            params = SamplingParams(temperature=1.0, seed=1, max_tokens=12, ignore_eos=True)
            finals = await asyncio.gather(
                *(client.complete([{"role": "user", "content": f"hi {i}"}], params, conversation_id=f"c{i}") for i in range(3))
            )
            steps = await client.call(lambda engine: engine.figures.steps.since())
            return [f.stats for f in finals], steps

    requests, steps = run(scenario())
    doc = json.loads(json.dumps(trace_document(trace_events({STEP_TRACK: steps}, requests))))
    tracks = _by_track(doc["traceEvents"])
    origin = min(min(st.t_start for st in steps), min(st.t_submit for st in requests))  # time zero: the earliest
    assert len(tracks[STEP_TRACK]) == len(steps)
    for ev, st in zip(tracks[STEP_TRACK], steps, strict=True):
        assert ev["ts"] == pytest.approx((st.t_start - origin) * 1e6, abs=1) and ev["dur"] == pytest.approx(
            st.step_s * 1e6, abs=1
        )
        assert (ev["args"]["tokens"], ev["args"]["seqs"], ev["args"]["decode"]) == (st.n_tokens, st.n_seqs, st.n_decode)
        assert [p["request"] for p in ev["args"]["parts"]] == [p.request_id for p in st.parts]
    for st in requests:
        assert [ev["name"] for ev in tracks[st.conversation_id]] == ["waiting", "prefill", "decode"]
        decoded = sum(p.n_tokens for step in steps for p in step.parts if p.request_id == st.request_id and p.is_decode)
        assert decoded == st.gen_tokens - 1  # the last token drawn is never decoded


@pytest.mark.tiny
def test_bench_writes_a_trace_of_each_run(tiny_model_path, tmp_path):
    path = tmp_path / "bench-trace.json"
    args = ["bench", "--model", tiny_model_path, "--sweep", "1,2", "--max-tokens", "6", "--ignore-eos", "--threads", "2"]
    assert cli_main([*args, "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    processes = [ev["args"]["name"] for ev in events if ev["name"] == "process_name"]
    assert processes == ["one sequence, 1 parallel", "continuous + KV reuse, 2 parallel"]
    second = [ev for ev in events if ev["pid"] == 2]
    tracks = _by_track(second)
    assert list(tracks) == [STEP_TRACK, "bench-0", "bench-1"]
    assert all([ev["name"] for ev in tracks[f"bench-{i}"]] == ["waiting", "prefill", "decode"] for i in range(2))
    assert sum(ev["args"]["decode"] for ev in tracks[STEP_TRACK]) == 2 * 5  # 6 tokens each, the last not decoded
