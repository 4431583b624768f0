"""Pictures in a pane, driven as a person does, on the tiny model with a projector of random weights:
the attach button, a paste, a drop; the thumbnails in the transcript (one clicked opens the picture);
saved with the chat and sent again with the history; a model that sees none says so."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from conftest import write_projector
from pictures import gif, png
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage, QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog
from ui_fixtures import TINY_QUICK, set_params, until

from app.engine.images import Image
from app.ui.pane import pictures as pictures_module
from app.workspace.chat_store import ChatStore

pytestmark = pytest.mark.gui

N_IMAGE = 16


def _thumbnail_position(transcript) -> QPoint:
    """Where the transcript draws its first picture (an image in its document), in viewport pixels."""
    block = transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().isImageFormat():
                cursor = QTextCursor(transcript.document())
                cursor.setPosition(fragment.position())
                rect = transcript.cursorRect(cursor)
                return QPoint(rect.x() + 6, rect.bottom() - 6)
            it += 1
        block = block.next()
    raise AssertionError("no picture in the transcript")


def test_a_picture_attached_by_mouse_is_sent_shown_saved_and_sent_again(
    run_tiny_window, tiny_mmproj_path, tmp_path, monkeypatch, home
):
    red, blue = tmp_path / "red.png", tmp_path / "blue.png"
    red.write_bytes(png(40, 30, seed=1))
    blue.write_bytes(png(40, 30, seed=2))
    picked = [[str(red), str(blue)]]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *a, **k: (picked.pop(0), "")))

    async def scenario(window):
        pane = window.panes[0]
        set_params(window, TINY_QUICK.with_(max_tokens=4))
        assert pane.attach_button.isEnabled()
        QTest.mouseClick(pane.attach_button, Qt.MouseButton.LeftButton)
        assert len(pane.attachments.buttons) == 2 and pane.attachments.isVisible()
        QTest.mouseClick(pane.attachments.buttons[1], Qt.MouseButton.LeftButton)  # blue taken off again
        assert [p.digest for p in pane.session.attached] == [Image.of(red.read_bytes()).digest]
        QTest.keyClicks(pane.input, "What is in it?")
        QTest.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        assert not pane.attachments.isVisible() and pane.session.attached == []
        await until(lambda: not pane.is_busy, what="the reply")
        first = window.metrics.panes[pane.key]
        assert pane.chat.messages[0]["images"][0].digest == Image.of(red.read_bytes()).digest
        # its thumbnail, clicked, opens the picture whole
        QTest.mouseClick(pane.transcript.viewport(), Qt.MouseButton.LeftButton, pos=_thumbnail_position(pane.transcript))
        await until(lambda: pane.transcript.viewer is not None and pane.transcript.viewer.isVisible(), what="the viewer")
        assert pane.transcript.viewer.label.pixmap().width() == 40
        pane.transcript.viewer.close()
        # the next turn sends the picture again with the history: its cells are found, not read again
        QTest.keyClicks(pane.input, "And now?")
        QTest.keyClick(pane.input, Qt.Key.Key_Return)
        await until(lambda: not pane.is_busy, what="the second reply")
        again = window.metrics.panes[pane.key]
        return pane.key, first, again

    key, _first, again = run_tiny_window(scenario, panes=1, mmproj=tiny_mmproj_path)
    assert again.context_tokens > N_IMAGE
    saved = ChatStore(home).load(key)
    assert saved.messages[0]["images"] and saved.messages[0]["content"] == "What is in it?"


def test_a_pasted_and_a_dropped_picture_are_attached_and_a_bad_one_says_why(run_tiny_window, tiny_mmproj_path, tmp_path):
    animated = tmp_path / "moving.gif"
    animated.write_bytes(gif(frames=2))
    still = tmp_path / "still.png"
    still.write_bytes(png(seed=5))

    async def scenario(window):
        pane = window.panes[0]
        image = QImage(20, 10, QImage.Format.Format_RGB32)
        image.fill(Qt.GlobalColor.red)
        QApplication.clipboard().setImage(image)
        pane.input.setFocus()
        QTest.keyClick(pane.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
        assert len(pane.session.attached) == 1 and pane.input.toPlainText() == ""
        for path in (still, animated):  # dragged over the transcript and dropped: the pane takes it
            mime = QMimeData()
            mime.setUrls([QUrl.fromLocalFile(str(path))])
            over = pane.transcript.viewport()
            buttons, keys = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
            enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys)
            QApplication.sendEvent(over, enter)
            assert enter.isAccepted()
            QApplication.sendEvent(over, QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys))
        await asyncio.sleep(0)
        assert len(pane.session.attached) == 2
        assert pane.refusal_label.isVisible() and "animated GIF" in pane.refusal_label.text()

    run_tiny_window(scenario, panes=1, mmproj=tiny_mmproj_path)


def test_a_model_that_sees_no_images_keeps_the_attach_button_off(run_tiny_window, tmp_path):
    async def scenario(window):
        pane = window.panes[0]
        assert not pane.attach_button.isEnabled()
        assert "does not see images" in pane.attach_button.toolTip() and "--mmproj" in pane.attach_button.toolTip()

    run_tiny_window(scenario, panes=1, mmproj="none")


@pytest.mark.parametrize("data", [b"RIFF\x00\x00\x00\x00WEBPVP8 broken", b"just text"], ids=["webp-qt-cannot", "text"])
def test_a_file_no_reader_takes_is_refused(data, tmp_path, qapp):
    path = tmp_path / "file.bin"
    path.write_bytes(data)
    with pytest.raises(pictures_module.PictureError, match="file.bin"):
        pictures_module.read_picture_file(str(path))


def test_the_library_says_which_models_see_images_and_a_pane_attaches_for_those(
    run_tiny_window, qtbot, tmp_path, tiny_model_path, monkeypatch
):
    from test_ui_model_library import row_texts, show_library

    from app.ui.docks.model_library import ARCH

    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no other tool's folders
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(tiny_model_path, folder / "seeing.gguf")  # another file: the library tells loaded ones by their real path
    write_projector(tiny_model_path, folder / "mmproj-seeing-F16.gguf")

    async def scenario(window):
        pane = window.panes[0]
        assert not pane.attach_button.isEnabled()  # the tiny model alone sees nothing
        library = await show_library(window, qtbot)
        library.pick_folder = lambda: str(folder)
        qtbot.mouseClick(library.add_button, Qt.MouseButton.LeftButton)
        await until(lambda: library.row_of("seeing") >= 0, what="the folder's models")
        assert row_texts(library, "seeing")[ARCH] == "llama · sees images"
        assert "projector" in row_texts(library, "mmproj-seeing-F16")[ARCH]  # listed, not loadable as a model
        qtbot.mouseClick(library.load_button("seeing"), Qt.MouseButton.LeftButton)
        combo = pane.model_combo  # picked in the pane's header once it lists the model, as a person does
        await until(lambda: combo.findData("seeing") >= 0, what="the model with its projector in the pane's picker")
        assert window.client.models["seeing"].sees_images
        qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
        combo.view().setCurrentIndex(combo.model().index(combo.findData("seeing"), 0))
        qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
        assert pane.params.model == "seeing" and pane.attach_button.isEnabled()

    run_tiny_window(scenario, panes=1)
