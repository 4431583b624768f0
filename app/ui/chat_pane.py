"""One chat pane: header, transcript, live readout, input and buttons; streams replies from the engine
or from a remote OpenAI-compatible endpoint.

Streamed text is buffered here and shown when the window calls `flush` on every pane at once (soon
after text arrives, 25 times a second at most), so eight panes cost the GUI one paint pass rather
than one per token. A streaming reply is saved every two seconds, so a kill loses only its last ones.
"""

from __future__ import annotations

import asyncio
import html
import math
import time
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCursor, QKeyEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStyle,
    QToolButton,
    QVBoxLayout,
)

from app.client import EngineClient, new_request_id
from app.engine.errors import EngineError
from app.engine.events import FinishEvent, FinishReason, TokenEvent, refused
from app.engine.params import SamplingParams
from app.engine.probs import TokenChoice, TokenProbs
from app.remote import RemoteClient
from app.workspace.chat_store import NOTICE, Chat
from app.workspace.metrics import MetricsStore
from app.workspace.pane_params import PaneParams

from . import theme
from .dialogs import export_with_dialog
from .pane_params import PaneParamsEditor
from .readout import Readout
from .transcript import Transcript

MODEL_CHARS = 9  # of a model's name shown in the pane's header: its end, where the quantization is
CHECKPOINT_MS = 2000  # a streaming reply is saved this often: a kill or a power cut loses at most this much
READOUT_LEGEND = "TTFT: time to the first token\nKV hit: the chat's prompt found in the KV cache\nctx: tokens in context"


class MessageEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line, Escape stops the reply."""

    submitted = Signal()
    stopRequested = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.stopRequested.emit()
            return
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatPane(QFrame):
    sigChatChanged = Signal(object)  # Chat: save it
    sigParamsChanged = Signal(object)  # ChatPane: its PaneParams changed
    sigReplyFinished = Signal(object)  # FinishEvent or None (the task was cancelled)
    sigCloseRequested = Signal(object)  # ChatPane
    sigCopySettings = Signal(object)  # ChatPane: give its settings to every pane
    sigTextReceived = Signal()  # streamed text waits to be shown: the window flushes the panes soon
    sigExported = Signal(object)  # Path: the chat was exported there (the window says so)
    sigBranch = Signal(object, object)  # ChatPane, Branch: go on from another token in a new pane

    def __init__(self, chat: Chat, params: PaneParams, colour: str, client: EngineClient, metrics: MetricsStore, parent=None):
        super().__init__(parent)
        self.chat, self.colour, self.client, self.metrics = chat, colour, client, metrics
        self.metrics.add_pane(chat.chat_id)
        self._task: asyncio.Task | None = None  # the running reply
        self._tasks: set[asyncio.Task] = set()  # every task started here, held until done: the loop holds them weakly
        self._request_id: str | None = None
        self._remote: RemoteClient | None = None  # this pane's connection to its endpoint, if it has one
        self._source: EngineClient | RemoteClient = client  # where the running reply comes from
        self._received: list[str] = []  # the reply so far
        self._flushed = 0  # how many of those the transcript shows
        self.sampling_override: SamplingParams | None = None  # exact params instead of the sliders (benchmarks)
        self.measure_logprobs = False  # the replies' log-probabilities are wanted (a fan-out compares them)
        self.reply_probs: list[TokenProbs] = []  # the running or last reply's tokens, how likely each was
        self._prefix = NO_PREFIX  # what the running reply goes on from (a branch)
        self.branch_menu: QMenu | None = None  # the last menu of rivals shown
        self._checkpoint_timer = QTimer(self, interval=CHECKPOINT_MS, timeout=self._checkpoint)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setObjectName("chatPane")
        border = theme.current().border.name()
        self.setStyleSheet(f"#chatPane {{ border: 1px solid {border}; border-top: 3px solid {colour}; }}")
        self._build(params)
        self.transcript.show_messages(chat.messages)

    # -- layout --------------------------------------------------------------------------------

    def _build(self, params: PaneParams) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(3)
        layout.addLayout(self._header())
        self.params_editor = PaneParamsEditor(params)
        self.params_editor.paramsChanged.connect(self._on_params_changed)
        self.params_editor.copyToAllRequested.connect(lambda: self.sigCopySettings.emit(self))
        self._show_name(params)
        # in a pane too small for them the settings scroll, rather than push the window past the screen
        self.params_area = QScrollArea()
        self.params_area.setWidgetResizable(True)
        self.params_area.setFrameShape(QFrame.Shape.NoFrame)
        self.params_area.setWidget(self.params_editor)
        self.params_area.setVisible(False)
        layout.addWidget(self.params_area)
        self.transcript = Transcript()
        self.transcript.show_probs = params.show_probs
        self.transcript.completion = params.completion
        self.transcript.sigTokenClicked.connect(self._offer_branch)
        layout.addWidget(self.transcript, 1)
        self.input = MessageEdit()
        self._show_mode(params)
        self.input.setFixedHeight(44)
        self.input.submitted.connect(self._on_send)
        self.input.stopRequested.connect(self.stop)
        layout.addWidget(self.input)
        layout.addLayout(self._buttons())

    def _header(self) -> QHBoxLayout:
        row = QHBoxLayout()
        swatch = QLabel()
        swatch.setFixedSize(12, 12)
        swatch.setStyleSheet(f"background: {self.colour}; border-radius: 6px;")
        self.name_label = QLabel()
        self.name_label.setMinimumWidth(40)  # a long chat name is cut rather than widening the pane; "Pane 1" is whole
        self.readout = Readout(legend=READOUT_LEGEND)
        # the model it talks to, when more than one is loaded
        self.model_combo = QComboBox(toolTip="The model this pane talks to (load more in the Model library)")
        # narrow, so eight panes keep their readouts: the list shows the whole names
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setMinimumContentsLength(MODEL_CHARS - 3)  # shorter still in a narrow pane, elided
        self.model_combo.setVisible(False)
        self.model_combo.currentIndexChanged.connect(self._on_model_picked)
        # bool properties are set with setters: PySide6 6.12 mis-counts references of bool constructor kwargs
        self.settings_button = QToolButton(text="⚙", toolTip="Sampling settings")
        self.settings_button.setCheckable(True)
        self.settings_button.toggled.connect(self.params_editor_visible)
        self.close_button = QToolButton(text="✕", toolTip="Close this pane (stops its reply; the chat stays in the Chats list)")
        self.close_button.clicked.connect(lambda: self.sigCloseRequested.emit(self))
        for w in (swatch, self.name_label):
            row.addWidget(w)
        row.addWidget(self.readout, 1)
        for w in (self.model_combo, self.settings_button, self.close_button):
            row.addWidget(w)
        self.refresh_readout()
        return row

    def _buttons(self) -> QHBoxLayout:
        """Send, which is Stop while a reply runs, in words; the rarer actions as icons, so the row
        fits eight panes on a laptop screen."""
        row = QHBoxLayout()
        self.send_button = _text_button("Send", "Send the message (Enter)", self._on_send)
        self.stop_button = _text_button("Stop", "Stop the reply", self.stop)
        self.stop_button.setVisible(False)
        icons = QStyle.StandardPixmap  # the desktop theme's view-refresh, edit-clear and document-save
        self.regenerate_button = _icon_button(icons.SP_BrowserReload, "Regenerate", "Regenerate the last reply", self.regenerate)
        self.clear_button = _icon_button(icons.SP_DialogResetButton, "Clear", "Clear the chat", self.clear)
        self.export_button = _icon_button(icons.SP_DialogSaveButton, "Export…", "Export the chat to a file…", self._on_export)
        for b in (self.send_button, self.stop_button):
            row.addWidget(b)
        row.addStretch(1)
        for b in (self.regenerate_button, self.clear_button, self.export_button):
            row.addWidget(b)
        return row

    def show_models(self, names: list[str]) -> None:
        """The loaded models to pick from (the first is the default); a pane whose model is gone goes
        on with the default."""
        if self.params.model and self.params.model not in names:
            self.params_editor.set_params(self.params.with_(model=""))
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        for name in names:  # the list shows each name whole; the closed box its short form
            self.model_combo.addItem(name, name)
        self._show_model(self.params)
        self.model_combo.blockSignals(False)
        self.model_combo.setVisible(len(names) > 1 and self.params.endpoint() is None)

    def _on_model_picked(self, _index: int) -> None:
        name = self.model_combo.currentData()
        if name and name != (self.params.model or self.model_combo.itemData(0)):
            self.params_editor.set_params(self.params.with_(model=name))

    def _show_model(self, params: PaneParams) -> None:
        """The picker on the pane's model; the box shows the end of a long name (where the
        quantization is), the list and the tooltip the whole."""
        combo = self.model_combo
        index = max(combo.findData(params.model or combo.itemData(0)), 0)
        combo.setCurrentIndex(index)
        name = combo.itemData(index) or ""
        shown = name if len(name) <= MODEL_CHARS else "…" + name[-(MODEL_CHARS - 1) :]
        combo.setItemText(index, shown)
        for i in range(combo.count()):
            if i != index:
                combo.setItemText(i, combo.itemData(i))
        combo.setToolTip(f"{name}: the model this pane talks to (load more in the Model library)")

    @property
    def model(self) -> str | None:
        """The loaded model this pane talks to (None: the default)."""
        return self.params.model or None

    def params_editor_visible(self, visible: bool) -> None:
        self.params_area.setVisible(visible)

    def _on_params_changed(self, params: PaneParams) -> None:
        self._show_name(params)
        if self.model_combo.count():
            self.model_combo.blockSignals(True)
            self._show_model(params)
            self.model_combo.blockSignals(False)
        self._show_mode(params)
        drawn = (self.transcript.show_probs, self.transcript.completion)
        if (params.show_probs, params.completion) != drawn:
            self.transcript.show_probs, self.transcript.completion = params.show_probs, params.completion
            if not self.is_busy:  # a streaming reply is drawn anew when it ends
                self.transcript.redraw(self.chat.messages)
        self.sigParamsChanged.emit(self)

    def _show_mode(self, params: PaneParams) -> None:
        if params.completion:
            self.input.setPlaceholderText("Text to continue (Enter: the model goes on; empty: it goes on from where it stands)")
        else:
            self.input.setPlaceholderText("Message (Enter sends, Shift+Enter new line)")

    def rename(self, name: str) -> None:
        self.chat.rename(name)
        self._show_name(self.params)
        self.sigChatChanged.emit(self.chat)

    def _show_name(self, params: PaneParams) -> None:
        """The pane's name, and the host it chats with when that is not the local engine."""
        endpoint = params.endpoint()
        where = f" → {urlsplit(endpoint.api_url).netloc or endpoint.api_url}" if endpoint else ""
        marks = ("&nbsp;⬆" if params.high_priority else "") + ("&nbsp;§" if params.system_prompt.strip() else "")
        marks += "&nbsp;✎" if params.completion else ""
        self.name_label.setText(f"<b>{html.escape(self.chat.name)}</b>{marks}{where}")
        tips = [self.chat.name]
        if params.high_priority:
            tips.append("⬆ high priority: served first under the priority policy")
        if params.system_prompt.strip():
            tips.append(f"§ system prompt: {params.system_prompt.strip()[:200]}")
        if params.completion:
            tips.append("✎ completion mode: the chat is one text the model continues")
        self.name_label.setToolTip("\n".join(tips))

    # -- state ---------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self.chat.chat_id

    @property
    def params(self) -> PaneParams:
        return self.params_editor.params

    @property
    def is_blank(self) -> bool:
        """No messages and nothing typed: closing the pane or giving it another chat loses nothing."""
        return not self.chat.messages and not self.input.toPlainText().strip()

    @property
    def is_busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def refresh_readout(self) -> None:
        m = self.metrics.panes.get(self.key)
        if m is None:
            return
        ttft = "–" if math.isnan(m.ttft_s) else f"{1000 * m.ttft_s:.0f} ms"
        hit = "–" if math.isnan(m.kv_hit_rate) else f"{100 * m.kv_hit_rate:.0f}%"
        rate = f"{m.tok_s:.0f} tok/s"
        self.readout.setText(
            f"{rate} · TTFT {ttft} · KV hit {hit} · ctx {m.context_tokens}",
            f"{rate} · {ttft} · hit {hit}",  # narrow panes: the figures that tell most, first
            f"{rate} · {ttft}",
            rate,
        )

    # -- actions -------------------------------------------------------------------------------

    def send(self, text: str) -> bool:
        """Add a user turn and start the reply; False while a reply is still running. In completion
        mode the text is added as typed, and nothing typed lets the model go on with the text."""
        if self.is_busy:
            return False
        if self.params.completion and (text or self.chat.messages):
            if text:
                self.chat.add("user", text)
        elif text.strip():
            self.chat.add("user", text.strip())
        else:
            return False
        self._start_reply()
        return True

    def stop(self) -> None:
        if self.is_busy and self._request_id:
            self._source.cancel(self._request_id)

    def regenerate(self) -> None:
        if not self.is_busy and self.chat.drop_last_reply() is not None:
            self._start_reply()

    def clear(self) -> None:
        self._spawn(self._clear())

    async def _clear(self) -> None:
        await self.shutdown()  # a running reply ends first, so it cannot land in the cleared chat
        self.chat.clear()
        self.metrics.panes[self.key].context_tokens = 0
        self.transcript.show_messages([])
        self.sigChatChanged.emit(self.chat)

    async def shutdown(self) -> None:
        """Cancel the running reply and wait until the engine has let it go."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._remote is not None:
            await self._remote.close()
            self._remote = None

    def _on_send(self) -> None:
        if self.send(self.input.toPlainText()):
            self.input.clear()

    def _on_export(self) -> None:
        written = export_with_dialog(self, self.chat)
        if written is not None:
            self.sigExported.emit(written)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- one reply -----------------------------------------------------------------------------

    def _start_reply(self, prefix: Branch | None = None) -> None:
        self.chat.model = _model_name(self.client, self.params)
        self.sigChatChanged.emit(self.chat)
        request_id = self._request_id = new_request_id()
        self.metrics.track(request_id, self.key, time.monotonic())  # now, so the readout resets at once
        self._prefix = prefix or NO_PREFIX
        self._task = self._spawn(self._reply(request_id))

    def go_on_from(self, branch: Branch) -> None:
        """Start this pane's reply from `branch`'s tokens (the chat holds the turns before it)."""
        self._start_reply(branch)

    async def _reply(self, request_id: str) -> None:
        messages = self.chat.for_model(self.params.system_prompt)
        self.transcript.begin_reply(self.chat.messages)
        self._set_busy(True)
        final: FinishEvent | None = None
        self._checkpoint_timer.start()
        self.reply_probs = list(self._prefix.probs)
        if self._prefix.text:
            self._received.append(self._prefix.text)
            self.sigTextReceived.emit()
        try:
            params = self._sampling()
            source = self._source = self._source_for(self.params)
            local = {"priority": self.params.priority} if source is self.client else {}  # a remote has no priorities
            if self._prefix.tokens:
                local["reply_prefix"] = self._prefix.tokens
            if source is self.client:
                local["model"] = self.model
            if self.params.completion and source is self.client:  # one text to continue, no chat template
                messages, local["prompt"] = None, self.chat.as_text(self.params.system_prompt)
            stream = source.generate(messages, params, conversation_id=self.key, request_id=request_id, **local)
            async with aclosing(stream):  # leaving early closes the stream, which cancels the request
                async for event in stream:
                    if source is not self.client:  # the engine's listener feeds the plots only its own events
                        self.metrics.on_events([event])
                    if isinstance(event, TokenEvent):
                        if event.probs is not None:
                            self.reply_probs.append(event.probs)
                        if self._flushed == len(self._received):  # the first text since the last flush
                            self.sigTextReceived.emit()
                        self._received.append(event.text)
                    else:
                        final = event
        except EngineError as e:  # the engine is not running: the window's banner offers a restart
            final = refused(request_id, str(e))
        finally:
            self._end_reply(final)

    def _sampling(self) -> SamplingParams:
        params = self.sampling_override or self.params.sampling()
        if self.measure_logprobs and params.n_probs is None:
            params = params.with_(n_probs=0)  # the drawn token's probability only
        return params

    @property
    def reply_logprobs(self) -> list[float]:
        """The log-probability of each token of the running or last reply, when they were asked for."""
        return [p.chosen.logprob for p in self.reply_probs]

    def _offer_branch(self, turn: int, index: int) -> None:
        """A menu of the token's rivals; the one picked goes on in a new pane (the window makes it)."""
        text, probs = self.transcript.token_probs[turn]
        menu = QMenu(self)
        for rival in probs[index].top:
            if rival.token == probs[index].chosen.token:
                continue
            label = f"Branch from “{rival.text}”  ({100 * math.exp(rival.logprob):.1f}%)"
            branch = Branch.at(probs, index, rival, self.chat.messages[:turn])
            menu.addAction(label, lambda branch=branch: self.sigBranch.emit(self, branch))
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.branch_menu = menu
        menu.popup(QCursor.pos())

    def _source_for(self, params: PaneParams) -> EngineClient | RemoteClient:
        endpoint = params.endpoint()
        if endpoint is None:
            return self.client
        if self._remote is None or self._remote.endpoint != endpoint:
            if self._remote is not None:
                self._spawn(self._remote.close())
            self._remote = RemoteClient(endpoint)
        return self._remote

    def flush(self) -> None:
        """Show the text received since the last flush (the window calls this for every pane at once)."""
        if self._flushed < len(self._received):
            self.transcript.append_reply("".join(self._received[self._flushed :]))
            self._flushed = len(self._received)

    def _checkpoint(self) -> None:
        """Save the reply so far with the chat (marked as streaming in its file)."""
        streamed = "".join(self._received)
        if streamed != (self.chat.streaming or ""):
            self.chat.streaming = streamed
            self.sigChatChanged.emit(self.chat)

    def _end_reply(self, final: FinishEvent | None) -> None:
        self._checkpoint_timer.stop()
        self.chat.streaming = None
        streamed = "".join(self._received)
        self._received, self._flushed = [], 0
        self._set_busy(False)
        if final is not None and final.reason is FinishReason.ERROR:
            error = final.error or "the engine could not answer"
            if streamed.strip():  # what was streamed stays, marked as cut
                self.chat.add_cut_reply(streamed, f"cut short: {error}")
            else:
                self._drop_failed_turn(error)
        else:
            text = self._prefix.text + final.text if final is not None else streamed
            if text.strip():
                self.chat.add("assistant", text)
                if self.reply_probs:  # drawn token by token when the pane shows probabilities
                    self.transcript.token_probs[len(self.chat.messages) - 1] = (text, self.reply_probs)
            note = final.notice if final is not None else None
            if final is None or (final.reason is FinishReason.CANCELLED and not note):
                note = "stopped"
            elif final.reason is FinishReason.LENGTH and not note and not self.params.completion:  # completion: go on
                note = f"cut at Max tokens ({self.params.max_tokens}): raise it in ⚙ for longer replies"
            if note:
                self.chat.add(NOTICE, note)
        self.transcript.show_messages(self.chat.messages)
        self.sigChatChanged.emit(self.chat)
        self.sigReplyFinished.emit(final)

    def _drop_failed_turn(self, error: str) -> None:
        """Take back the user turn the engine refused, so the next message is not refused too."""
        text = self.chat.drop_last_reply()
        if text is not None:
            self.chat.messages.pop()
            if not self.input.toPlainText():
                self.input.setPlainText(text)
        self.chat.add(NOTICE, f"not answered: {error}")

    def _set_busy(self, busy: bool) -> None:
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self.regenerate_button.setEnabled(not busy)


def _text_button(text: str, tip: str, slot) -> QPushButton:
    """A push button that shrinks to its text when the pane is narrow, and no further: the style's
    80 px minimum would not fit eight panes, and cutting the text ("Senc") would not read."""
    button = QPushButton(text, clicked=slot, toolTip=tip)
    metric = button.style().pixelMetric
    padding = metric(QStyle.PixelMetric.PM_ButtonMargin) + metric(QStyle.PixelMetric.PM_DefaultFrameWidth)
    button.setMinimumWidth(button.fontMetrics().horizontalAdvance(text) + 2 * padding)
    return button


def _icon_button(icon: QStyle.StandardPixmap, text: str, tip: str, slot) -> QToolButton:
    """An icon alone; its text names it for screen readers."""
    button = QToolButton(text=text, toolTip=tip, clicked=slot)
    button.setIcon(button.style().standardIcon(icon))
    return button


def _model_name(client: EngineClient, params: PaneParams) -> str:
    """What the chat list shows as the chat's model: the model file, or the remote model or host."""
    endpoint = params.endpoint()
    if endpoint is None:
        info = client.models.get(params.model) or client.model_info
        return Path(info.path if info else client.config.model_path).name
    return endpoint.model or urlsplit(endpoint.api_url).netloc or endpoint.api_url


@dataclass(frozen=True)
class Branch:
    """A reply's first tokens, the last one a rival of the token drawn there, and the turns before it."""

    tokens: tuple[int, ...]
    text: str
    probs: tuple[TokenProbs, ...]  # how likely each of them was
    messages: tuple[dict[str, str], ...] = ()

    @classmethod
    def at(cls, probs: list[TokenProbs], index: int, rival: TokenChoice, messages) -> Branch:
        taken = (*probs[:index], TokenProbs(rival, probs[index].top))
        text = b"".join(p.chosen.piece for p in taken).decode("utf-8", "replace")
        return cls(tuple(p.chosen.token for p in taken), text, taken, tuple(dict(m) for m in messages))


NO_PREFIX = Branch((), "", ())
