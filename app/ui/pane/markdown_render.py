"""Markdown rendered into a QTextDocument by Qt's own reader, styled for a chat: headings sized for a
pane, code blocks shaded under a Copy code link that copies the code as written."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import (
    QFontInfo,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextFormat,
)

from app.ui import theme
from app.workspace.markdown_stream import fenced_code

# GitHub's Markdown (tables, strikethrough, links) through Qt's own reader; HTML in a reply is shown as text
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
COPY = "copy"  # the scheme of the Copy links: copy:message/<turn> and copy:code/<the code, percent-encoded>
PARAGRAPH_MARGIN = 6  # what Qt's Markdown reader puts above and below a paragraph
# a heading's size against the text's: in a chat pane an h1 is no page title (Qt's is twice the text)
HEADING_SCALE = {1: 1.3, 2: 1.15, 3: 1.05}


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
        code = written[number] if len(written) == len(code_starts) else code_from(first_line)
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
    cursor.setBlockFormat(code_bar_format(colours))
    link = QTextCharFormat()
    link.setAnchor(True)
    link.setAnchorHref(href)
    link.setForeground(colours.link)
    cursor.insertText("Copy code", link)


def code_bar_format(colours: theme.Theme) -> QTextBlockFormat:
    """The shaded line above a code block that its Copy code link takes."""
    bar = QTextBlockFormat()
    bar.setBackground(colours.code_background)  # the link on the left: a long line may take the right out of view
    bar.setTopMargin(PARAGRAPH_MARGIN)
    return bar


def code_from(block: QTextBlock) -> str:
    """The code block's text from its line `block` on (each line is a block of its own)."""
    lines = []
    while block.isValid() and block.blockFormat().nonBreakableLines():
        lines.append(block.text())
        block = block.next()
    return "\n".join(lines)
