"""A pane's logit bias: tokens and the bias each gets, added by token id or by a text, which the
pane's model turns into its tokens (a remote endpoint is sent the text: it tokenizes it)."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Protocol

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.engine.sampling.fields import MAX_BIAS
from app.engine.sampling.params import BY_NAME
from app.ui import theme

FIELD = BY_NAME["logit_bias"]
TOKEN_ID = re.compile(r"^\s*\d+\s*$")


class TokenReader(Protocol):
    """What turns a pane's text into its model's tokens (the engine client)."""

    async def tokenize(
        self, text: str, model: str | None = None, add_special: bool = False, parse_special: bool = True
    ) -> list[int]: ...

    async def spell(self, tokens: list[int], model: str | None = None) -> list[bytes]: ...


class BiasEditor(QWidget):
    """The entries (a token id or a text, and its bias) as a list; a text or an id typed in, a bias,
    Add; Remove takes the selected entries off. `sigChanged(entries)` after every change."""

    sigChanged = Signal(object)  # the logit bias: ((token id or text, bias), ...)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._entries: tuple = ()
        self._pieces: dict[int, str] = {}  # what each token id spells, as the pane's model has it
        self._reader: TokenReader | None = None
        self._model: str | None = None
        self._tasks: set[asyncio.Task] = set()
        tasks = self._tasks  # not self: the lambda must not keep the widget
        self.destroyed.connect(lambda *_: [task.cancel() for task in list(tasks)])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.list = QListWidget()
        self.list.setSelectionMode(QListWidget.SelectionMode.ExtendedSelection)
        self.list.setMaximumHeight(72)
        self.list.setToolTip(FIELD.tooltip)
        layout.addWidget(self.list)
        self.token_edit = QLineEdit(placeholderText="a text, or a token id")
        self.token_edit.returnPressed.connect(self._add)
        layout.addWidget(self.token_edit)
        row = QHBoxLayout()
        self.bias_box = QDoubleSpinBox(toolTip="The bias: -100 bans the token, +5 favours it")
        self.bias_box.setRange(-MAX_BIAS, MAX_BIAS)
        self.bias_box.setDecimals(1)
        self.bias_box.setValue(-MAX_BIAS)
        self.add_button = QPushButton("Add", toolTip="Add the text's tokens (or the token id) with this bias")
        self.add_button.clicked.connect(self._add)
        self.remove_button = QPushButton("Remove", toolTip="Remove the selected entries")
        self.remove_button.clicked.connect(self._remove)
        row.addWidget(self.bias_box, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        layout.addLayout(row)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.hide()
        layout.addWidget(self.status)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

    @property
    def entries(self) -> tuple:
        return self._entries

    def set_entries(self, entries: tuple) -> None:
        """Show `entries` (no signal); token ids not yet spelled are asked of the reader."""
        self._entries = entries
        self._show()
        unknown = [key for key, _ in entries if isinstance(key, int) and key not in self._pieces]
        if unknown and self._reader is not None:
            self._run(self._spell(unknown))

    def set_reader(self, reader: TokenReader | None, model: str | None = None) -> None:
        """Where a text becomes tokens: the pane's local model (`model`, None: the default), or none
        (a remote endpoint, which is sent the text)."""
        if (reader, model) != (self._reader, self._model):
            self._pieces.clear()
        self._reader, self._model = reader, model
        self.token_edit.setPlaceholderText(
            "a text, or a token id" if reader else "a text (the endpoint tokenizes it), or a token id"
        )
        self.set_entries(self._entries)

    # -- adding and removing ----------------------------------------------------------------

    def _add(self) -> None:
        text, bias = self.token_edit.text(), self.bias_box.value()
        if not text:
            return
        if TOKEN_ID.match(text):
            self._put([(int(text), bias)])
        elif self._reader is None:
            self._put([(text, bias)])
        else:
            self._run(self._add_tokens(text, bias))

    async def _add_tokens(self, text: str, bias: float) -> None:
        try:
            tokens = await self._reader.tokenize(text, self._model, add_special=False, parse_special=False)
            pieces = await self._reader.spell(tokens, self._model)
        except Exception as e:  # the engine stopped, the model was unloaded: say so, keep the entries
            self._say(f"✗ could not tokenize {text!r}: {e}")
            return
        self._pieces.update((t, p.decode("utf-8", "replace")) for t, p in zip(tokens, pieces, strict=True))
        self._put([(t, bias) for t in tokens])

    def _put(self, added: list) -> None:
        """`added` entries in place of any of the same token, checked against the field's range."""
        keys = {key for key, _ in added}
        entries = tuple(e for e in self._entries if e[0] not in keys) + tuple(added)
        problem = FIELD.problem(entries)
        if problem is not None:
            self._say(f"✗ {problem}")
            return
        self.token_edit.clear()
        self._say("")
        self._entries = entries
        self._show()
        self.sigChanged.emit(entries)

    def _remove(self) -> None:
        rows = {index.row() for index in self.list.selectedIndexes()}
        if rows:
            self._entries = tuple(e for i, e in enumerate(self._entries) if i not in rows)
            self._show()
            self.sigChanged.emit(self._entries)

    # -- showing ---------------------------------------------------------------------------------

    def _show(self) -> None:
        self.list.clear()
        for key, bias in self._entries:
            QListWidgetItem(self._entry_text(key, bias), self.list)
        self.remove_button.setEnabled(bool(self._entries))

    def _entry_text(self, key, bias: float) -> str:
        shown = "banned" if bias == -math.inf else f"{bias:+g}"
        if isinstance(key, str):
            return f"“{key}” → {shown}"
        piece = self._pieces.get(key)
        return f"{key} {piece!r} → {shown}" if piece is not None else f"{key} → {shown}"

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {theme.current().error.name()};")
        self.status.setVisible(bool(text))

    async def _spell(self, tokens: list[int]) -> None:
        try:
            pieces = await self._reader.spell(tokens, self._model)
        except Exception:  # an id this model does not have (a setting kept from another): shown as the id
            return
        self._pieces.update((t, p.decode("utf-8", "replace")) for t, p in zip(tokens, pieces, strict=True))
        self._show()

    def _run(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)  # kept until done: the loop holds only a weak reference
        task.add_done_callback(self._tasks.discard)
