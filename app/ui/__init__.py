"""The desktop window: chat panes, sliders and live plots over the shared engine (Qt, qasync, pyqtgraph).

main.py and demo.py start it; window/ holds the main window and its parts, pane/ a chat pane's,
docks/ the docks; settings, theme and dialogs serve all three."""

import os

# llama.cpp's OpenMP workers spin while they wait for each other. Beside a GUI thread on a small
# machine that spinning takes the core the GUI needs, and then the workers wait on the one that
# lost it; sleeping waiters measured better in the window (tok/s and longest stall, docs/performance.md).
# libgomp reads this when llama.cpp loads, so it is set before any window module imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Qt's raster engine splits every fill taller than about 96 pixels (a scroll bar, a pane's
# background) across a thread pool of its own and waits for it. On cores that run the engine those
# threads only preempt llama.cpp's (measured: slower, less steady tok/s in the window, docs/performance.md), so
# the GUI thread paints alone. Qt reads this when it first paints.
os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
