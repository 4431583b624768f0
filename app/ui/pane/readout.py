"""A line of live figures that repaints only itself when it changes, in shorter forms when narrow."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.ui.theme import blend


class Readout(QWidget):
    """One line of text, right-aligned; when narrow, the first of its shorter forms that fits, with the
    whole text and `legend` in its tooltip. A QLabel asks its parent to lay out again on every change;
    with eight panes refreshing three times a second that was 1.5% of a core taken from the engine
    (measured), so this one keeps a fixed height and repaints only itself."""

    def __init__(self, muted: bool = True, pixel_size: int = 11, legend: str = "", elide: bool = False, parent=None):
        super().__init__(parent)
        self._legend = legend
        self._elide = elide  # words, not figures: when no form fits, the shortest one cut with "…"
        font = self.font()
        font.setPixelSize(pixel_size)
        self.setFont(font)
        self._muted = muted  # secondary figures: the window text toned down; else the window text
        self._forms: tuple[str, ...] = ("",)  # the text, then shorter forms of it
        self.setFixedHeight(self.fontMetrics().height() + 2)  # fixed: a change never moves the layout
        # it paints its own background, so its pane is not repainted under it at every change
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(self.minimumWidth(), self.height())  # constant: the layout never asks again

    def text(self) -> str:
        return self._forms[0]

    def setText(self, text: str, *shorter: str) -> None:
        forms = (text, *shorter)
        if forms != self._forms:
            self._forms = forms
            self.setToolTip("\n".join(filter(None, (text, self._legend))))
            self.update()

    def shown_text(self) -> str:
        """The longest form that fits the width; else "…", as a cut figure ("1…" of "18 tok/s") would
        mislead, or, for a line of words (`elide`), the shortest form cut at its end."""
        metrics = self.fontMetrics()
        fits = next((form for form in self._forms if metrics.horizontalAdvance(form) <= self.width()), None)
        if fits is not None:
            return fits
        return metrics.elidedText(self._forms[-1], Qt.TextElideMode.ElideRight, self.width()) if self._elide else "…"

    def pen_colour(self) -> QColor:
        palette = self.palette()
        text = palette.color(QPalette.ColorRole.WindowText)
        return blend(text, palette.color(QPalette.ColorRole.Window), 0.3) if self._muted else text

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(event.rect(), self.palette().window())
        painter.setPen(self.pen_colour())
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, self.shown_text())
