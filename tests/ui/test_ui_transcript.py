"""The transcript renders a reply's Markdown with Qt's own reader, block by block while it streams, and
copies a message or a code block from its Copy links and its context menu."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QObject, QPoint, Qt, QUrl, Slot
from PySide6.QtGui import QContextMenuEvent, QDesktopServices, QFontInfo, QGuiApplication, QPalette, QTextCursor
from PySide6.QtWidgets import QApplication, QToolTip
from ui_fixtures import QUICK, set_params, until

from app.ui.pane.transcript import Transcript
from app.ui.theme import Theme, contrast, dark_palette

pytestmark = pytest.mark.gui

CODE = 'def grams_to_ounces(g):\n    return g / 28.35  # "<ounces>"'
REPLY = f"""# Cooking

Use **good** knives, see [the guide](https://example.test/guide).

- sharp
- clean

> Practice makes perfect.

| tool | use |
|------|-----|
| knife | cutting |

```python
{CODE}
```

Raw <b>html</b> shows as text."""
CHAT = [{"role": "user", "content": "Tips?"}, {"role": "assistant", "content": REPLY}]


def shown_transcript(qtbot, messages) -> Transcript:
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.resize(520, 900)
    transcript.show()
    transcript.show_messages(messages)
    return transcript


def blocks(transcript: Transcript):
    block = transcript.document().begin()
    while block.isValid():
        yield block
        block = block.next()


def test_a_reply_shows_its_markdown(qtbot):
    transcript = shown_transcript(qtbot, CHAT)
    by_text = {b.text(): b for b in blocks(transcript)}
    assert by_text["Cooking"].blockFormat().headingLevel() == 1
    assert by_text["sharp"].textList() is not None and by_text["clean"].textList() is not None
    assert by_text["Practice makes perfect."].blockFormat().leftMargin() > 0  # the quote is indented
    assert transcript.document().find("cutting").currentTable() is not None
    link = transcript.document().find("the guide")
    assert link.charFormat().anchorHref() == "https://example.test/guide"
    assert link.charFormat().foreground().color().name() == Theme.of(QGuiApplication.palette()).link.name()
    assert transcript.document().find("good").charFormat().fontWeight() == 700
    code = by_text['    return g / 28.35  # "<ounces>"']
    assert code.blockFormat().nonBreakableLines()
    assert code.blockFormat().background().color().name() == Theme.of(QGuiApplication.palette()).code_background.name()
    assert "Raw <b>html</b> shows as text." in transcript.toPlainText()
    assert "# Cooking" not in transcript.toPlainText() and "**good**" not in transcript.toPlainText()


@pytest.mark.parametrize("dark", [False, True])
def test_links_read_on_what_they_are_shown_on(qtbot, qapp, dark):
    before = qapp.palette()
    if dark:
        qapp.setPalette(dark_palette())
    try:
        transcript = shown_transcript(qtbot, CHAT)
        colours = Theme.of(qapp.palette())
        document = transcript.document()
        shown = document.find("the guide").charFormat().foreground().color()
        assert contrast(shown, transcript.palette().color(QPalette.ColorRole.Base)) >= 4.5
        copy_code = document.find("Copy code")
        on = copy_code.block().blockFormat().background().color()
        assert contrast(copy_code.charFormat().foreground().color(), on) >= 4.5
        copy_yours = document.find("Copy")  # in the user's bubble
        assert copy_yours.charFormat().foreground().color() == colours.link
        assert contrast(colours.link, colours.user_bubble) >= 4.5
    finally:
        qapp.setPalette(before)


async def right_click_and_choose(qtbot, transcript: Transcript, text: str, label: str, after: int = 0) -> str:
    """Right-click on `text` where it is shown (first after position `after`), click `label` in the menu;
    the clipboard after. A coroutine: the panes' tasks run on while the menu is open, as in the app."""
    QGuiApplication.clipboard().clear()
    found = transcript.document().find(text, after)
    assert not found.isNull(), text
    found.setPosition(found.selectionStart() + 1)
    spot = transcript.cursorRect(found).center()
    # the event a right click (or the Menu key) becomes; QTest's right click reaches the widget without it
    viewport = transcript.viewport()
    QApplication.sendEvent(viewport, QContextMenuEvent(QContextMenuEvent.Reason.Mouse, spot, viewport.mapToGlobal(spot)))
    await until(lambda: transcript.context_menu is not None and transcript.context_menu.isVisible(), 5, "the menu")
    menu = transcript.context_menu
    action = next((a for a in menu.actions() if a.text() == label), None)
    assert action is not None, [a.text() for a in menu.actions()]
    qtbot.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(action).center())
    await until(lambda: transcript.context_menu is None, 5, "the menu to close")  # closed with the click, and deleted
    return QGuiApplication.clipboard().text()


def test_copy_a_code_block_or_a_message_from_the_context_menu(qtbot, loop):
    transcript = shown_transcript(qtbot, CHAT)

    def copied(text: str, label: str) -> str:
        return loop.run_until_complete(right_click_and_choose(qtbot, transcript, text, label))

    assert copied("28.35", "Copy code block") == CODE
    assert copied("28.35", "Copy message") == REPLY  # the Markdown, as written
    assert copied("Practice", "Copy message") == REPLY
    assert copied("Tips?", "Copy message") == "Tips?"


def test_copy_a_streaming_reply_and_then_the_finished_one(run_window, qtbot):
    async def scenario(window):
        pane = window.panes[0]
        set_params(window, QUICK)
        qtbot.keyClicks(pane.input, "Name three fruits.")
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: len(pane.session.streamed.split()) >= 3, what="a few words")
        pane.flush()
        transcript = pane.transcript
        word = pane.session.streamed.split()[0]
        streamed = await right_click_and_choose(qtbot, transcript, word, "Copy message", after=transcript.reply_start)
        assert streamed and pane.session.streamed.startswith(streamed)  # the reply so far
        assert pane.session.streamed.startswith(click_link(qtbot, transcript, "copy:message/", 1))
        await until(lambda: not pane.is_busy, what="the reply")
        reply = pane.chat.messages[1]["content"]
        heading = transcript.document().findBlock(transcript.turn_start(1))
        word = heading.next().text().split()[0]  # the rendered reply's first word
        assert await right_click_and_choose(qtbot, transcript, word, "Copy message", after=heading.position()) == reply
        assert click_link(qtbot, transcript, "copy:message/", 1) == reply

    run_window(scenario, panes=1)


def link_spots(transcript: Transcript, href_start: str) -> list[QPoint]:
    """Where the links whose href begins with `href_start` are shown, in the viewport, in document order."""
    spots, block = [], transcript.document().begin()
    while block.isValid():
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            if fragment.charFormat().anchorHref().startswith(href_start):
                cursor = QTextCursor(transcript.document())
                cursor.setPosition(fragment.position() + 1)
                spots.append(transcript.cursorRect(cursor).center())
            fragments += 1
        block = block.next()
    return spots


def click_link(qtbot, transcript: Transcript, href_start: str, nth: int = 0) -> str:
    """Click the `nth` link whose href begins so, as a person would; the clipboard after."""
    QGuiApplication.clipboard().setText("")
    qtbot.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=link_spots(transcript, href_start)[nth])
    return QGuiApplication.clipboard().text()


TRICKY_CODE = 'print("100% #1?")\n\tpath = "C:\\\\temp" & é'


def test_copy_links_copy_each_message_and_code_block_as_written(qtbot):
    code_reply = f"Two blocks:\n\n```\n{TRICKY_CODE}\n```\n\nand\n\n~~~sh\nls -l\n~~~"
    transcript = shown_transcript(
        qtbot, [*CHAT, {"role": "user", "content": "More"}, {"role": "assistant", "content": code_reply}]
    )
    assert click_link(qtbot, transcript, "copy:code/") == CODE
    assert QToolTip.text() == "Copied"  # said where the mouse is
    assert click_link(qtbot, transcript, "copy:code/", 1) == TRICKY_CODE
    assert click_link(qtbot, transcript, "copy:code/", 2) == "ls -l"
    messages = [m["content"] for m in transcript_messages(transcript)]
    assert [click_link(qtbot, transcript, "copy:message/", i) for i in range(4)] == messages
    shown = transcript.document().find("Copy code")
    assert shown.block().blockFormat().background().color() == Theme.of(QGuiApplication.palette()).code_background
    assert shown.block().next().blockFormat().nonBreakableLines()  # right above its code


def transcript_messages(transcript: Transcript) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in transcript.shown_turns]


class Browser(QObject):
    """Stands in for the desktop's browser: QDesktopServices hands it the URLs it would open."""

    def __init__(self):
        super().__init__()
        self.opened: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.opened.append(url)


def test_a_link_in_a_reply_opens_in_the_browser_and_copies_nothing(qtbot):
    transcript = shown_transcript(qtbot, CHAT)
    browser = Browser()
    QDesktopServices.setUrlHandler("https", browser, "open")
    try:
        assert click_link(qtbot, transcript, "https://") == ""
    finally:
        QDesktopServices.unsetUrlHandler("https")
    assert browser.opened == [QUrl("https://example.test/guide")]
    assert "the guide" in transcript.toPlainText()  # the transcript did not navigate away


def test_a_link_of_any_other_scheme_is_copied_not_opened(qtbot):
    reply = (
        "See [the file](file:///etc/passwd), [the app](foo:bar), [the page](https://example.test/page)"
        " and [a copy link of its own](copy:message/abc)."
    )
    transcript = shown_transcript(qtbot, [{"role": "user", "content": "Links?"}, {"role": "assistant", "content": reply}])
    browser = Browser()
    for scheme in ("file", "foo", "https"):
        QDesktopServices.setUrlHandler(scheme, browser, "open")
    try:
        assert click_link(qtbot, transcript, "file:") == "file:///etc/passwd"
        assert QToolTip.text() == "Copied, not opened: a file link"
        assert click_link(qtbot, transcript, "foo:") == "foo:bar"
        assert QToolTip.text() == "Copied, not opened: a foo link"
        assert browser.opened == []
        assert click_link(qtbot, transcript, "copy:message/abc") == "copy:message/abc"  # no message of that number
        assert QToolTip.text() == "Copied, not opened: a copy link"
        assert click_link(qtbot, transcript, "https:") == ""
    finally:
        for scheme in ("file", "foo", "https"):
            QDesktopServices.unsetUrlHandler(scheme)
    assert browser.opened == [QUrl("https://example.test/page")]


def body_size(transcript: Transcript) -> float:
    return QFontInfo(transcript.document().defaultFont()).pointSizeF()


def test_headings_are_a_little_larger_than_the_text_not_page_titles(qtbot):
    reply = "# One\n\n## Two\n\n### Three\n\n#### Four\n\ntext"
    transcript = shown_transcript(qtbot, [{"role": "user", "content": "?"}, {"role": "assistant", "content": reply}])
    sizes = [
        QFontInfo(transcript.document().find(word).charFormat().font()).pointSizeF() for word in ("One", "Two", "Three", "Four")
    ]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[2]
    assert body_size(transcript) <= sizes[-1] and sizes[0] <= 1.5 * body_size(transcript)


def stream(transcript: Transcript, qapp, text: str, piece: int = 3) -> None:
    for i in range(0, len(text), piece):
        transcript.append_reply(text[i : i + piece])
        qapp.processEvents()


def test_a_streaming_reply_shows_its_finished_blocks_rendered(qtbot, qapp):
    transcript = shown_transcript(qtbot, [])
    transcript.begin_reply(CHAT[:1])
    in_list, in_code = REPLY.index("- sharp") + 4, REPLY.index("return g")
    stream(transcript, qapp, REPLY[:in_list])
    document = transcript.document()
    assert document.find("Cooking").block().blockFormat().headingLevel() == 1
    assert "# Cooking" not in transcript.toPlainText() and "**good**" not in transcript.toPlainText()
    assert document.find("the guide").charFormat().anchorHref() == "https://example.test/guide"
    assert transcript.toPlainText().endswith("\n- sh")  # the block in progress, as it came
    stream(transcript, qapp, REPLY[in_list:in_code])  # the code block is open
    line = document.find("def grams_to_ounces(g):").block()
    assert line.blockFormat().nonBreakableLines() and "```" not in transcript.toPlainText()
    assert document.find("cutting").currentTable() is not None  # the table before it is rendered
    assert document.find("sharp").block().textList() is not None
    assert click_link(qtbot, transcript, "copy:message/") == "Tips?"
    assert click_link(qtbot, transcript, "copy:message/", 1) == REPLY[:in_code]  # so far
    stream(transcript, qapp, REPLY[in_code:])
    assert click_link(qtbot, transcript, "copy:code/") == CODE  # the code block, closed, is rendered
    streamed = transcript.toPlainText()
    transcript.show_messages(CHAT)
    assert transcript.toPlainText() == streamed == shown_transcript(qtbot, CHAT).toPlainText()


def test_the_block_in_progress_shows_without_the_blank_lines_before_it(qtbot, qapp):
    transcript = shown_transcript(qtbot, [])
    transcript.begin_reply(CHAT[:1])
    stream(transcript, qapp, "```\nx = 1\n```\n\n\n (an indented line: it may go on a list item)", 1)
    assert transcript.toPlainText().endswith("\nx = 1\n (an indented line: it may go on a list item)")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "# Title\n",
                "text ",
                "more",
                "\n",
                "\n\n",
                "- item\n",
                "1. one\n",
                "  indented\n",
                "```py\n",
                "```\n",
                "~~~\n",
                "| a | b |\n|---|---|\n| 1 | 2 |\n",
                "> quote\n",
                "`x`",
            ]
        ),
        max_size=25,
    ),
    st.integers(1, 7),
)
def test_any_reply_streamed_in_any_pieces_ends_shown_as_its_rendering(qapp, parts, piece):
    reply, finished = "".join(parts), [CHAT[0], {"role": "assistant", "content": "".join(parts)}]
    streamed, rendered = Transcript(), Transcript()  # not shown: a hundred windows would be slow
    streamed.begin_reply(CHAT[:1])
    stream(streamed, qapp, reply, piece)
    assert streamed.message_at(streamed.document().characterCount() - 1) == reply
    streamed.show_messages(finished)
    rendered.show_messages(finished)
    assert streamed.toHtml() == rendered.toHtml()


def test_a_streaming_reply_stays_followed_through_a_resize_until_the_user_scrolls_up(qtbot, qapp):
    transcript = shown_transcript(qtbot, [])
    transcript.resize(400, 200)
    transcript.begin_reply(CHAT[:1])
    bar = transcript.verticalScrollBar()
    words = "".join(f"word{i} " for i in range(400))
    stream(transcript, qapp, words[:1500], piece=20)
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    transcript.resize(260, 150)  # a dock opened beside the pane: the text reflows, taller
    qapp.processEvents()
    stream(transcript, qapp, words[1500:2000], piece=20)
    assert bar.value() == bar.maximum()  # still following
    bar.triggerAction(bar.SliderAction.SliderPageStepSub)  # the user pages up to read
    read_at = bar.value()
    stream(transcript, qapp, words[2000:], piece=20)
    assert bar.value() == read_at < bar.maximum()  # left where the user reads
    bar.triggerAction(bar.SliderAction.SliderToMaximum)  # back at the end: followed again
    transcript.append_reply(" more words")
    qapp.processEvents()
    assert bar.value() == bar.maximum()


def test_a_completion_streamed_into_a_wrapping_paragraph_is_shown_whole_when_it_ends(qtbot, qapp):
    """The reply flows on in the paragraph of the text before it; a line of that paragraph split off
    while it streams must not move where the reply begins (it cut a letter off the text before)."""
    transcript = shown_transcript(qtbot, [])
    transcript.completion = True
    transcript.resize(180, 400)
    before = [{"role": "user", "content": "Once upon a time, in a small village by the sea, there was"}]
    before.append({"role": "assistant", "content": " a wise old wizard named Thorin. He"})
    transcript.show_messages(before)
    transcript.begin_reply(before)
    reply = " lived in a tower surrounded by a beautiful garden filled with all"
    stream(transcript, qapp, reply)
    transcript.show_messages([*before, {"role": "assistant", "content": reply}])
    whole = "".join(m["content"] for m in before) + reply
    assert transcript.toPlainText().replace("\n", "") == whole
