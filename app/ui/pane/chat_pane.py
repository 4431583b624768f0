"""One chat pane: header, transcript, live readout, input and buttons, drawn from its PaneSession.

The session (app/workspace) holds the chat and runs the replies; the pane forwards clicks to it and
draws what it says. Streamed text waits in the session until the window calls `flush` on every pane
at once (soon after text arrives, 25 times a second at most), so eight panes cost the GUI one paint
pass rather than one per token.
"""

from __future__ import annotations

import html
import math
from urllib.parse import urlsplit

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QCursor, QDragEnterEvent, QDropEvent, QKeyEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStyle,
    QToolButton,
    QVBoxLayout,
)

from app.engine.events import Fault
from app.ui import theme
from app.ui.dialogs import export_with_dialog
from app.workspace.chat_store import Chat
from app.workspace.pane_params import PaneParams
from app.workspace.presets import PresetBook
from app.workspace.session import Branch, PaneSession

from .bias_editor import TokenReader
from .params_editor import PaneParamsEditor
from .pictures import FILE_FILTER, AttachmentStrip, PictureError, holds_pictures, pictures_in, read_picture_file
from .readout import Readout
from .transcript import Transcript

MODEL_CHARS = 9  # of a model's name shown in the pane's header: its end, where the quantization is
READOUT_LEGEND = (
    "tok/s: the tokens this pane got in the last second\nTTFT: time to the first token\n"
    "KV hit: the chat's prompt found in the KV cache; after a broadcast the pane that computed the\n"
    "shared prompt reads 0%, the panes that reused its cells read high\nctx: tokens in context\n"
    "drafts: of the tokens the last reply drafted ahead (speculative decoding), the share accepted\n"
    "tok/step: the tokens the last reply got per decode step (1 without drafts)\n"
    "think / answer: a thinking model's reply, its tokens of thoughts and of answer;\n"
    "answer at: the time to the answer's first token, after the thoughts"
)


ATTACH_TIP = "Attach pictures to the next message (or paste them, or drop them on the pane)"
NO_VISION = "load it with its vision projector (--mmproj, or an mmproj-*.gguf beside it) to send pictures"


class MessageEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line, Escape stops the reply; a picture pasted or dropped
    on it (pixels, or picture files) is attached, not written."""

    sigSubmitted = Signal()
    sigStopRequested = Signal()
    sigPictures = Signal(object)  # QMimeData holding pictures

    def canInsertFromMimeData(self, source: QMimeData) -> bool:
        return holds_pictures(source) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:
        if holds_pictures(source):
            self.sigPictures.emit(source)
            return
        super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.sigStopRequested.emit()
            return
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.sigSubmitted.emit()
            return
        super().keyPressEvent(event)


class ChatPane(QFrame):
    sigReplyFinished = Signal(object)  # FinishEvent or None (the task was cancelled)
    sigCloseRequested = Signal(object)  # ChatPane
    sigCopySettings = Signal(object)  # ChatPane: give its settings to every pane
    sigPresetToAll = Signal(object)  # Preset: apply it to every pane
    sigDraftChanged = Signal(object, str)  # ChatPane, the text typed and not sent
    sigExported = Signal(object)  # Path: the chat was exported there (the window says so)
    sigBranch = Signal(object, object)  # ChatPane, Branch: go on from another token in a new pane

    def __init__(self, session: PaneSession, parent=None):
        super().__init__(parent)
        self.session = session
        self.branch_menu: QMenu | None = None  # the last menu of rivals shown
        self._names: list[str] = []  # the loaded models, the default first
        self._seeing: frozenset[str] | None = None  # those that see images (None: not told yet)
        self._reader: TokenReader | None = None  # the local model's tokenizer, for the logit bias's texts
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setObjectName("chatPane")
        border = theme.current().border.name()
        self.setStyleSheet(f"#chatPane {{ border: 1px solid {border}; border-top: 3px solid {session.colour}; }}")
        self._build(session.params)
        self.input.setPlainText(session.draft)
        self.input.textChanged.connect(lambda: self.sigDraftChanged.emit(self, self.input.toPlainText()))
        self.transcript.token_probs.update(session.turn_probs)
        self.transcript.show_messages(session.chat.messages)
        session.reply_started.connect(self._on_reply_started)
        session.reply_ended.connect(self._on_reply_ended)
        session.params_changed.connect(self._show_params)
        session.chat_changed.connect(lambda _chat: self._show_name(self.params))
        session.draft_restored.connect(self._on_draft_restored)
        session.send_refused.connect(self._on_send_refused)
        session.attachments_changed.connect(self.attachments.show_pictures)
        self.attachments.show_pictures(session.attached)
        self.setAcceptDrops(True)  # pictures dropped anywhere on the pane are attached

    # -- layout --------------------------------------------------------------------------------

    def _build(self, params: PaneParams) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(3)
        layout.addLayout(self._header())
        self.params_editor = PaneParamsEditor(params)
        self.params_editor.sigParamsChanged.connect(self.session.set_params)
        self.params_editor.sigCopyToAll.connect(lambda: self.sigCopySettings.emit(self))
        self.params_editor.sigPresetToAll.connect(self.sigPresetToAll)
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
        # offered when the model's own chat template failed on this chat (it looped, raised, ran long)
        self.template_button = _text_button("Use the built-in template", "", self._use_builtin_template)
        self.template_button.setVisible(False)
        layout.addWidget(self.template_button)
        # why the last send was refused (an output format that cannot constrain a reply); the message stays typed
        self.refusal_label = QLabel()
        self.refusal_label.setWordWrap(True)
        self.refusal_label.setStyleSheet(f"color: {theme.current().error.name()};")
        self.refusal_label.setVisible(False)
        layout.addWidget(self.refusal_label)
        self.attachments = AttachmentStrip()
        self.attachments.sigRemove.connect(self.session.detach)
        layout.addWidget(self.attachments)
        self.input = MessageEdit()
        self._show_mode(params)
        self.input.setFixedHeight(44)
        self.input.sigSubmitted.connect(self._on_send)
        self.input.sigPictures.connect(self._attach_from)
        self.input.sigStopRequested.connect(self.session.stop)
        layout.addWidget(self.input)
        layout.addLayout(self._buttons())

    def _header(self) -> QHBoxLayout:
        row = QHBoxLayout()
        swatch = QLabel()
        swatch.setFixedSize(12, 12)
        swatch.setStyleSheet(f"background: {self.session.colour}; border-radius: 6px;")
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
        self.stop_button = _text_button("Stop", "Stop the reply", self.session.stop)
        self.stop_button.setVisible(False)
        icons = QStyle.StandardPixmap  # the desktop theme's open-folder, view-refresh, edit-clear and document-save
        # an icon of the theme, not an emoji: a desktop without an emoji font drew an empty button
        self.attach_button = _icon_button(icons.SP_DirOpenIcon, "Attach pictures", ATTACH_TIP, self._on_attach)
        self.regenerate_button = _icon_button(
            icons.SP_BrowserReload, "Regenerate", "Regenerate the last reply", self.session.regenerate
        )
        self.clear_button = _icon_button(icons.SP_DialogResetButton, "Clear", "Clear the chat", self._on_clear)
        self.export_button = _icon_button(icons.SP_DialogSaveButton, "Export…", "Export the chat to a file…", self._on_export)
        # a prefill: each reply starts with this and the model goes on from it, until it is cleared
        self.reply_start = QLineEdit(placeholderText="Start the reply with…")
        self.reply_start.setToolTip(
            "Each reply begins with this text and the model continues it (a prefill); "
            "it stays for the next replies until you clear it"
        )
        self.reply_start.setClearButtonEnabled(True)
        self.reply_start.setMinimumWidth(60)
        self.reply_start.textChanged.connect(self._on_reply_start)
        for b in (self.send_button, self.stop_button, self.attach_button):
            row.addWidget(b)
        row.addWidget(self.reply_start, 1)
        for b in (self.regenerate_button, self.clear_button, self.export_button):
            row.addWidget(b)
        return row

    def show_engine_drafts(self, drafts: bool) -> None:
        self.params_editor.show_engine_drafts(drafts)

    def set_presets(self, book: PresetBook) -> None:
        self.params_editor.set_presets(book)

    def set_token_reader(self, reader: TokenReader | None) -> None:
        """What turns a logit bias's text into the local model's tokens (the engine client)."""
        self._reader = reader
        self._show_token_reader(self.params)

    def _show_token_reader(self, params: PaneParams) -> None:
        """A remote pane sends a bias's text as it is: the endpoint tokenizes it."""
        self.params_editor.set_token_reader(None if params.endpoint() is not None else self._reader, params.model or None)

    def show_models(self, names: list[str], seeing: frozenset[str] | None = None) -> None:
        """The loaded models to pick from (the first is the default), and those that see images; a
        pane whose model is gone goes on with the default."""
        self._names, self._seeing = list(names), seeing
        if self.params.model and self.params.model not in names:
            self.session.set_params(self.params.with_(model=""))
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        for name in names:  # the list shows each name whole; the closed box its short form
            self.model_combo.addItem(name, name)
        self._show_model(self.params)
        self.model_combo.blockSignals(False)
        self.model_combo.setVisible(len(names) > 1 and self.params.endpoint() is None)
        self._show_vision(self.params)

    def _show_vision(self, params: PaneParams) -> None:
        """Attaching pictures, where the pane's model sees them (a remote endpoint's: it will say)."""
        model = params.model or (self._names[0] if self._names else "")
        sees = self._seeing is None or params.endpoint() is not None or model in self._seeing
        self.attach_button.setEnabled(sees)
        self.attach_button.setToolTip(ATTACH_TIP if sees else f"{model} does not see images: {NO_VISION}")

    def _on_model_picked(self, _index: int) -> None:
        name = self.model_combo.currentData()
        if name and name != (self.params.model or self.model_combo.itemData(0)):
            self.session.set_params(self.params.with_(model=name))

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

    def params_editor_visible(self, visible: bool) -> None:
        self.params_area.setVisible(visible)

    def _show_params(self, params: PaneParams) -> None:
        if params != self.params_editor.params:  # set by the workspace (copied, a fan-out, a base model)
            self.params_editor.set_params(params)
        self._show_name(params)
        if self.model_combo.count():
            self.model_combo.blockSignals(True)
            self._show_model(params)
            self.model_combo.blockSignals(False)
        self._show_mode(params)
        self._show_token_reader(params)
        self._show_vision(params)
        if not self.refusal_label.isHidden() and params.format_problem() is None:
            self.refusal_label.setVisible(False)  # the format was mended
        # the output format is not among these: it marks the replies asked for under it, not earlier ones
        if (params.show_probs, params.completion) != (self.transcript.show_probs, self.transcript.completion):
            self.transcript.show_probs, self.transcript.completion = params.show_probs, params.completion
            if not self.is_busy:  # a streaming reply is drawn anew when it ends
                self.transcript.redraw(self.chat.messages)

    def _show_mode(self, params: PaneParams) -> None:
        if params.completion:
            self.input.setPlaceholderText("Text to continue (Enter: the model goes on; empty: it goes on from where it stands)")
        else:
            self.input.setPlaceholderText("Message (Enter sends, Shift+Enter new line)")

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

    # -- state, read from the session ----------------------------------------------------------

    @property
    def chat(self) -> Chat:
        return self.session.chat

    @property
    def key(self) -> str:
        return self.session.key

    @property
    def params(self) -> PaneParams:
        return self.session.params

    @property
    def is_busy(self) -> bool:
        return self.session.is_busy

    def refresh_readout(self) -> None:
        m = self.session.metrics.panes.get(self.key)
        if m is None:
            return
        ttft = "–" if math.isnan(m.ttft_s) else f"{1000 * m.ttft_s:.0f} ms"
        hit = "–" if math.isnan(m.kv_hit_rate) else f"{100 * m.kv_hit_rate:.0f}%"
        rate = f"{m.tok_s:.0f} tok/s"
        whole = f"{rate} · TTFT {ttft} · KV hit {hit} · ctx {m.context_tokens}"
        thinking = ()
        if m.thought_tokens:  # the reply thinks: its thoughts and its answer counted apart
            answer_at = "–" if math.isnan(m.answer_s) else f"{m.answer_s:.1f} s"
            split = f"think {m.thought_tokens} / answer {m.gen_tokens - m.thought_tokens} tok"
            thinking = (
                f"{whole} · {split} · answer at {answer_at}",
                f"{rate} · TTFT {ttft} · {split} · answer at {answer_at}",
                f"{rate} · {split}",
            )
        if m.drafted_tokens:  # the last reply drafted: how much of it was right (none drafted: not said)
            share = f"{100 * m.draft_acceptance:.0f}%"
            drafts = (
                f"{whole} · drafts {share} of {m.drafted_tokens} · {m.tokens_per_step:.1f} tok/step",
                f"{whole} · drafts {share} of {m.drafted_tokens}",
                f"{rate} · TTFT {ttft} · KV hit {hit} · drafts {share}",
                f"{rate} · {ttft} · hit {hit} · drafts {share}",
            )
        else:
            drafts = ()
        self.readout.setText(
            *thinking,
            *drafts,
            whole,
            f"{rate} · {ttft} · hit {hit}",  # narrow panes: the figures that tell most, first
            f"{rate} · {ttft}",
            rate,
        )

    # -- actions -------------------------------------------------------------------------------

    def _on_reply_start(self, text: str) -> None:
        self.session.reply_start = text

    def _on_send(self) -> None:
        if self.session.send(self.input.toPlainText()):
            self.input.clear()

    def _on_attach(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach pictures", "", FILE_FILTER)
        problems = []
        for path in paths:
            try:
                self.session.attach(read_picture_file(path))
            except PictureError as e:
                problems.append(str(e))
        self._say_problems(problems)

    def _attach_from(self, mime: QMimeData) -> None:
        """Pictures pasted or dropped: attached, and what could not be said under the transcript."""
        pictures, problems = pictures_in(mime)
        for picture in pictures:
            self.session.attach(picture)
        self._say_problems(problems)

    def _say_problems(self, problems: list[str]) -> None:
        if problems:
            self.refusal_label.setText("Not attached: " + "; ".join(problems))
            self.refusal_label.setToolTip("A picture may be PNG, JPEG, GIF (one frame), BMP, or what Qt reads (WebP, TIFF)")
            self.refusal_label.setVisible(True)
        elif self.refusal_label.text().startswith("Not attached"):
            self.refusal_label.setVisible(False)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if holds_pictures(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        if holds_pictures(event.mimeData()):
            self._attach_from(event.mimeData())
            event.acceptProposedAction()

    def _use_builtin_template(self) -> None:
        """Chat with ChatML from now on (⚙ shows it), and send again the turn the model's template failed on."""
        self.template_button.setVisible(False)
        self.session.set_params(self.params.with_(builtin_template=True))
        self._on_send()

    def _on_clear(self) -> None:
        self.session.spawn(self._clear())

    async def _clear(self) -> None:
        await self.session.clear()
        self.transcript.token_probs.clear()
        self.transcript.show_messages([])

    def _on_export(self) -> None:
        written = export_with_dialog(self, self.chat)
        if written is not None:
            self.sigExported.emit(written)

    # -- one reply -----------------------------------------------------------------------------

    def _on_send_refused(self, why: str) -> None:
        self.refusal_label.setText(why)
        self.refusal_label.setToolTip("Set the output format in ⚙")
        self.refusal_label.setVisible(True)

    def _on_reply_started(self) -> None:
        self.template_button.setVisible(False)
        self.refusal_label.setVisible(False)
        self.transcript.begin_reply(self.chat.messages)
        self._set_busy(True)

    def _on_reply_ended(self, final) -> None:
        self._set_busy(False)
        self.transcript.token_probs.update(self.session.turn_probs)
        self.transcript.show_messages(self.chat.messages)
        if final is not None and final.fault is Fault.TEMPLATE and not self.params.builtin_template:
            self.template_button.setToolTip(
                f"{final.error}\n\nClick to render this chat with the app's ChatML template and send it again (⚙ turns it off)."
            )
            self.template_button.setVisible(True)
        self.sigReplyFinished.emit(final)

    def _on_draft_restored(self, text: str) -> None:
        if not self.input.toPlainText():
            self.input.setPlainText(text)

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

    def flush(self) -> None:
        """Show the text received since the last flush (the window calls this for every pane at once):
        a thinking model's thoughts first, then its answer, which folds the thoughts away."""
        thoughts = self.session.take_thoughts()
        if thoughts:
            self.transcript.append_thoughts(thoughts)
        text = self.session.take_text()
        if text:
            if self.transcript.is_thinking:
                clock = self.session.thinking
                self.transcript.end_thoughts(clock.seconds, clock.tokens)
            self.transcript.append_reply(text)

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
