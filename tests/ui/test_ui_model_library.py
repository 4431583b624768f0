"""The model library dock in the real window: a folder added with its button lists its models (and the
files that are not, with the reason), other tools' folders are listed without being added; a row's
Load puts the model beside the first (a pane picks it in its header), Unload frees it; a model
llama.cpp refuses is said, and the others stay."""

from __future__ import annotations

import shutil

import pytest
from gguf_files import copy_head, write_gguf
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QToolBar
from ui_fixtures import QUICK, set_params, until

from app.ui.docks.model_library import ARCH, CONTEXT, PARAMS, QUANT, SIZE, SOURCE, TEMPLATE
from app.ui.settings import AppSettings, open_qsettings

pytestmark = pytest.mark.gui

BUNDLED = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture
def user_home(tmp_path, monkeypatch):
    """A home of the test's own, so the other tools' folders are the test's, not this machine's."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def row_texts(library, name: str) -> dict[int, str]:
    row = library.row_of(name)
    assert row >= 0, f"{name} is not listed"
    return {c: library.table.item(row, c).text() for c in range(library.table.columnCount()) if library.table.item(row, c)}


async def show_library(window, qtbot):
    toolbar = window.findChild(QToolBar, "main-toolbar")
    qtbot.mouseClick(toolbar.widgetForAction(window.library_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
    assert window.library.isVisible()
    await until(lambda: window.library.scan_result is not None, what="the first scan")  # showing it scans
    return window.library


def test_a_folder_added_with_the_button_lists_its_models_and_a_loaded_one_is_picked_in_a_pane(
    run_window, qtbot, tmp_path, model_path, user_home
):
    folder = tmp_path / "models"
    folder.mkdir()
    second = folder / "second-model.gguf"
    shutil.copy(model_path, second)
    (folder / "notes.gguf").write_text("these are notes, not a model")
    copy_head(model_path, folder / "half-downloaded.gguf", 50_000_000)
    lm_studio = user_home / ".lmstudio" / "models" / "someone" / "tiny-base"
    lm_studio.mkdir(parents=True)
    write_gguf(lm_studio / "tiny-base.gguf", context=2048)

    async def scenario(window):
        library = await show_library(window, qtbot)
        assert library.load_button(BUNDLED).text() == "Unload" and not library.load_button(BUNDLED).isEnabled()  # the last
        assert row_texts(library, "tiny-base")[SOURCE] == "LM Studio"  # found without being added
        assert row_texts(library, "tiny-base")[TEMPLATE] == "none: a base model"
        assert library.row_of("second-model") == -1

        library.pick_folder = lambda: str(folder)  # the folder dialog's answer
        qtbot.mouseClick(library.add_button, Qt.MouseButton.LeftButton)
        await until(lambda: library.row_of("second-model") >= 0, what="the added folder's models")
        row = row_texts(library, "second-model")
        assert (row[SOURCE], row[ARCH], row[PARAMS], row[QUANT], row[SIZE], row[CONTEXT], row[TEMPLATE]) == (
            "models",
            "llama",
            "135M",
            "Q4_1",
            "98 MB",
            "8,192",
            "yes",
        )
        assert row_texts(library, "notes")[ARCH] == "not a GGUF file (it starts with 'thes', not 'GGUF')"
        assert row_texts(library, "half-downloaded")[ARCH].startswith("truncated: the file has 50.0 MB of the 98.4 MB")
        assert not library.load_button("notes").isEnabled() and not library.load_button("half-downloaded").isEnabled()
        assert "2 that cannot be loaded" in library.status.text()
        assert AppSettings(open_qsettings()).library_folders == [str(folder)]  # remembered

        qtbot.mouseClick(library.load_button("second-model"), Qt.MouseButton.LeftButton)
        assert library.load_button("second-model").text() == "Loading…" and not library.load_button(BUNDLED).isEnabled()
        await until(lambda: library.load_button("second-model").text() == "Unload", what="the second model")
        assert list(window.client.models) == [BUNDLED, "second-model"]  # beside the first
        assert window.windowTitle().startswith(f"{BUNDLED} + second-model")
        assert library.load_button(BUNDLED).isEnabled()  # no longer the last
        assert AppSettings(open_qsettings()).extra_models == [str(second)]  # loaded again at the next start

        pane = window.panes[0]  # the pane picks it in its header, and chats with it
        set_params(window, QUICK)
        combo = pane.model_combo
        assert combo.isVisible() and [combo.itemData(i) for i in range(combo.count())] == [BUNDLED, "second-model"]
        qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
        combo.view().setCurrentIndex(combo.model().index(1, 0))
        qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
        assert pane.params.model == "second-model" and pane.session.model == "second-model"
        assert combo.currentText() == "…nd-model" and "Pane 1 · second-model" in window.plots.legend.text  # its end
        finals = []
        pane.sigReplyFinished.connect(finals.append)
        qtbot.keyClicks(pane.input, "Say hello.")
        qtbot.keyClick(pane.input, Qt.Key.Key_Return)
        await until(lambda: not pane.is_busy, what="a reply from the second model")
        assert finals[0].model == "second-model" and pane.chat.messages[1]["content"]
        assert pane.chat.model == "second-model.gguf"

        qtbot.mouseClick(library.load_button("second-model"), Qt.MouseButton.LeftButton)  # Unload
        await until(lambda: list(window.client.models) == [BUNDLED], what="the second model unloaded")
        assert not combo.isVisible() and pane.session.model is None  # the pane goes on with the first
        assert library.load_button("second-model").text() == "Load" and AppSettings(open_qsettings()).extra_models == []

        library.remove_menu.actions()[0].trigger()  # Remove folder ▸ the folder
        await until(lambda: library.row_of("second-model") == -1, what="the folder's rows gone")
        assert AppSettings(open_qsettings()).library_folders == []

    run_window(scenario, panes=1)


def test_a_model_llama_cpp_refuses_leaves_the_previous_one(run_window, qtbot, tmp_path, model_path, user_home):
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf(folder / "headers-only.gguf", context=4096, template="{{ messages }}")  # reads well; no real weights

    async def scenario(window):
        window.activateWindow()
        QTest.qWaitForWindowActive(window)
        QTest.keyClick(window, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)  # View ▸ Model library
        library = window.library
        assert library.isVisible()
        library.pick_folder = lambda: str(folder)
        qtbot.mouseClick(library.add_button, Qt.MouseButton.LeftButton)
        await until(lambda: library.row_of("headers-only") >= 0, what="the added folder's model")
        assert library.load_button("headers-only").isEnabled()
        qtbot.mouseClick(library.load_button("headers-only"), Qt.MouseButton.LeftButton)
        await until(lambda: "Not loaded" in library.status.text(), what="the refusal")
        assert "headers-only.gguf" in library.status.text()
        assert list(window.client.models) == [BUNDLED] and library.load_button(BUNDLED).text() == "Unload"
        assert library.load_button("headers-only").isEnabled()  # it may be tried again

    run_window(scenario, panes=1)
