"""Show batching: one prompt broadcast to the panes three times (sequential, static batches,
continuous batching), each pane asking a follow-up as soon as its reply ends, then the three step
timelines side by side, each with its tok/s."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.engine.params import ServingMode
from app.engine.stats import StepStats

from .step_timeline import StepTimeline

if TYPE_CHECKING:
    from .main_window import MainWindow

DEMO_PROMPT = "In three sentences: why is the sky blue?"
FOLLOW_UP = "Now say it in one sentence."
MODES = (
    (ServingMode.SEQUENTIAL, "Sequential", "one request at a time"),
    (ServingMode.STATIC, "Static batching", "a batch runs until its last reply ends"),
    (ServingMode.BATCHED, "Continuous batching", "every step refills the batch"),
)


@dataclass(frozen=True)
class Run:
    """One broadcast served in one mode: its steps and what it made."""

    label: str
    how: str
    steps: tuple[StepStats, ...]
    t_start: float
    seconds: float
    replies: int
    panes: dict[str, tuple[str, str]]  # the panes then: chat key -> (name, colour)

    @property
    def tokens(self) -> int:
        """Tokens generated: each step's decode tokens, and each reply's first (drawn after its prompt)."""
        return sum(st.n_decode for st in self.steps) + self.replies

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def caption(self) -> str:
        return f"{self.label}: {self.how}. {self.tok_s:.0f} tok/s, {self.seconds:.1f} s"


async def show_batching(window: MainWindow, prompt: str = DEMO_PROMPT) -> list[Run]:
    """Broadcast `prompt` once in each mode, each time to fresh chats (the panes' chats stay in the
    chat list), then show the runs in the window's comparison dock; the serving mode is put back."""
    client, workspace = window.client, window.workspace
    mode = client.config.mode
    runs: list[Run] = []
    try:
        for serving, label, how in MODES:
            await workspace.fresh_chats()
            await client.set_mode(serving)
            t_start = time.monotonic()
            panes = window.pane_names()
            replies = await _two_turns(workspace, prompt)
            seconds = time.monotonic() - t_start
            steps = tuple(st for st in client.recent_steps(seconds + 1.0) if st.t_end > t_start)
            runs.append(Run(label, how, steps, t_start, seconds, replies, panes))
    finally:
        await client.set_mode(mode)
    window.show_batching_runs(runs)
    return runs


async def _two_turns(workspace, prompt: str) -> int:
    """Broadcast `prompt`; each pane asks FOLLOW_UP as soon as its reply ends: requests arriving
    while others still run, which a static batch makes wait and continuous batching takes at once.
    Returns the requests sent, once every pane is done."""
    loop = asyncio.get_running_loop()
    sessions = [s for s in workspace.sessions if not s.is_busy]
    turns = dict.fromkeys((s.key for s in sessions), 0)
    all_done = asyncio.Event()
    handlers = {}
    follow_ups = 0

    def ended(session, final) -> None:
        nonlocal follow_ups
        turns[session.key] += 1
        if turns[session.key] == 1 and final is not None and final.ok:
            loop.call_soon(session.send, FOLLOW_UP)  # once its reply's task is over
            follow_ups += 1
        else:
            turns[session.key] = 2
        if all(n >= 2 for n in turns.values()):
            all_done.set()

    for session in sessions:
        handlers[session] = lambda final, session=session: ended(session, final)
        session.reply_ended.connect(handlers[session])
    try:
        sent = sum(session.send(prompt) for session in sessions)
        if sent:
            await all_done.wait()
    finally:
        for session, handler in handlers.items():
            session.reply_ended.disconnect(handler)
    return sent + follow_ups


class BatchingComparison(QWidget):
    """The runs' step timelines side by side, on one time scale, each captioned with its tok/s."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.timelines: list[StepTimeline] = []
        self.captions: list[QLabel] = []
        self._columns: list[QWidget] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(2, 2, 2, 2)
        self.hint = QLabel("Compare ▸ Show batching broadcasts one prompt three times and draws each run here.")
        self.hint.setWordWrap(True)
        self._row.addWidget(self.hint)

    def show_runs(self, runs: list[Run]) -> None:
        for widget in (self.hint, *self._columns):
            widget.setParent(None)
        self.timelines, self.captions, self._columns = [], [], []
        span = max((run.seconds for run in runs), default=1.0)
        for run in runs:
            column = QVBoxLayout()
            timeline = StepTimeline(lambda _seconds, run=run: run.steps, lambda run=run: run.panes)
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
        top = max((t.plot.getViewBox().viewRange()[1][1] for t in self.timelines), default=1.0)
        for timeline in self.timelines:  # one scale for all three: heights compare at a glance
            timeline.plot.setYRange(0, top, padding=0)
