"""The chat transcript: replies rendered from their Markdown (Qt's own reader), block by block while they
stream, the user's messages as typed; a Copy link on each message and each code block copies it as written."""

from __future__ import annotations

import bisect
import html
import re

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QCursor,
    QDesktopServices,
    QFontDatabase,
    QFontInfo,
    QGuiApplication,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextFormat,
)
from PySide6.QtWidgets import QMenu, QTextBrowser, QToolTip

from app.engine.probs import TokenProbs
from app.workspace.chat_store import NOTICE

from . import theme
from .token_view import rivals_html, token_at, tokens_html

# GitHub's Markdown (tables, strikethrough, links) through Qt's own reader; HTML in a reply is shown as text
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
OPENED_SCHEMES = ("http", "https", "mailto")  # links in a reply that open; any other is copied
COPY = "copy"  # the scheme of the Copy links: copy:message/<turn> and copy:code/<the code, percent-encoded>
PARAGRAPH_MARGIN = 6  # what Qt's Markdown reader puts above and below a paragraph
# a heading's size against the text's: in a chat pane an h1 is no page title (Qt's is twice the text)
HEADING_SCALE = {1: 1.3, 2: 1.15, 3: 1.05}
_FENCE = re.compile(r"( *)(`{3,}|~{3,})(.*)")


def message_html(role: str, text: str, index: int) -> str:
    """A user's turn or a notice as HTML (a reply is a heading and a `markdown_fragment`); `index`, the
    turn's place in the transcript, is what its Copy link copies."""
    colours = theme.current()
    if role == NOTICE:
        return f'<p style="color:{colours.notice.name()};"><i>{html.escape(text)}</i></p>'
    body = _typed_html(text)
    bubble = colours.user_bubble.name()
    heading = f"<b>You</b>&nbsp;&nbsp;{_copy_link(index, colours)}"
    return f'<table width="100%" cellpadding="6" bgcolor="{bubble}"><tr><td>{heading}<br>{body}</td></tr></table>'


def _insert_assistant_heading(cursor: QTextCursor, index: int, colours: theme.Theme) -> None:
    """The assistant's name and the reply's Copy link, in the cursor's (empty) block."""
    heading = QTextBlockFormat()
    heading.setTopMargin(PARAGRAPH_MARGIN)
    cursor.setBlockFormat(heading)
    name = f'<b style="color:{colours.assistant.name()};">Assistant</b>'
    cursor.insertHtml(f"{name}&nbsp;&nbsp;{_copy_link(index, colours)}")


def _copy_link(index: int, colours: theme.Theme) -> str:
    return f'<a href="{COPY}:message/{index}" style="color:{colours.link.name()}; text-decoration:none;">Copy</a>'


def _typed_html(text: str) -> str:
    """A user's message as they typed it: no Markdown read into it, spaces and line breaks kept."""
    return f'<span style="white-space:pre-wrap;">{html.escape(text)}</span>'


def markdown_document(text: str, colours: theme.Theme) -> QTextDocument:
    """Markdown read by Qt: headings sized for a chat, lists, tables, links in the palette's link colour,
    quotes, code blocks on a shaded background under a Copy code link."""
    document = QTextDocument()
    document.setMarkdown(text, MARKDOWN)
    _drop_stray_cell_lines(document)
    code_starts = _style(document, colours)
    # what each Copy code link copies: the code as written, which Qt's reader gave leading tabs as
    # spaces; as shown when the two disagree on where the code blocks are (a fence in a quote, say)
    written = fenced_code(text)
    for number in reversed(range(len(code_starts))):  # from the end: inserting moves what follows
        first_line = document.findBlock(code_starts[number])
        code = written[number] if len(written) == len(code_starts) else _code_from(first_line)
        _add_copy_bar(first_line, code, colours)
    return document


def _drop_stray_cell_lines(document: QTextDocument) -> None:
    """Qt's reader starts a table that follows a quote or a code block with an empty line in its first
    cell, which makes the header row twice as tall, and gives that line the header's bold: taken out,
    its bold given to the cell's text."""
    block = document.begin()
    while block.isValid():
        table = QTextCursor(block).currentTable()
        if table is not None and not block.text() and table.cellAt(block.position()).lastPosition() > block.position():
            text = QTextCursor(block.next())  # the cell's text, after the empty line
            text.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            text.mergeCharFormat(block.charFormat())
            position = block.position()
            QTextCursor(block).deleteChar()  # the text's line keeps its own format
            block = document.findBlock(position)
        block = block.next()


def markdown_fragment(text: str, colours: theme.Theme, under_name: bool) -> QTextDocumentFragment:
    """`text` rendered, to insert at the end of a block: it begins with an empty block that merges into that
    one, so its own first block keeps its format (a fragment's first block takes the format of the block
    it lands in). Not through HTML: Qt's HTML reader gives an <h1> twice the text's size whatever
    its style says. `under_name`: right under the name, as the reply was while it streamed."""
    document = markdown_document(text, colours)
    first = document.begin()
    cursor = QTextCursor(first)
    if under_name:
        margin = QTextBlockFormat()
        margin.setTopMargin(0)
        cursor.mergeBlockFormat(margin)
    cursor.insertBlock(first.blockFormat(), first.charFormat())
    cursor.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    cursor.setBlockFormat(QTextBlockFormat())
    return QTextDocumentFragment(document)


def _style(document: QTextDocument, colours: theme.Theme) -> list[int]:
    """Code blocks shaded, headings sized, links in the link colour, table cells' margins made even;
    where each code block begins."""
    code_starts, spans = [], []
    text_size = QFontInfo(document.defaultFont()).pointSizeF()
    block = document.begin()
    while block.isValid():
        cursor, fmt = QTextCursor(block), block.blockFormat()
        if fmt.nonBreakableLines():  # a code block's line
            fmt.setBackground(colours.code_background)
            if not block.previous().blockFormat().nonBreakableLines():
                code_starts.append(block.position())
        elif fmt.headingLevel():
            fmt.setTopMargin(PARAGRAPH_MARGIN)  # Qt's reader gives a heading none: it would touch the text above
        elif cursor.currentTable() is not None:
            fmt.setTopMargin(0)  # Qt's reader gives the first cell a paragraph's margins, the others none
            fmt.setBottomMargin(0)
        cursor.setBlockFormat(fmt)
        heading_size = round(text_size * HEADING_SCALE.get(fmt.headingLevel(), 1.0), 1)
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            chars = fragment.charFormat()
            if chars.isAnchor():
                chars.setForeground(colours.link)
            if fmt.headingLevel():  # Qt's size steps (an h1 twice the text) win over a point size: cleared
                chars.clearProperty(QTextFormat.Property.FontSizeAdjustment)
                chars.setFontPointSize(heading_size)
            spans.append((fragment.position(), fragment.length(), chars))
            fragments += 1
        block = block.next()
    for position, length, chars in spans:
        cursor = QTextCursor(document)
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(chars)
    return code_starts


def _add_copy_bar(first_line: QTextBlock, code: str, colours: theme.Theme) -> None:
    """A shaded line above a code block with a link that copies `code`."""
    href = f"{COPY}:code/{bytes(QUrl.toPercentEncoding(code)).decode()}"
    cursor = QTextCursor(first_line)
    cursor.insertBlock(first_line.blockFormat(), first_line.charFormat())  # the code moves a line down
    cursor.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    cursor.setBlockFormat(_bar_format(colours))
    link = QTextCharFormat()
    link.setAnchor(True)
    link.setAnchorHref(href)
    link.setForeground(colours.link)
    cursor.insertText("Copy code", link)


def _bar_format(colours: theme.Theme) -> QTextBlockFormat:
    bar = QTextBlockFormat()
    bar.setBackground(colours.code_background)  # the link on the left: a long line may take the right out of view
    bar.setTopMargin(PARAGRAPH_MARGIN)
    return bar


def _code_from(block: QTextBlock) -> str:
    """The code block's text from its line `block` on (each line is a block of its own)."""
    lines = []
    while block.isValid() and block.blockFormat().nonBreakableLines():
        lines.append(block.text())
        block = block.next()
    return "\n".join(lines)


def _copied(href: str) -> tuple[str, str]:
    """What a Copy link copies: ("message", its turn's index) or ("code", the code)."""
    kind, _, what = QUrl(href).path(QUrl.ComponentFormattingOption.FullyDecoded).partition("/")
    return kind, what


def _opening_fence(line: str) -> str:
    """The fence (``` or ~~~, or longer) that `line` opens a code block with; "" when it opens none."""
    found = _FENCE.fullmatch(line)
    if found is None or (found[2][0] == "`" and "`" in found[3]):  # ```x``` is inline code
        return ""
    return found[2]


def finished_length(tail: str) -> int:
    """How much of `tail`, Markdown from a block's start, is whole blocks that what follows cannot change:
    up to a blank line that an unindented line follows (an indented one may go on with a list item), up
    to a fence that opens a code block, and past the fence that closes it. Not before a table: rendered
    alone, Qt would put an empty line above it that the whole reply has not."""
    finished, position, fence, top_level, after_blank = 0, 0, "", False, False
    lines = tail.split("\n")
    for number, line in enumerate(lines):
        whole = number < len(lines) - 1
        if fence:  # in a code block, only its closing fence counts
            found = _FENCE.fullmatch(line)
            if whole and found and found[2].startswith(fence) and not found[3].strip():
                fence = ""
                if top_level:
                    finished = position + len(line) + 1
        elif not line.strip():
            after_blank = after_blank or whole
        else:
            if after_blank and not line[0].isspace() and line[0] != "|":
                finished = position
            after_blank = False
            fence = _opening_fence(line) if whole else ""
            top_level = not line[0].isspace()
            if fence and top_level:
                finished = position
        position += len(line) + 1
    return finished


def _open_code(tail: str) -> str | None:
    """The code so far when `tail` starts with a fence that opens a code block; None otherwise."""
    first, newline, code = tail.partition("\n")
    return code if newline and not first[:1].isspace() and _opening_fence(first) else None


def fenced_code(markdown: str) -> list[str]:
    """The code of each fenced code block, as written (those in a quote aside)."""
    blocks, fence, indent, lines = [], "", 0, []
    for line in markdown.split("\n"):
        if fence:
            found = _FENCE.fullmatch(line)
            if found and found[2].startswith(fence) and not found[3].strip():
                blocks.append("\n".join(lines))
                fence = ""
            else:  # the fence's indentation is not the code's
                lines.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
        elif fence := _opening_fence(line):
            indent, lines = len(line) - len(line.lstrip(" ")), []
    if fence:  # one left open runs to the end
        blocks.append("\n".join(lines))
    return blocks


class Transcript(QTextBrowser):
    """Read-only view of one chat. It renders only what is new: turns added since the last render are
    appended; a streaming reply's finished Markdown blocks are rendered as each one ends, the block in
    progress shows as it comes, and at its end only that reply is rendered again, whole. Re-rendering
    whole chats would stall the window when eight replies end in the same tick."""

    sigTokenClicked = Signal(int, int)  # (turn, token): a token of a reply drawn token by token

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setOpenLinks(False)  # links are opened (or copied from) in _on_anchor
        self.anchorClicked.connect(self._on_anchor)
        self.highlighted.connect(self._on_hover)
        # replies drawn token by token, tinted by probability, when `show_probs`: turn -> (text, tokens)
        self.token_probs: dict[int, tuple[str, list[TokenProbs]]] = {}
        self.show_probs = False
        self.completion = False  # the chat is one text: no names, no Markdown, the model's part coloured
        self.document().setDocumentMargin(6)
        self._shown: list[tuple[str, str]] = []  # the finished turns the document shows
        self._starts: list[int] = []  # where each of them begins in the document (for Copy)
        self.context_menu: QMenu | None = None  # the last one shown
        self._reply_start = 0  # where the streaming reply's heading begins
        # a cursor that stays at the reply's end while one streams: moving a new one there costs a
        # text shaping
        self._reply_end: QTextCursor | None = None
        self._streamed: list[str] = []  # the reply's text so far
        self._tail = ""  # its Markdown after the last finished block: shown as it came
        self._tail_start = 0  # where the tail begins in the document
        self._tail_format = QTextCharFormat()  # the tail's text: plain, or monospace in a code block
        self._reply_width = 0  # the width the tail's lines were split at
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
            # a cleared chat or a regenerated reply: drop the token views of turns it no longer has
            self.token_probs = {i: drawn for i, drawn in self.token_probs.items() if i < len(turns) and turns[i][1] == drawn[0]}
        for turn in turns[len(self._shown) :]:
            flows_on = self.completion and turn[0] != NOTICE and (not self._shown or self._shown[-1][0] != NOTICE)
            cursor = self._end() if flows_on else self._new_block()  # one text: what follows goes on in its line
            self._starts.append(cursor.position())
            self._insert_turn(cursor, *turn)
            self._shown.append(turn)
        self._scroll_to_end()

    def _insert_turn(self, cursor: QTextCursor, role: str, text: str) -> None:
        index, colours = len(self._shown), theme.current()
        if self.completion and role != NOTICE:
            cursor.insertText(text, _completion_format(role, colours))
        elif role in ("user", NOTICE):
            cursor.insertHtml(message_html(role, text, index))
        else:
            _insert_assistant_heading(cursor, index, colours)
            drawn = self.token_probs.get(index)
            if self.show_probs and drawn is not None and drawn[0] == text:
                cursor.insertBlock(QTextBlockFormat())
                cursor.insertHtml(tokens_html(index, drawn[1], colours, text))
            else:
                cursor.insertFragment(markdown_fragment(text, colours, under_name=True))

    def redraw(self, messages: list[dict[str, str]]) -> None:
        """Show `messages` afresh (after the token view was turned on or off)."""
        self.clear()
        self._shown, self._starts = [], []
        self.show_messages(messages)

    def begin_reply(self, messages: list[dict[str, str]]) -> None:
        """Show the chat plus an empty assistant turn that streamed text is appended to."""
        self.show_messages(messages)
        if self.completion:  # the model's text goes on where the text stands, as it comes
            self._reply_end = self._end()
            self._reply_start = self._reply_end.position()
            self._streamed = []
            self._scroll_to_end()
            return
        cursor = self._new_block()
        self._reply_start = cursor.position()
        self._streamed, self._tail = [], ""
        self._reply_width = self.viewport().width()
        _insert_assistant_heading(cursor, len(self._shown), theme.current())
        cursor.insertBlock(QTextBlockFormat())
        self._tail_start = cursor.position()
        self._reply_end = cursor
        self._show_tail()
        self._scroll_to_end()

    def append_reply(self, text: str) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self._streamed.append(text)
        if self.completion:
            self._reply_end.insertText(text, _completion_format("assistant", theme.current()))
            _split_finished_lines(self._reply_end)
            if at_bottom:
                self._scroll_to_end()
            return
        line_ended = "\n" in text or self._tail.endswith("\n")  # only then can a block end or a code block begin
        blank = not self._tail.strip()  # shown without its blank lines, which text now follows
        self._tail += text
        finished = finished_length(self._tail) if line_ended else 0
        if finished:
            self._render_finished(self._tail[:finished])
            self._tail = self._tail[finished:]
            self._show_tail()
        elif blank or (line_ended and not self._tail_format.fontFixedPitch() and _open_code(self._tail) is not None):
            self._show_tail()  # the first text after blank lines, or a code block begun: laid out anew
        else:
            self._reply_end.insertText(text, self._tail_format)
            _split_finished_lines(self._reply_end)
        if at_bottom:  # follow the stream unless the user scrolled up to read
            self._scroll_to_end()

    def _render_finished(self, markdown: str) -> None:
        """Put the rendered form of the tail's finished blocks in its place, and a new tail after them."""
        cursor = self._reply_end
        cursor.setPosition(self._tail_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if not markdown.strip():
            return
        under_name = cursor.block().previous().position() == self._reply_start
        cursor.insertFragment(markdown_fragment(markdown, theme.current(), under_name))
        # the emptied tail block took the fragment's empty first one; removing its end joins it to the
        # next, which keeps its own format: a block's format survives the removal of the break before it
        QTextCursor(self.document().findBlock(self._tail_start)).deleteChar()
        cursor = self._end()
        cursor.insertBlock(QTextBlockFormat())
        self._tail_start = cursor.position()
        self._reply_end = cursor

    def _show_tail(self) -> None:
        """Lay out the tail anew, as it came but for blank lines before it; an open code block already
        shaded and monospace, under the line its Copy code link will take."""
        self._reply_width = self.viewport().width()
        cursor = self._reply_end
        cursor.setPosition(self._tail_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        colours = theme.current()
        code = _open_code(self._tail)
        paragraph = QTextBlockFormat()
        self._tail_format = QTextCharFormat()
        if code is not None:
            cursor.setBlockFormat(_bar_format(colours))
            paragraph.setNonBreakableLines(True)
            paragraph.setBackground(colours.code_background)
            self._tail_format.setFontFamilies([QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()])
            self._tail_format.setFontFixedPitch(True)
            cursor.insertBlock(paragraph)
        else:
            under_name = cursor.block().previous().position() == self._reply_start
            paragraph.setTopMargin(0 if under_name else PARAGRAPH_MARGIN)
            paragraph.setBottomMargin(PARAGRAPH_MARGIN)
            cursor.setBlockFormat(paragraph)
        cursor.insertText(self._tail.lstrip("\n") if code is None else code, self._tail_format)
        _split_finished_lines(cursor)

    # -- copying -------------------------------------------------------------------------------

    def _on_hover(self, url: QUrl) -> None:
        """Over a token of a reply drawn token by token: its rivals and their probabilities."""
        where = token_at(url.toString())
        probs = self._token(where) if where else None
        if probs is not None:
            QToolTip.showText(QCursor.pos(), rivals_html(probs) + "<i>Click to branch from a rival.</i>", self.viewport())

    def _token(self, where: tuple[int, int]) -> TokenProbs | None:
        turn, index = where
        drawn = self.token_probs.get(turn)
        return drawn[1][index] if drawn is not None and index < len(drawn[1]) else None

    def _on_anchor(self, url: QUrl) -> None:
        """A Copy link copies its message or code block as written, and says so; a token offers its
        rivals to branch from; web and mail links open in the browser, any other link is copied."""
        if (where := token_at(url.toString())) is not None:
            if self._token(where) is not None:
                self.sigTokenClicked.emit(*where)
            return
        if url.scheme() in OPENED_SCHEMES:
            QDesktopServices.openUrl(url)
            return
        kind, what = _copied(url.toString()) if url.scheme() == COPY else ("", "")
        if kind == "code" or (kind == "message" and what.isdigit()):  # else a reply wrote a copy: link itself
            _copy(what if kind == "code" else self._message(int(what)))
            QToolTip.showText(QCursor.pos(), "Copied", self.viewport())
            return
        _copy(url.toString())  # a file: or an app's own scheme would run something a model wrote
        QToolTip.showText(QCursor.pos(), f"Copied, not opened: a {url.scheme() or 'relative'} link", self.viewport())

    def _message(self, index: int) -> str:
        return self._shown[index][1] if index < len(self._shown) else "".join(self._streamed)

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

    @property
    def shown_turns(self) -> tuple[tuple[str, str], ...]:
        """The finished turns the document shows, as (role, text)."""
        return tuple(self._shown)

    def turn_start(self, index: int) -> int:
        """Where the `index`th shown turn begins in the document."""
        return self._starts[index]

    @property
    def reply_start(self) -> int:
        """Where the streaming reply's heading begins in the document."""
        return self._reply_start

    def message_at(self, position: int) -> str | None:
        """The text of the turn shown at a document position, also of the reply streaming."""
        if self._reply_end is not None and position >= self._reply_start:
            return "".join(self._streamed)
        index = bisect.bisect_right(self._starts, position) - 1
        return self._shown[index][1] if index >= 0 else None

    def code_block_at(self, position: int) -> str | None:
        """The lines of the code block at a document position."""
        block = self.document().findBlock(position)
        if not block.blockFormat().nonBreakableLines():
            return None
        while block.previous().isValid() and block.previous().blockFormat().nonBreakableLines():
            block = block.previous()
        bar = block.previous().begin()  # the Copy code bar above it, whose link has the code as written
        link = "" if bar.atEnd() else bar.fragment().charFormat().anchorHref()
        return _copied(link)[1] if link.startswith(f"{COPY}:code/") else _code_from(block)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._reply_end is not None:
            self._relayout.start()

    def _relayout_reply(self) -> None:
        """The tail's lines were split where the old width wrapped them: lay them out anew."""
        if self._reply_end is not None and not self.completion and self.viewport().width() != self._reply_width:
            self._show_tail()

    def _remove_reply(self) -> None:
        cursor = self._end()
        cursor.setPosition(self._reply_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()

    def _new_block(self) -> QTextCursor:
        """A cursor in an empty block at the end: what is inserted at a paragraph's end would join it."""
        cursor = self._end()
        if cursor.block().length() > 1:
            cursor.insertBlock(QTextBlockFormat())
        return cursor

    def _end(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())


def _completion_format(role: str, colours: theme.Theme) -> QTextCharFormat:
    """Completion mode's text: what was written in the text colour, what the model wrote in the assistant's."""
    fmt = QTextCharFormat()
    fmt.setForeground(colours.assistant if role == "assistant" else colours.text)
    return fmt


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
    split.insertBlock(below, cursor.charFormat())
    split.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    split.setBlockFormat(above)
    split.endEditBlock()
