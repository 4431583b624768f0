"""The desktop window: chat panes, sliders and live plots over the shared engine (Qt, qasync, pyqtgraph)."""
