"""The chat transcript: replies rendered from their Markdown (Qt's own reader), block by block while they
stream, the user's messages as typed; a Copy link on each message and each code block copies it as written."""

from __future__ import annotations

import bisect
import dataclasses
import html
import math
from dataclasses import dataclass, field

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QContextMenuEvent,
    QCursor,
    QDesktopServices,
    QFontDatabase,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QMenu, QTextBrowser, QToolTip

from app.engine.probs import TokenProbs
from app.ui import theme
from app.workspace.chat_store import NOTICE
from app.workspace.markdown_stream import MarkdownStream, json_reply
from app.workspace.session import LENGTH_NOTE

from .markdown_render import COPY, PARAGRAPH_MARGIN, code_bar_format, code_from, markdown_fragment
from .pictures import TRANSCRIPT_THUMB, PictureViewer, thumbnail
from .token_view import rivals_html, token_at, tokens_html

OPENED_SCHEMES = ("http", "https", "mailto")  # links in a reply that open; any other is copied
PICTURE = "picture"  # a sent picture's thumbnail: picture:<its SHA-256>, which opens it whole
FOLD = "fold"  # the scheme of a reply's thoughts' fold link: fold:thoughts/<turn>
THINKING = "Thinking…"


def thoughts_label(seconds: float, tokens: int) -> str:
    """What a folded thought says of itself: how long and how many tokens it took."""
    took = f" for {seconds:.1f} s" if math.isfinite(seconds) else ""
    return f"Thought{took} · {tokens} tokens" if tokens else f"Thought{took}"


def _insert_thoughts(cursor: QTextCursor, index: int, text: str, label: str, is_open: bool, colours: theme.Theme) -> None:
    """A reply's thoughts in the cursor's (empty) block: a fold link (▸ folded, ▾ open) saying `label`,
    and when open the thoughts, muted, in a block of their own; the cursor ends in the last block."""
    muted = theme.blend(colours.text, colours.base, 0.45)
    arrow = "▾" if is_open else "▸"
    link = (
        f'<a href="{FOLD}:thoughts/{index}" style="color:{muted.name()}; text-decoration:none;">{arrow} {html.escape(label)}</a>'
    )
    cursor.insertHtml(link)
    if not is_open:
        return
    block = QTextBlockFormat()
    block.setLeftMargin(12)
    cursor.insertBlock(block, _thought_format(colours))
    cursor.insertText(text.strip("\n"), _thought_format(colours))


def _thought_format(colours: theme.Theme) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(theme.blend(colours.text, colours.base, 0.45))
    fmt.setFontItalic(True)
    return fmt


def message_html(role: str, text: str, index: int, pictures: tuple = ()) -> str:
    """A user's turn or a notice as HTML (a reply is a heading and a `markdown_fragment`); `index`, the
    turn's place in the transcript, is what its Copy link copies; `pictures`: its thumbnails, each a
    link to the picture whole (the document holds their images: `Transcript._add_thumbnails`)."""
    colours = theme.current()
    if role == NOTICE:
        return f'<p style="color:{colours.notice.name()};"><i>{html.escape(text)}</i></p>'
    body = _typed_html(text)
    bubble = colours.user_bubble.name()
    heading = f"<b>You</b>&nbsp;&nbsp;{_copy_link(index, colours)}"
    shown = "".join(f'<a href="{PICTURE}:{p.digest}"><img src="{PICTURE}:{p.digest}"></a>&nbsp;' for p in pictures)
    shown = f"{shown}<br>" if shown else ""
    return f'<table width="100%" cellpadding="6" bgcolor="{bubble}"><tr><td>{heading}<br>{shown}{body}</td></tr></table>'


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


def _copied(href: str) -> tuple[str, str]:
    """What a Copy link copies: ("message", its turn's index) or ("code", the code)."""
    kind, _, what = QUrl(href).path(QUrl.ComponentFormattingOption.FullyDecoded).partition("/")
    return kind, what


@dataclass
class StreamingReply:
    """The reply that streams into the transcript: its text so far and where it stands in the document."""

    at: QTextCursor  # where its heading begins; a cursor, as text inserted before it (a split line) moves it
    end: QTextCursor  # stays at its end: moving a new cursor there costs a text shaping
    tail_start: int  # where the tail, its Markdown after the last finished block, begins
    pieces: list[str] = field(default_factory=list)
    markdown: MarkdownStream = field(default_factory=MarkdownStream)
    tail_format: QTextCharFormat = field(default_factory=QTextCharFormat)  # plain, or monospace in a code block
    width: int = 0  # the width the tail's lines were split at
    thoughts: list[str] = field(default_factory=list)  # a thinking model's, streamed before its answer
    thinking: bool = False  # its thoughts stream now: the answer has not begun
    thought_label: str = ""  # its folded thoughts' label, once the answer began

    @classmethod
    def at_position(cls, end: QTextCursor, start: int, tail_start: int) -> StreamingReply:
        at = QTextCursor(end.document())
        at.setPosition(start)
        at.setKeepPositionOnInsert(True)  # the reply's own text, inserted where it begins, is after it
        return cls(at, end, tail_start)

    @property
    def start(self) -> int:
        return self.at.position()

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def finished_markdown(self) -> str:
        """The answer's Markdown before its tail: its blocks already rendered."""
        text = self.text
        return text[: len(text) - len(self.markdown.tail)]


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
        self.viewer: PictureViewer | None = None  # the last picture opened whole
        self.open_thoughts: set[int] = set()  # the turns whose thoughts are unfolded
        self._messages: list[dict] = []  # the chat last shown, to show again when a fold opens or closes
        self._reply: StreamingReply | None = None  # from begin_reply until the chat with it is shown
        # Qt hands the scroll area its viewport's resizes, also when the scroll bar comes and goes
        # in the middle of an insert: the new layout waits for the event loop
        self._relayout = QTimer(self, interval=0, timeout=self._relayout_reply)
        self._relayout.setSingleShot(True)
        # the view stays at the end as text comes until the user scrolls away from it; a resize (a dock
        # opened) changes the range without the user, and must not stop the following
        self._following = True
        bar = self.verticalScrollBar()
        bar.actionTriggered.connect(self._on_user_scroll)
        bar.rangeChanged.connect(lambda _low, high: self._following and bar.setValue(high))

    def show_messages(self, messages: list[dict[str, str]]) -> None:
        """Show `messages`: appending what is new when the document already shows the ones before."""
        if self._reply is not None:  # the streamed reply gives way to its rendered form
            self._remove_reply()
            self._reply = None
        self._messages = list(messages)
        shown = [m for m in messages if m["role"] != "system"]
        turns = [(m["role"], m["content"]) for m in shown]
        if turns[: len(self._shown)] != self._shown:
            self.clear()
            self._shown, self._starts = [], []
            # a cleared chat or a regenerated reply: drop the token views of turns it no longer has
            self.token_probs = {i: drawn for i, drawn in self.token_probs.items() if i < len(turns) and turns[i][1] == drawn[0]}
        for number, turn in enumerate(turns[len(self._shown) :], len(self._shown)):
            cut = None
            if shown[number].get("json") and not self.completion:  # asked for as JSON, whatever the format is now
                after = turns[number + 1] if number + 1 < len(turns) else ("", "")
                cut = after[0] == NOTICE and after[1].startswith(LENGTH_NOTE)
            flows_on = self.completion and turn[0] != NOTICE and (not self._shown or self._shown[-1][0] != NOTICE)
            cursor = self._end() if flows_on else self._new_block()  # one text: what follows goes on in its line
            self._starts.append(cursor.position())
            self._insert_turn(cursor, *turn, cut, shown[number])
            self._shown.append(turn)
        self._scroll_to_end()

    def _insert_turn(
        self, cursor: QTextCursor, role: str, text: str, cut: bool | None = None, message: dict | None = None
    ) -> None:
        """`cut`: for a JSON reply (None: not one), whether max tokens cut it; `message`: the turn as
        the chat holds it (a reply's thoughts)."""
        index, colours = len(self._shown), theme.current()
        if self.completion and role != NOTICE:
            cursor.insertText(text, _completion_format(role, colours))
        elif role in ("user", NOTICE):
            pictures = tuple((message or {}).get("images", ()))
            self._add_thumbnails(pictures)
            cursor.insertHtml(message_html(role, text, index, pictures))
        else:
            _insert_assistant_heading(cursor, index, colours)
            message = message or {}
            if message.get("reasoning"):
                cursor.insertBlock(QTextBlockFormat())
                label = thoughts_label(message.get("reasoning_s", math.nan), message.get("reasoning_tokens", 0))
                _insert_thoughts(cursor, index, message["reasoning"], label, index in self.open_thoughts, colours)
                if not text:
                    return
            drawn = self.token_probs.get(index)
            if self.show_probs and drawn is not None and drawn[0] == text:
                cursor.insertBlock(QTextBlockFormat())
                cursor.insertHtml(tokens_html(index, drawn[1], colours, text))
            else:
                markdown = text if cut is None else json_reply(text, cut)
                cursor.insertFragment(markdown_fragment(markdown, colours, under_name=not message.get("reasoning")))

    def _add_thumbnails(self, pictures: tuple) -> None:
        """The document's images of a turn's thumbnails, by their links' names."""
        for picture in pictures:
            name = QUrl(f"{PICTURE}:{picture.digest}")
            self.document().addResource(QTextDocument.ResourceType.ImageResource, name, thumbnail(picture, TRANSCRIPT_THUMB))

    def open_picture(self, digest: str) -> PictureViewer | None:
        """A sent picture, whole, in a window of its own."""
        picture = next((p for m in self._messages for p in m.get("images", ()) if p.digest == digest), None)
        if picture is None:
            return None
        self.viewer = PictureViewer(picture, self)
        self.viewer.show()
        return self.viewer

    def redraw(self, messages: list[dict[str, str]]) -> None:
        """Show `messages` afresh (after the token view was turned on or off)."""
        self.clear()
        self._shown, self._starts = [], []
        self.show_messages(messages)

    def begin_reply(self, messages: list[dict[str, str]]) -> None:
        """Show the chat plus an empty assistant turn that streamed text is appended to."""
        self.show_messages(messages)
        if self.completion:  # the model's text goes on where the text stands, as it comes
            end = self._end()
            self._reply = StreamingReply.at_position(end, end.position(), end.position())
            self._scroll_to_end()
            return
        cursor = self._new_block()
        start = cursor.position()
        _insert_assistant_heading(cursor, len(self._shown), theme.current())
        cursor.insertBlock(QTextBlockFormat())
        self._reply = StreamingReply.at_position(cursor, start, cursor.position())
        self._show_tail()
        self._scroll_to_end()

    @property
    def is_thinking(self) -> bool:
        """A reply streams its thoughts, and its answer has not begun."""
        return self._reply is not None and self._reply.thinking

    def append_thoughts(self, text: str) -> None:
        """More of the streaming reply's thoughts, shown as they come under an open fold (▾ Thinking…)."""
        at_bottom = self._following
        reply = self._reply
        reply.thoughts.append(text)
        if self.completion:
            return  # one text: the thoughts are not shown in it
        if not reply.thinking:
            reply.thinking = True
            cursor = reply.end  # the empty tail block: no answer yet
            cursor.setBlockFormat(QTextBlockFormat())  # not the tail's paragraph margins
            colours = theme.current()
            _insert_thoughts(cursor, len(self._shown), "", THINKING, True, colours)
            text = text.lstrip("\n")
        reply.end.insertText(text, _thought_format(theme.current()))
        _split_finished_lines(reply.end)
        if at_bottom:
            self._scroll_to_end()

    def end_thoughts(self, seconds: float, tokens: int) -> None:
        """The answer begins: the thoughts fold away (▸ Thought for 3.2 s · 45 tokens) unless opened."""
        reply = self._reply
        reply.thinking = False
        reply.thought_label = thoughts_label(seconds, tokens)
        self._rebuild_reply()

    def _rebuild_reply(self) -> None:
        """Lay the streaming reply out again: its heading, its thoughts (open while it thinks; then
        folded, or open if opened), the answer's rendered blocks and its tail."""
        reply = self._reply
        self._remove_reply()
        cursor = self._end()
        colours, index = theme.current(), len(self._shown)
        _insert_assistant_heading(cursor, index, colours)
        if reply.thoughts:
            cursor.insertBlock(QTextBlockFormat())
            label = THINKING if reply.thinking else reply.thought_label
            is_open = reply.thinking or index in self.open_thoughts
            _insert_thoughts(cursor, index, "".join(reply.thoughts), label, is_open, colours)
            if reply.thinking:  # more thoughts go on at their end; the answer's tail comes after them
                reply.end, reply.tail_start = cursor, cursor.position()
                return
        if reply.finished_markdown.strip():
            cursor.insertFragment(markdown_fragment(reply.finished_markdown, colours, under_name=not reply.thoughts))
            cursor = self._end()
        cursor.insertBlock(QTextBlockFormat())
        reply.end, reply.tail_start = cursor, cursor.position()
        self._show_tail()
        if self._following:
            self._scroll_to_end()

    def toggle_thoughts(self, index: int) -> None:
        """Open or fold the thoughts of turn `index` (the streaming reply's too)."""
        self.open_thoughts ^= {index}
        reply = self._reply
        if reply is not None and index == len(self._shown):
            if not reply.thinking:  # while it thinks they stay open; the choice holds once it answers
                self._rebuild_reply()
            return
        following, value = self._following, self.verticalScrollBar().value()
        self._reply = None  # the chat is drawn again; a reply that streams under it is laid out after it
        self.redraw(self._messages)
        if reply is not None:
            cursor = self._new_block()
            moved = StreamingReply.at_position(cursor, cursor.position(), cursor.position())
            self._reply = dataclasses.replace(reply, at=moved.at, end=moved.end, tail_start=moved.tail_start)
            self._rebuild_reply()
        if not following:
            self.verticalScrollBar().setValue(value)

    def append_reply(self, text: str) -> None:
        at_bottom = self._following
        reply = self._reply
        reply.pieces.append(text)
        if self.completion:
            reply.end.insertText(text, _completion_format("assistant", theme.current()))
            _split_finished_lines(reply.end)
            if at_bottom:
                self._scroll_to_end()
            return
        markdown = reply.markdown
        blank = not markdown.tail.strip()  # shown without its blank lines, which text now follows
        if finished := markdown.feed(text):
            self._render_finished(finished)
            self._show_tail()
        elif blank or (markdown.line_ended and not reply.tail_format.fontFixedPitch() and markdown.open_code is not None):
            self._show_tail()  # the first text after blank lines, or a code block begun: laid out anew
        else:
            reply.end.insertText(text, reply.tail_format)
            _split_finished_lines(reply.end)
        if at_bottom:  # follow the stream unless the user scrolled up to read
            self._scroll_to_end()

    def _render_finished(self, markdown: str) -> None:
        """Put the rendered form of the tail's finished blocks in its place, and a new tail after them."""
        reply = self._reply
        cursor = reply.end
        cursor.setPosition(reply.tail_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if not markdown.strip():
            return
        under_name = cursor.block().previous().position() == reply.start
        cursor.insertFragment(markdown_fragment(markdown, theme.current(), under_name))
        # the emptied tail block took the fragment's empty first one; removing its end joins it to the
        # next, which keeps its own format: a block's format survives the removal of the break before it
        QTextCursor(self.document().findBlock(reply.tail_start)).deleteChar()
        cursor = self._end()
        cursor.insertBlock(QTextBlockFormat())
        reply.tail_start = cursor.position()
        reply.end = cursor

    def _show_tail(self) -> None:
        """Lay out the tail anew, as it came but for blank lines before it; an open code block already
        shaded and monospace, under the line its Copy code link will take."""
        reply = self._reply
        reply.width = self.viewport().width()
        cursor = reply.end
        cursor.setPosition(reply.tail_start, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        colours = theme.current()
        code = reply.markdown.open_code
        paragraph = QTextBlockFormat()
        reply.tail_format = QTextCharFormat()
        if code is not None:
            cursor.setBlockFormat(code_bar_format(colours))
            paragraph.setNonBreakableLines(True)
            paragraph.setBackground(colours.code_background)
            reply.tail_format.setFontFamilies([QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()])
            reply.tail_format.setFontFixedPitch(True)
            cursor.insertBlock(paragraph)
        else:
            under_name = cursor.block().previous().position() == reply.start
            paragraph.setTopMargin(0 if under_name else PARAGRAPH_MARGIN)
            paragraph.setBottomMargin(PARAGRAPH_MARGIN)
            cursor.setBlockFormat(paragraph)
        cursor.insertText(reply.markdown.tail.lstrip("\n") if code is None else code, reply.tail_format)
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
        if url.scheme() == PICTURE:
            self.open_picture(url.path())
            return
        if url.scheme() == FOLD:
            _, what = _copied(url.toString())
            if what.isdigit():
                self.toggle_thoughts(int(what))
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
        if index < len(self._shown):
            return self._shown[index][1]
        return self._reply.text if self._reply is not None else ""

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
    def reply_start(self) -> int | None:
        """Where the streaming reply's heading begins in the document; None when no reply streams."""
        return self._reply.start if self._reply is not None else None

    def message_at(self, position: int) -> str | None:
        """The text of the turn shown at a document position, also of the reply streaming."""
        if self._reply is not None and position >= self._reply.start:
            return self._reply.text
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
        return _copied(link)[1] if link.startswith(f"{COPY}:code/") else code_from(block)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self._reply is not None:
            self._relayout.start()

    def _relayout_reply(self) -> None:
        """The tail's lines were split where the old width wrapped them: lay them out anew."""
        if self._reply is not None and not self.completion and self.viewport().width() != self._reply.width:
            if self._reply.thinking:  # the thoughts' lines too
                self._reply.width = self.viewport().width()
                self._rebuild_reply()
            else:
                self._show_tail()

    def _remove_reply(self) -> None:
        cursor = self._end()
        cursor.setPosition(self._reply.start, QTextCursor.MoveMode.KeepAnchor)
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
        self._following = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _on_user_scroll(self, _action: int) -> None:
        """A scroll by the wheel, the keys or the bar: follow again only once back at the end (the
        slider's position is the new one here, its value not yet)."""
        bar = self.verticalScrollBar()
        self._following = bar.sliderPosition() >= bar.maximum() - 4


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
