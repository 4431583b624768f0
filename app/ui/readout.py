"""A line of live figures that repaints only itself when it changes."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget


class Readout(QWidget):
    """One line of text, right-aligned and elided when narrow. A QLabel asks its parent to lay out again on every
    change; with eight panes refreshing three times a second that was 1.5% of a core taken from the
    engine (measured), so this one keeps a fixed height and repaints only itself."""

    def __init__(self, colour: str = "#555", pixel_size: int = 11, parent=None):
        super().__init__(parent)
        font = self.font()
        font.setPixelSize(pixel_size)
        self.setFont(font)
        self._colour = QColor(colour)
        self._text = ""
        self.setFixedHeight(self.fontMetrics().height() + 2)  # fixed: a change never moves the layout
        # it paints its own background, so its pane is not repainted under it at every change
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(self.minimumWidth(), self.height())  # constant: the layout never asks again

    def text(self) -> str:
        return self._text

    def setText(self, text: str) -> None:
        if text != self._text:
            self._text = text
            self.update()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(event.rect(), self.palette().window())
        painter.setPen(self._colour)
        shown = self.fontMetrics().elidedText(self._text, Qt.TextElideMode.ElideRight, self.width())
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, shown)
