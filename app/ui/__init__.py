"""The desktop window: chat panes, sliders and live plots over the shared engine (Qt, qasync, pyqtgraph)."""

import os

# llama.cpp's OpenMP workers spin while they wait for each other. Beside a GUI thread on a small
# machine that spinning takes the core the GUI needs, and then the workers wait on the one that
# lost it; sleeping waiters measured better in the window (tok/s and longest stall, README).
# libgomp reads this when llama.cpp loads, so it is set before any window module imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
