"""The transcript renders a reply's Markdown with Qt's own reader and copies a message or a code block
from its context menu."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QContextMenuEvent, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication
from ui_fixtures import QUICK, set_params, until

from app.ui.theme import Theme, contrast, dark_palette
from app.ui.transcript import Transcript

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


def test_links_in_a_dark_palette_read(qtbot, qapp):
    before = qapp.palette()
    qapp.setPalette(dark_palette())
    try:
        transcript = shown_transcript(qtbot, CHAT)
        shown = transcript.document().find("the guide").charFormat().foreground().color()
        assert contrast(shown, transcript.palette().color(QPalette.ColorRole.Base)) >= 4.5
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
        await until(lambda: len("".join(pane._received).split()) >= 3, what="a few words")
        pane.flush()
        transcript = pane.transcript
        word = "".join(pane._received).split()[0]
        streamed = await right_click_and_choose(qtbot, transcript, word, "Copy message", after=transcript._reply_start)
        assert streamed and "".join(pane._received).startswith(streamed)  # the reply so far
        await until(lambda: not pane.is_busy, what="the reply")
        reply = pane.chat.messages[1]["content"]
        heading = transcript.document().findBlock(transcript._starts[1])
        word = heading.next().text().split()[0]  # the rendered reply's first word
        assert await right_click_and_choose(qtbot, transcript, word, "Copy message", after=heading.position()) == reply

    run_window(scenario, panes=1)
