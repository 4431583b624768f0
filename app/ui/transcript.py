"""The chat transcript: replies rendered from their Markdown (Qt's own reader), the user's messages as typed, the
reply in progress appended as plain text; a context menu copies a message or a code block as written."""

from __future__ import annotations

import bisect
import html
import re

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QFont,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QMenu, QTextBrowser

from . import theme
from .chat_store import NOTICE

LINE_SEPARATOR = "\u2028"  # what <br> becomes in a QTextDocument
# GitHub's Markdown (tables, strikethrough, links) through Qt's own reader; HTML in a reply is shown as text
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S)


def message_html(role: str, text: str) -> str:
    colours = theme.current()
    if role == NOTICE:
        return f'<p style="color:{colours.notice.name()};"><i>{html.escape(text)}</i></p>'
    if role == "user":
        body = _typed_html(text)
        bubble = colours.user_bubble.name()
        return f'<table width="100%" cellpadding="6" bgcolor="{bubble}"><tr><td><b>You</b><br>{body}</td></tr></table>'
    return f'<p style="margin-top:6px; margin-bottom:0px;">{_assistant_name(colours)}</p>{markdown_html(text, colours)}'


def _assistant_name(colours: theme.Theme) -> str:
    return f'<b style="color:{colours.assistant.name()};">Assistant</b>'


def _typed_html(text: str) -> str:
    """A user's message as they typed it: no Markdown read into it, spaces and line breaks kept."""
    return f'<span style="white-space:pre-wrap;">{html.escape(text)}</span>'


def markdown_html(text: str, colours: theme.Theme) -> str:
    """A reply's Markdown as HTML: headings, lists, tables, links, quotes, code blocks on a shaded
    background, links in the palette's link colour."""
    document = QTextDocument()
    document.setMarkdown(text, MARKDOWN)
    _colour_code_and_links(document, colours)
    first = QTextCursor(document)
    margin = QTextBlockFormat()
    margin.setTopMargin(0)  # right under the name, as the reply was while it streamed
    first.mergeBlockFormat(margin)
    found = _BODY.search(document.toHtml())
    return found.group(1) if found else html.escape(text)


def _colour_code_and_links(document: QTextDocument, colours: theme.Theme) -> None:
    code = QTextBlockFormat()
    code.setBackground(colours.code_background)
    link = QTextCharFormat()
    link.setForeground(colours.link)
    block = document.begin()
    while block.isValid():
        if block.blockFormat().nonBreakableLines():  # a fenced code block's line
            QTextCursor(block).mergeBlockFormat(code)
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            if fragment.charFormat().isAnchor():
                cursor = QTextCursor(document)
                cursor.setPosition(fragment.position())
                cursor.setPosition(fragment.position() + fragment.length(), QTextCursor.MoveMode.KeepAnchor)
                cursor.mergeCharFormat(link)
            fragments += 1
        block = block.next()


class Transcript(QTextBrowser):
    """Read-only view of one chat. It renders only what is new: turns added since the last render are
    appended, the reply streams in as plain text, and at its end only that reply is re-rendered.
    Re-rendering whole chats would stall the window when eight replies end in the same tick."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenExternalLinks(True)
        self.document().setDocumentMargin(6)
        self._reply_format = QTextCharFormat()
        self._reply_format.setFontWeight(QFont.Weight.Normal)
        self._shown: list[tuple[str, str]] = []  # the finished turns the document shows
        self._starts: list[int] = []  # where each of them begins in the document (for Copy)
        self.context_menu: QMenu | None = None  # the last one shown
        self._reply_start = 0  # where the streaming reply's heading begins
        # a cursor that stays at the reply's end while one streams: moving a new one there costs a
        # text shaping
        self._reply_end: QTextCursor | None = None
        self._streamed: list[str] = []  # the reply's text so far, to lay it out again on a resize
        self._reply_width = 0  # the width its lines were split at
        # Qt hands the scroll area its viewport's resizes, also when the scroll bar comes and goes
        # in the middle of an insert: the new layout waits for the event loop
        self._relayout = QTimer(self, interval=0, timeout=self._relayout_reply)
        self._relayout.setSingleShot(True)

    def show_messages(self, messages: list[dict[str, str]]) -> None:
        """Show `messages`: appending what is new when the document already shows the ones before."""
        if self._reply_end is not None:  # the streamed reply gives way to its rendered form
            self._remove_reply()
            self._reply_end = None
        turns = [(m["role"], m["content"]) for m in messages if m["role"] != "system"]
        if turns[: len(self._shown)] != self._shown:
            self.clear()
            self._shown, self._starts = [], []
        for turn in turns[len(self._shown) :]:
            self._starts.append(self._end().position())
            self._end().insertHtml(message_html(*turn))
            self._shown.append(turn)
        self._scroll_to_end()

    def begin_reply(self, messages: list[dict[str, str]]) -> None:
        """Show the chat plus an empty assistant turn that streamed text is appended to."""
        self.show_messages(messages)
        self._reply_start = self._end().position()
        self._streamed = []
        self._reply_width = self.viewport().width()
        self._open_reply()
        self._scroll_to_end()

    def append_reply(self, text: str) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self._streamed.append(text)
        cursor = self._reply_end or self._end()
        cursor.insertText(text, self._reply_format)
        _split_finished_lines(cursor)
        if at_bottom:  # follow the stream unless the user scrolled up to read
            self._scroll_to_end()

    # -- copying -------------------------------------------------------------------------------

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        """The standard menu (Copy of a selection, Select All) with Copy message and, on a code
        block, Copy code block: the text as the model wrote it, not as it is shown."""
        menu = self.createStandardContextMenu(event.pos())
        position = self.cursorForPosition(event.pos()).position()
        first = menu.actions()[0] if menu.actions() else None
        copies = [("Copy code block", self.code_block_at(position)), ("Copy message", self.message_at(position))]
        for label, text in copies:
            if text is not None:
                menu.insertAction(first, QAction(label, menu, triggered=lambda _=False, text=text: _copy(text)))
        menu.insertSeparator(first)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.destroyed.connect(self._forget_context_menu)
        self.context_menu = menu
        menu.popup(event.globalPos())  # not exec(): the replies go on streaming while it is open

    def _forget_context_menu(self) -> None:
        self.context_menu = None

    def message_at(self, position: int) -> str | None:
        """The text of the turn shown at a document position, also of the reply streaming."""
        if self._reply_end is not None and position >= self._reply_start:
            return "".join(self._streamed)
        index = bisect.bisect_right(self._starts, position) - 1
        return self._shown[index][1] if index >= 0 else None

    def code_block_at(self, position: int) -> str | None:
        """The lines of the code block at a document position (each line is a block of its own)."""
        block = self.document().findBlock(position)
        if not block.blockFormat().nonBreakableLines():
            return None
        while block.previous().isValid() and block.previous().blockFormat().nonBreakableLines():
            block = block.previous()
        lines = []
        while block.isValid() and block.blockFormat().nonBreakableLines():
            lines.append(block.text())
            block = block.next()
        return "\n".join(lines)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._reply_end is not None:
            self._relayout.start()

    def _relayout_reply(self) -> None:
        """The streamed lines were split where the old width wrapped them: lay them out anew."""
        width = self.viewport().width()
        if self._reply_end is None or width == self._reply_width:
            return
        self._reply_width = width
        self._remove_reply()
        self._open_reply()
        self._reply_end.insertText("".join(self._streamed), self._reply_format)
        _split_finished_lines(self._reply_end)

    def _open_reply(self) -> None:
        """The streamed reply's heading, at `_reply_start`, and a cursor after it for the text."""
        cursor = self._end()
        cursor.insertHtml(f'<p style="margin-top:6px;">{_assistant_name(theme.current())}<br></p>')
        self._reply_end = cursor

    def _remove_reply(self) -> None:
        cursor = self._end()
        cursor.setPosition(self._reply_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()

    def _end(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())


def _copy(text: str) -> None:
    QGuiApplication.clipboard().setText(text)


def _split_finished_lines(cursor: QTextCursor) -> None:
    """Move the last wrapped line of the cursor's paragraph into a paragraph of its own, with no
    margin between the two, so the reply looks the same. Qt lays out and paints a changed paragraph
    whole: streaming into one long paragraph cost a token time that grew with the reply (measured,
    0.13 ms at 32 words, 0.63 ms at 128). In one-line paragraphs each token costs the same."""
    block = cursor.block()
    layout = block.layout()
    if layout is None or layout.lineCount() < 2:
        return
    fmt = block.blockFormat()
    above, below = QTextBlockFormat(fmt), QTextBlockFormat(fmt)
    above.setBottomMargin(0)
    below.setTopMargin(0)
    split = QTextCursor(block)
    at = block.position() + layout.lineAt(layout.lineCount() - 1).textStart()
    split.setPosition(at)
    split.beginEditBlock()
    if block.document().characterAt(at - 1) == LINE_SEPARATOR:  # a <br>: the new paragraph replaces it
        split.deletePreviousChar()
    split.insertBlock(below, cursor.charFormat())
    split.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    split.setBlockFormat(above)
    split.endEditBlock()
