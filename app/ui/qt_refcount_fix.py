"""Work around PySide6 6.12 on Python 3.11: void calls drop a reference to None, signal emits to True/False.

From Python 3.12 these singletons are immortal, so the bug is harmless there; on 3.11 a window
that runs for a few seconds reaches a zero count and aborts ("deallocating None"). Giving them a
near-infinite count, as 3.12 does, makes the dropped references harmless.
"""

from __future__ import annotations

import ctypes
import sys

_NEAR_INFINITE = 1 << 60


def make_singletons_immortal() -> None:
    if sys.version_info >= (3, 12) or getattr(sys, "_batch_playground_immortal", False):
        return
    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += _NEAR_INFINITE  # ob_refcnt is the first field
    sys._batch_playground_immortal = True
