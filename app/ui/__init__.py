"""The desktop window: chat panes, sliders and live plots over the shared engine (Qt, qasync, pyqtgraph)."""

from .qt_refcount_fix import make_singletons_immortal

make_singletons_immortal()  # before any Qt call of this package
