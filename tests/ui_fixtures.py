"""Fixtures for the window tests: a qasync loop on pytest-qt's QApplication, a window on the real model
(`run_window`) or on the tiny model of its kind (`run_tiny_window`), for a test whose outcome does not
depend on what the model writes.

Each test is a coroutine run with `loop.run_until_complete`, so the Qt event loop (paints, timers,
signals) and the asyncio tasks of the panes run together, as in the app.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import qasync
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QStyle

from app.client import EngineClient
from app.engine.params import EngineConfig
from app.ui.settings import HOME_ENV, AppSettings, open_qsettings
from app.ui.window.main_window import MainWindow
from app.ui.window.placement import room_for_window
from app.workspace.chat_store import ChatStore
from app.workspace.pane_params import PaneParams

# small, greedy replies keep the suite fast on 2 cores
QUICK = PaneParams(temperature=0.0, repeat_penalty=1.0, max_tokens=24)
LONG = QUICK.with_(max_tokens=400)
# The tiny model, greedy, writes only line breaks; sampled with a seed it writes words of noise, the same
# each run, and seldom ends a reply itself. It writes a thousand tokens a second: a reply it must still
# be writing when the test acts is a long one (TINY_LONG; four at once fit the 4096-cell pool).
TINY_QUICK = QUICK.with_(temperature=1.0, seed=1)
TINY_LONG = TINY_QUICK.with_(max_tokens=900)


@pytest.fixture
def loop(qapp):
    qapp.setQuitOnLastWindowClosed(False)  # closing a window must not stop the loop under the test
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """Chats and settings.ini in tmp_path (the app reads $BATCH_PLAYGROUND_HOME)."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    return tmp_path


async def open_window(model_path: str, home, panes: int | None = 2, capacity: int = 8, **settings) -> MainWindow:
    """`settings`: more of the engine's (EngineConfig's fields: a projector, say)."""
    # one thread: two spin at llama.cpp's barriers, and on 2 cores busy with anything else a step then
    # takes up to fifty times as long (a 4-pane broadcast of 24 tokens: 1.7 s on one thread, 1.2 to 62 s on two)
    config = EngineConfig(model_path=model_path, n_ctx=4096, n_batch=512, capacity=capacity, n_threads=1, **settings)
    client = EngineClient(config)
    await client.start()
    window = MainWindow(client, ChatStore(home), AppSettings(open_qsettings()), pane_count=panes)
    window.show()
    return window


async def close_window(window: MainWindow) -> None:
    """Close the window as its close button does (also when its engine has stopped)."""
    if not window.is_closed:
        closed = asyncio.Event()
        window.sigClosed.connect(closed.set)
        window.close()
        await asyncio.wait_for(closed.wait(), 30)


async def until(condition, timeout: float = 60.0, what: str = "condition") -> None:
    """Poll `condition` while the loop runs; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def window_runner(loop, home, model_path: str):
    def run(scenario, panes: int | None = 2, capacity: int = 8, **settings):
        async def main():
            window = await open_window(model_path, home, panes, capacity, **settings)
            try:
                return await scenario(window)
            finally:
                await close_window(window)

        return loop.run_until_complete(main())

    return run


@pytest.fixture
def run_window(loop, home, model_path):
    """`run_window(scenario, panes=2)`: open a window on the bundled model, run `await scenario(window)`,
    always close it."""
    return window_runner(loop, home, model_path)


@pytest.fixture
def run_tiny_window(loop, home, tiny_model_path):
    """`run_window` on the tiny model (set TINY_QUICK or TINY_LONG for its replies)."""
    return window_runner(loop, home, tiny_model_path)


def set_params(window: MainWindow, params: PaneParams) -> None:
    for pane in window.panes:
        pane.params_editor.set_params(params)


async def start_long_reply(window: MainWindow, pane, text: str, params: PaneParams = LONG) -> None:
    """Send `text` with a long reply allowed (TINY_LONG on the tiny model), and wait until it is streaming."""
    set_params(window, params)
    pane.session.send(text)
    await until(lambda: window.metrics.panes[pane.key].gen_tokens >= 2, what="first tokens")


LAPTOP = QRect(0, 0, 1366, 768)


def on_laptop(window: MainWindow) -> QRect:
    """Give the window the room a 1366x768 screen has for it (where it opens there); that room."""
    room = room_for_window(LAPTOP, window.style().pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight))
    window.setGeometry(room)
    return room


async def laid_out() -> None:
    """Deliver what the last change posted (the resize, the layouts' requests, those they post in
    turn), as the event loop does, rather than waiting a set time for it."""
    for _ in range(3):
        QApplication.processEvents()
        await asyncio.sleep(0)
