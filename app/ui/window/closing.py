"""Closing the window in two steps: the first close only starts the window's shutdown (every reply
cancelled, the chats and the layout saved, the engine closed); its end closes the window for real."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QWidget


class WindowClosing:
    """`window`'s close events, held until `shut_down()` has run; `closed()` is called after."""

    def __init__(self, window: QWidget, shut_down: Callable[[], Awaitable[None]], closed: Callable[[], None]):
        self.window, self.shut_down, self.closed = window, shut_down, closed
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
            self.closed()
