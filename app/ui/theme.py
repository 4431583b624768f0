"""Colours from the palette, so a dark desktop theme keeps every text readable (no fixed hex colours
under text). Accents that carry meaning (the assistant's name, notices) get a light or a dark tone
by the palette's lightness."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QGuiApplication, QPalette


def blend(a: QColor, b: QColor, share_of_b: float) -> QColor:
    """`a` moved `share_of_b` of the way to `b`."""
    mix = lambda x, y: round(x + (y - x) * share_of_b)  # noqa: E731
    return QColor(mix(a.red(), b.red()), mix(a.green(), b.green()), mix(a.blue(), b.blue()))


def contrast(a: QColor, b: QColor) -> float:
    """WCAG's contrast ratio of two colours (1 to 21; 4.5 is enough for body text)."""

    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@dataclass(frozen=True)
class Theme:
    text: QColor  # body text, on `base`
    base: QColor  # the transcript's background
    user_bubble: QColor  # behind the user's messages
    code_background: QColor
    link: QColor  # links in a reply, on `base`
    assistant: QColor  # the "Assistant" name
    notice: QColor  # notes such as "stopped", and warnings
    error: QColor  # what failed, on the window background
    error_background: QColor  # behind a failure's text (the engine banner), which is the window text
    muted: QColor  # secondary figures (the pane readouts), on the window background
    border: QColor

    @property
    def dark(self) -> bool:
        return self.base.lightness() < 128

    @classmethod
    def of(cls, palette: QPalette) -> Theme:
        text, base = palette.color(QPalette.ColorRole.Text), palette.color(QPalette.ColorRole.Base)
        window_text, window = palette.color(QPalette.ColorRole.WindowText), palette.color(QPalette.ColorRole.Window)
        dark = base.lightness() < 128
        return cls(
            text=text,
            base=base,
            user_bubble=blend(base, palette.color(QPalette.ColorRole.Highlight), 0.12),
            code_background=blend(base, text, 0.06),
            link=palette.color(QPalette.ColorRole.Link),
            assistant=QColor("#7fd39a" if dark else "#2d6a3e"),
            notice=QColor("#f0b060" if dark else "#a15c00"),
            error=QColor("#ff8a80" if dark else "#b00020"),
            error_background=blend(window, QColor("#d32f2f"), 0.25 if dark else 0.12),
            muted=blend(window_text, window, 0.3),
            border=palette.color(QPalette.ColorRole.Mid),
        )


def dark_palette() -> QPalette:
    """A dark palette such as a dark desktop theme gives (the demo's --dark, and the tests)."""
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#2b2b2b",
        QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1e1e1e",
        QPalette.ColorRole.AlternateBase: "#2a2a2a",
        QPalette.ColorRole.Text: "#e6e6e6",
        QPalette.ColorRole.Button: "#353535",
        QPalette.ColorRole.ButtonText: "#e6e6e6",
        QPalette.ColorRole.Highlight: "#3d6fb4",
        QPalette.ColorRole.Link: "#6cb4ff",
        QPalette.ColorRole.Mid: "#555555",
        QPalette.ColorRole.PlaceholderText: "#9a9a9a",
        QPalette.ColorRole.ToolTipBase: "#353535",
        QPalette.ColorRole.ToolTipText: "#e6e6e6",
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    disabled = QColor("#808080")  # greyed out, as a dark theme shows what cannot be clicked
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return palette


def current() -> Theme:
    return Theme.of(QGuiApplication.palette())
