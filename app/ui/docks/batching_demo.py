"""Show batching: one prompt broadcast to the panes three times (sequential, static batches,
continuous batching), each pane asking a follow-up as soon as its reply ends. The replies are
greedy and of set lengths, the same in every run, so only the scheduling differs; then the three
step timelines side by side, each with its tok/s, under a verdict drawn from the measured times."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QStatusBar, QVBoxLayout, QWidget

from app.engine.errors import EngineError
from app.engine.events import FinishEvent
from app.engine.params import ServingMode
from app.engine.sampling.params import SamplingParams
from app.engine.stats import StepStats
from app.workspace.chat_store import Chat
from app.workspace.pane_params import PaneParams

from .step_timeline import StepTimeline

if TYPE_CHECKING:
    from app.client import EngineClient
    from app.workspace.session import PaneSession
    from app.workspace.workspace import Workspace

DEMO_PROMPT = "In three sentences: why is the sky blue?"
FOLLOW_UP = "Now say it in one sentence."
LONGEST_REPLY = 48  # tokens: pane i of n writes i/n of this, then (n - i + 1)/n of it as its follow-up
MODES = (
    (ServingMode.SEQUENTIAL, "Sequential", "one request at a time"),
    (ServingMode.STATIC, "Static", "a batch runs until its last reply ends"),
    (ServingMode.BATCHED, "Continuous", "every step refills the batch"),
)
SMALL_GAIN = 1.15  # continuous under this many times sequential's speed: the verdict says why
SAME_SHARE = 0.05  # two runs this close (of the slower's time) finished about together
SHORT_RUN_S = 2.0  # runs all shorter (a tiny model's) are told to a hundredth of a second, longer ones to a tenth
COMPUTE_BOUND = 0.6  # a token in a batch costing this share of one alone: the machine computes each in full
HINT = "Compare ▸ Show batching broadcasts one prompt three times and draws each run here."
DONE_MS = 30000  # how long the verdict stays in the status bar


class DemoStopped(Exception):
    """A run could not finish (a reply failed or was stopped): its times would compare nothing."""


@dataclass(frozen=True)
class Run:
    """One broadcast served in one mode: its steps and what it made."""

    label: str
    how: str
    steps: tuple[StepStats, ...]
    t_start: float
    seconds: float
    replies: int
    tokens: int  # generated, every reply's: the same in each run
    panes: dict[str, tuple[str, str]]  # the panes then: chat key -> (name, colour)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def caption(self) -> str:
        return f"{self.label}: {self.how}. {self.tok_s:.0f} tok/s, {self.seconds:.1f} s"


def reply_lengths(panes: int, longest: int = LONGEST_REPLY) -> list[tuple[int, int]]:
    """Each pane's two reply lengths: the first staggered (a static batch waits for its longest), the
    follow-up the rest, so every pane writes as much and continuous batching keeps the batch full."""
    share = max(1, longest // max(1, panes))
    return [(share * (i + 1), share * (panes - i)) for i in range(panes)]


def demo_sampling(max_tokens: int) -> SamplingParams:
    """Greedy, exactly `max_tokens` tokens, no drafting: the same reply in every mode."""
    return SamplingParams(temperature=0.0, repeat_penalty=1.0, max_tokens=max_tokens, ignore_eos=True, speculate=False)


@dataclass(frozen=True)
class _Kept:
    """A pane as the user left it, put back once the demo ends."""

    chat: Chat
    params: PaneParams
    draft: str

    def put_back(self, workspace: Workspace, index: int) -> None:
        # a chat with no messages lost its file and settings when its pane closed: give them back
        workspace.memory.set_pane_params(self.chat.chat_id, self.params)
        workspace.memory.set_draft(self.chat.chat_id, self.draft)
        workspace.add_pane(self.chat, index)


async def show_batching(
    client: EngineClient,
    workspace: Workspace,
    comparison: BatchingComparison,
    status_bar: QStatusBar,
    prompt: str = DEMO_PROMPT,
    longest: int = LONGEST_REPLY,
) -> list[Run]:
    """Broadcast `prompt` once in each mode, each time to fresh chats, then show the runs in
    `comparison` and the verdict in the status bar. The panes' chats and the serving mode are put back
    afterwards, also when a run fails; the demo's own chats are not kept."""
    mode = client.config.mode
    kept = [_Kept(s.chat, s.params, s.draft) for s in workspace.sessions]
    demo_chats: set[str] = set()
    runs: list[Run] = []

    def say(text: str, timeout_ms: int = 0) -> None:
        status_bar.showMessage(text, timeout_ms)
        comparison.show_phase(text)

    try:
        for number, (serving, label, how) in enumerate(MODES, 1):
            say(f"Show batching: {number}/{len(MODES)} {label.lower()}…")
            sessions = await _fresh_panes(workspace, demo_chats, number)
            await client.set_mode(serving)
            runs.append(await _run(client, sessions, prompt, reply_lengths(len(sessions), longest), label, how))
    except (EngineError, DemoStopped) as e:
        say(f"Show batching stopped: {e}", DONE_MS)
        return runs
    finally:
        await _put_back(workspace, kept, demo_chats)
        with contextlib.suppress(EngineError):  # an engine that stopped has no mode to put back
            await client.set_mode(mode)
    comparison.show_runs(runs)
    status_bar.showMessage(f"Show batching: {verdict(runs)}", DONE_MS)
    return runs


async def _fresh_panes(workspace: Workspace, demo_chats: set[str], run: int) -> list[PaneSession]:
    """A new chat in every pane, in place. Each run's system prompt differs from its first words, so
    no run reads its prompts from the cells an earlier run left."""
    for index, session in enumerate(list(workspace.sessions)):
        await _close(workspace, session, demo_chats)
        fresh = workspace.add_pane(None, index)
        if fresh is not None:
            demo_chats.add(fresh.key)
            fresh.set_params(fresh.params.with_(system_prompt=f"Run {run} of Show batching. You are a helpful assistant."))
    return list(workspace.sessions)


async def _close(workspace: Workspace, session: PaneSession, demo_chats: set[str]) -> None:
    await workspace.close_pane(session)
    if session.key in demo_chats and session.chat.messages:
        await workspace.delete_chat(session.key)


async def _put_back(workspace: Workspace, kept: list[_Kept], demo_chats: set[str]) -> None:
    for session in list(workspace.sessions):
        await _close(workspace, session, demo_chats)
    for index, pane in enumerate(kept):
        pane.put_back(workspace, index)
    workspace.said_in_list.emit("Show batching's chats were not kept; yours are back in their panes.")


async def _run(client: EngineClient, sessions: list[PaneSession], prompt: str, lengths, label: str, how: str) -> Run:
    t_start = time.monotonic()
    panes = {s.key: (s.chat.name, s.colour) for s in sessions}
    finals = await _two_turns(sessions, prompt, lengths)
    seconds = time.monotonic() - t_start
    steps = tuple(st for st in client.recent_steps(seconds + 1.0) if st.t_end > t_start)
    tokens = sum(final.stats.gen_tokens for final in finals)
    return Run(label, how, steps, t_start, seconds, len(finals), tokens, panes)


async def _two_turns(sessions: list[PaneSession], prompt: str, lengths: list[tuple[int, int]]) -> list[FinishEvent]:
    """Broadcast `prompt`; each pane asks FOLLOW_UP as soon as its reply ends: requests arriving
    while others still run, which a static batch makes wait and continuous batching takes at once.
    Returns every reply's final event, once every pane is done; raises DemoStopped when one failed."""
    loop = asyncio.get_running_loop()
    finals: dict[str, list[FinishEvent]] = {s.key: [] for s in sessions}
    all_done = asyncio.Event()
    failures: list[str] = []
    handlers = {}

    def follow_up(session: PaneSession) -> None:
        if not session.send(FOLLOW_UP):
            failures.append(f"“{session.chat.name}” did not take its follow-up")
            all_done.set()

    def ended(session: PaneSession, second: int, final: FinishEvent | None) -> None:
        if final is None or not final.ok:
            why = f"failed: {final.error}" if final is not None and final.error else "was stopped"
            failures.append(f"the reply in “{session.chat.name}” {why}")
            all_done.set()
            return
        finals[session.key].append(final)
        if len(finals[session.key]) == 1:
            session.sampling_override = demo_sampling(second)
            loop.call_soon(follow_up, session)  # once its reply's task is over
        elif all(len(f) == 2 for f in finals.values()):
            all_done.set()

    for session, (first, second) in zip(sessions, lengths):
        handlers[session] = lambda final, session=session, second=second: ended(session, second, final)
        session.reply_ended.connect(handlers[session])
        session.sampling_override = demo_sampling(first)
    try:
        if not all([session.send(prompt) for session in sessions]):
            raise DemoStopped("a pane did not take the prompt")
        await all_done.wait()
    finally:
        for session, handler in handlers.items():
            session.reply_ended.disconnect(handler)
    if failures:
        for session in sessions:
            session.stop()
        raise DemoStopped(failures[0])
    return [final for got in finals.values() for final in got]


# -- the verdict ---------------------------------------------------------------------------------


def verdict(runs: list[Run]) -> str:
    """One line from the measured times: how much sooner (or later) continuous batching finished than
    the others; and where it gained little, why, from the steps' own times."""
    sequential, static, continuous = runs
    digits = 1 if max(run.seconds for run in runs) >= SHORT_RUN_S else 2
    line = f"Continuous finished {_than(continuous, sequential, digits)}, {_than(continuous, static, digits)}."
    if sequential.seconds < SMALL_GAIN * continuous.seconds:
        line += " " + _why_little(sequential, continuous)
    return line


def _than(run: Run, other: Run, digits: int) -> str:
    ahead = other.seconds - run.seconds
    name, apart = other.label.lower(), f"{abs(ahead):.{digits}f} s"
    if abs(ahead) < SAME_SHARE * max(run.seconds, other.seconds):
        return f"about when {name} did ({apart} apart)"
    return f"{apart} {'sooner' if ahead > 0 else 'later'} than {name}"


def _why_little(sequential: Run, continuous: Run) -> str:
    """Why batching gained little: what a step of one token and a step of a full batch cost here."""
    widest = max((st.n_decode for st in continuous.steps), default=0)
    one, many = _decode_step_s(sequential, 1), _decode_step_s(continuous, widest)
    if one is None or many is None or widest < 2:
        return "Batching gained little in this run."
    share = many / (widest * one)
    costs = f"a step of {widest} tokens took {_ms(many)}, of 1 token {_ms(one)}"
    if share < COMPUTE_BOUND:
        return f"Batching gained little in this run, though {costs}."
    return (
        f"Little gain on this machine: {costs}, so a token in a batch costs {share:.0%} of one alone. "
        "Batching pays where a step of many tokens costs about what a step of one does, as on a GPU."
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.{0 if seconds >= 0.01 else 1}f} ms"


def _decode_step_s(run: Run, width: int) -> float | None:
    """The median time of the run's steps that only generated, `width` tokens each."""
    times = [st.step_s for st in run.steps if st.n_decode == width and st.n_prefill_tokens == 0]
    return statistics.median(times) if times else None


# -- the dock ------------------------------------------------------------------------------------


def decode_top(runs: list[Run]) -> float:
    """The y axis's top: the widest step's generated tokens and sequences with room above, so a
    prompt's chunk is cut rather than flattening the decode columns."""
    band = max((max(st.n_decode, st.n_seqs) for run in runs for st in run.steps), default=1)
    return float(band + max(1, band // 4))


def key_text(runs: list[Run], top: float) -> str:
    """What the columns mean and that the runs wrote the same, from the runs themselves."""
    replies = runs[0].replies if runs else 0
    tokens = runs[0].tokens if runs else 0
    parts = [
        "Solid: generated tokens",
        "pale: a prompt's chunk (cut at the top, its tokens written on it)",
        "dotted: sequences in the step",
    ]
    if any(st.batch_limit <= top for run in runs for st in run.steps):
        parts.append("dashed: the batch limit")
    return (
        f"Each run wrote the same {replies} replies, {tokens} tokens (greedy, of set lengths), so only the "
        f"scheduling differs. A column is a step, as wide as its time, as tall as its tokens, by pane. " + " · ".join(parts) + "."
    )


class BatchingComparison(QWidget):
    """The verdict over the runs' step timelines side by side, on one time scale, each captioned
    with its tok/s; what the columns mean under them."""

    sigRunsShown = Signal()  # the window makes room for them

    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: list[Run] = []
        self.timelines: list[StepTimeline] = []
        self.captions: list[QLabel] = []
        self._columns: list[QWidget] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.summary = QLabel(HINT)  # the hint, the phase running, then the verdict
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        self._row = QHBoxLayout()
        layout.addLayout(self._row, 1)
        self.key = QLabel()
        self.key.setWordWrap(True)
        self.key.hide()
        layout.addWidget(self.key)

    def show_phase(self, text: str) -> None:
        self.summary.setStyleSheet("")
        self.summary.setText(text)

    def show_runs(self, runs: list[Run]) -> None:
        for widget in self._columns:
            widget.setParent(None)
        self.runs, self.timelines, self.captions, self._columns = list(runs), [], [], []
        span = max((run.seconds for run in runs), default=1.0)
        for run in runs:
            column = QVBoxLayout()
            column.setContentsMargins(0, 0, 0, 0)
            timeline = StepTimeline(lambda _seconds, run=run: run.steps, lambda run=run: run.panes, key=False)
            timeline.show_run(run.steps, run.t_start, span, run.label)
            caption = QLabel(run.caption)
            caption.setWordWrap(True)
            column.addWidget(timeline, 1)
            column.addWidget(caption)
            holder = QWidget()
            holder.setLayout(column)
            self._row.addWidget(holder, 1)
            self.timelines.append(timeline)
            self.captions.append(caption)
            self._columns.append(holder)
        top = decode_top(runs)
        for timeline in self.timelines:  # one scale for all three: heights compare at a glance
            timeline.clip_at(top)
        self.summary.setStyleSheet("font-weight: bold")
        self.summary.setText(verdict(runs) if len(runs) == len(MODES) else HINT)
        self.key.setText(key_text(runs, top))
        self.key.show()
        self.sigRunsShown.emit()
