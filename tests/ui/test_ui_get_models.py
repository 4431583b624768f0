"""The Model library's "Get models" tab in the real window, against a stand-in of the hub: a search
typed and clicked lists repos, a repo's files show quant, size and fit, Download shows its progress and
the model then appears in "On this machine" and loads; a gated repo says how to get in; Cancel stops a
slow download and leaves no model file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from huggingface_hub import constants
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar
from ui_fixtures import until

from app.ui.docks.get_models import FILE_QUANT, FILE_SIZE, FITS
from tests.hub_standin import HubStandin, StandinRepo

pytestmark = pytest.mark.gui

TINY_REPO = "someone/Tiny-chat-GGUF"


@pytest.fixture
def standin(tmp_path, monkeypatch, tiny_model_path):
    home = tmp_path / "user"  # the other tools' folders are the test's, not this machine's
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CACHE_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)  # progress in steps, not one 10 MiB chunk
    tiny = Path(tiny_model_path).read_bytes()
    repos = {
        TINY_REPO: StandinRepo({"tiny-chat-Q8_0.gguf": tiny, "README.md": b"hi"}, downloads=1234, likes=5),
        "someone/Slow-GGUF": StandinRepo({"slow-Q4_K_M.gguf": b"GGUF" + bytes(200 * 1024)}, downloads=7),
        "meta/Gated-tiny-GGUF": StandinRepo({"gated-Q4_K_M.gguf": b"GGUF" + bytes(1000)}, downloads=50, gated=True),
    }
    server = HubStandin(repos)
    monkeypatch.setenv("HF_ENDPOINT", server.start())
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    yield server
    server.stop()


async def open_tab(window, qtbot):
    toolbar = window.findChild(QToolBar, "main-toolbar")
    qtbot.mouseClick(toolbar.widgetForAction(window.library_dock.toggleViewAction()), Qt.MouseButton.LeftButton)
    tabs = window.library_tabs
    bar = tabs.tabBar()
    qtbot.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.tabRect(1).center())
    assert tabs.currentWidget() is window.get_models and window.get_models.isVisible()
    return window.get_models


def click_row(qtbot, table, row: int) -> None:
    rect = table.visualRect(table.model().index(row, 0))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def cells(table, row: int) -> list[str]:
    return [table.item(row, c).text() for c in range(table.columnCount())]


def test_search_pick_download_and_load_a_model(run_tiny_window, qtbot, standin, tmp_path):
    async def scenario(window):
        tab = await open_tab(window, qtbot)
        qtbot.mouseClick(tab.search_field, Qt.MouseButton.LeftButton)
        qtbot.keyClicks(tab.search_field, "tiny")
        qtbot.mouseClick(tab.search_button, Qt.MouseButton.LeftButton)
        await until(lambda: tab.repo_table.rowCount() == 2, what="the search's repos")
        assert cells(tab.repo_table, 0) == [TINY_REPO, "1,234", "5", "2025-01-02"]  # most downloaded first
        assert "2 GGUF repos" in tab.status.text()

        click_row(qtbot, tab.repo_table, 0)
        await until(lambda: tab.file_table.rowCount() == 1, what="the repo's files")
        row = cells(tab.file_table, 0)
        assert (row[FILE_QUANT], row[FILE_SIZE], row[FITS]) == ("Q8_0", "9 MB", "yes")
        assert "80%" in tab.file_table.item(0, FITS).toolTip()
        assert "memory free" in tab.status.text()
        tab.grab().save(str(tmp_path / "get-models.png"))

        seen = []
        tab.progress.valueChanged.connect(seen.append)
        downloaded = []
        tab.sigDownloaded.connect(downloaded.append)
        assert tab.download_button.isEnabled()
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
        assert not tab.download_button.isEnabled() and tab.cancel_button.isEnabled()
        await until(lambda: downloaded, what="the download")
        assert len(set(seen)) > 2 and max(seen) == 1000  # it moved, and reached the end
        assert "On this machine" in tab.status.text() and not tab.cancel_button.isEnabled()

        library = window.library
        await until(lambda: library.row_of("tiny-chat-Q8_0") >= 0, what="the model in the library")
        assert TINY_REPO in library.table.item(library.row_of("tiny-chat-Q8_0"), 1).text()
        qtbot.mouseClick(
            window.library_tabs.tabBar(), Qt.MouseButton.LeftButton, pos=window.library_tabs.tabBar().tabRect(0).center()
        )
        qtbot.mouseClick(library.load_button("tiny-chat-Q8_0"), Qt.MouseButton.LeftButton)
        await until(lambda: library.load_button("tiny-chat-Q8_0").text() == "Unload", timeout=120, what="the model loaded")
        assert "tiny-chat-Q8_0" in window.client.models
        combo = window.panes[0].model_combo
        assert "tiny-chat-Q8_0" in [combo.itemData(i) for i in range(combo.count())]  # a pane may pick it

    run_tiny_window(scenario, panes=1)


def test_a_gated_repo_says_how_to_get_in_and_cancel_stops_a_slow_download(run_tiny_window, qtbot, standin, tmp_path):
    standin.seconds_per_kib = 0.02  # 200 KiB: four seconds

    async def scenario(window):
        tab = await open_tab(window, qtbot)
        qtbot.keyClicks(tab.search_field, "gguf")
        qtbot.keyClick(tab.search_field, Qt.Key.Key_Return)
        await until(lambda: tab.repo_table.rowCount() == 3, what="the search's repos")

        click_row(qtbot, tab.repo_table, 1)  # meta/Gated-tiny-GGUF: 50 downloads
        await until(lambda: tab.file_table.rowCount() == 1 and tab.repo_id.startswith("meta/"), what="the gated repo's files")
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
        await until(lambda: not tab.downloading, what="the gated message")
        assert "accept its licence" in tab.status.text() and "HF_TOKEN" in tab.status.text()
        assert tab.download_button.isEnabled()

        click_row(qtbot, tab.repo_table, 2)  # someone/Slow-GGUF
        await until(lambda: tab.file_table.rowCount() == 1 and tab.repo_id == "someone/Slow-GGUF", what="the slow repo's files")
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
        await until(lambda: "left" in tab.progress_label.text(), what="the speed and time left")
        assert tab.progress.value() > 0 and "kB/s" in tab.progress_label.text()
        tab.grab().save(str(tmp_path / "get-models-downloading.png"))
        qtbot.mouseClick(tab.cancel_button, Qt.MouseButton.LeftButton)
        await until(lambda: not tab.downloading, timeout=10, what="the download cancelled")
        assert "Cancelled" in tab.status.text()
        assert not list((tmp_path / "hf").rglob("*.gguf"))  # no file taken for a model
        assert not tab.cancel_button.isEnabled() and tab.download_button.isEnabled()

        standin.seconds_per_kib = 0.001  # Download again (as after a restart: the partial blob is on disk) resumes
        downloaded, labels = [], []
        tab.sigDownloaded.connect(downloaded.append)
        qtbot.mouseClick(tab.download_button, Qt.MouseButton.LeftButton)
        await until(lambda: labels.append(tab.progress_label.text()) or downloaded, what="the resumed download")
        resumed = [r for r in standin.requests if r[0] == "GET" and "slow-" in r[1] and r[2] not in ("", "bytes=0-")]
        assert resumed, standin.requests  # a Range past 0
        assert any("resumed at" in label for label in labels)
        await until(lambda: window.library.row_of("slow-Q4_K_M") >= 0, what="the model in the library")

    run_tiny_window(scenario, panes=1)


def test_a_search_the_hub_is_slow_to_answer_says_it_waits_and_cancel_stops_waiting(run_tiny_window, qtbot, standin):
    standin.search_pause = 6.0

    async def scenario(window):
        view = await open_tab(window, qtbot)
        qtbot.keyClicks(view.search_field, "tiny")
        qtbot.mouseClick(view.search_button, Qt.MouseButton.LeftButton)
        await until(lambda: view.search_button.text() == "Cancel", 5, "the search under way")
        await until(lambda: "has not answered yet" in view.status.text(), 10, "the waiting line")
        waiting = view.status.text()
        qtbot.mouseClick(view.search_button, Qt.MouseButton.LeftButton)
        await until(lambda: "cancelled" in view.status.text(), 5, "the cancel")
        cancelled = view.status.text(), view.search_button.text()
        await asyncio.sleep(4)  # the hub's late answer is dropped, not shown
        return waiting, cancelled, view.repo_table.rowCount(), view.status.text()

    waiting, cancelled, rows, after = run_tiny_window(scenario, panes=1)
    assert waiting.startswith("Searching for tiny… ") and "Cancel stops waiting" in waiting
    assert cancelled == ("Search for tiny cancelled", "Search") and rows == 0 and after == cancelled[0]
