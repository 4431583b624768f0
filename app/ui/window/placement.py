"""Where the window opens: its saved place, or the default size centred; either way on its screen."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QStyle, QWidget

DEFAULT_SIZE = QSize(1600, 960)
FRAME_BORDER = 4  # the window manager's border, not known before the window is shown: window managers draw 0 to 4 px


def place_window(window: QWidget, saved: QByteArray) -> None:
    """Restore `saved` (Qt refuses a geometry saved on a screen of another size), else centre the default
    size; then shrink and move the window so that its frame stays on the screen's available area."""
    title_bar = window.style().pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight)
    room = room_for_window(window.screen().availableGeometry(), title_bar)
    if saved.isEmpty() or not window.restoreGeometry(saved):
        centred = Qt.AlignmentFlag.AlignCenter
        window.setGeometry(QStyle.alignedRect(Qt.LayoutDirection.LeftToRight, centred, DEFAULT_SIZE, room))
    if not window.isMaximized() and not window.isFullScreen():  # those fit the screen by themselves
        window.setGeometry(clamped(window.geometry(), room))


def room_for_window(available: QRect, title_bar: int) -> QRect:
    """Where the inside of a window may go on a screen: its frame (title bar and borders) around it."""
    return available.marginsRemoved(QMargins(FRAME_BORDER, title_bar + FRAME_BORDER, FRAME_BORDER, FRAME_BORDER))


def clamped(rect: QRect, room: QRect) -> QRect:
    """`rect` shrunk to fit `room`, and moved the least to be inside it."""
    size = rect.size().boundedTo(room.size())
    x = min(max(rect.x(), room.x()), room.x() + room.width() - size.width())
    y = min(max(rect.y(), room.y()), room.y() + room.height() - size.height())
    return QRect(QPoint(x, y), size)
