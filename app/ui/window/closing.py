"""Closing the window: the first close only starts the shutdown (every reply cancelled, the chats and
the window's layout saved, the engine closed); its end closes the window for real."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from PySide6.QtGui import QCloseEvent

from app.ui.settings import WINDOW_STATE_VERSION

if TYPE_CHECKING:
    from .main_window import MainWindow


class WindowClosing:
    def __init__(self, window: MainWindow):
        self.window = window
        self._task: asyncio.Task | None = None  # the shutdown, once the window is asked to close
        self.is_closed = False

    def on_close_event(self, event: QCloseEvent) -> None:
        if self.is_closed:
            event.accept()
            return
        event.ignore()
        if self._task is None:
            self._task = asyncio.ensure_future(self._close())  # kept: a task without a reference may be collected

    async def _close(self) -> None:
        try:
            await self.shut_down()
        finally:
            self.is_closed = True
            self.window.close()
            self.window.sigClosed.emit()

    async def shut_down(self) -> None:
        """Cancel every reply, save, and close the engine."""
        w = self.window
        w.tick_timer.stop()
        w.benchmark_panel.cancel()
        w.settings.geometry = w.saveGeometry()
        w.settings.window_state = w.saveState(WINDOW_STATE_VERSION)
        w.settings.sync()
        await w.serve_control.stop()
        await w.workspace.shutdown()
        w.settings.sync()
        await w.client.close()  # also when the engine has stopped on its own
