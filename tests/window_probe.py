"""Open the window as the app does on the screen that QT_QPA_PLATFORM describes, print where it went as
JSON, and close it (which saves its geometry in $BATCH_PLAYGROUND_HOME).

python tests/window_probe.py [--panes N] [--resize W H]   (--resize: as a user's drag, before the close)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import qasync
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication
from ui_fixtures import close_window, open_window

from app.default_model import default_model_path
from app.ui.settings import HOME_ENV


def _rect(r: QRect) -> list[int]:
    return [r.x(), r.y(), r.width(), r.height()]


async def probe(args) -> dict:
    window = await open_window(default_model_path(), os.environ[HOME_ENV], panes=args.panes)
    await asyncio.sleep(0.1)  # shown and laid out
    placed = {"available": _rect(window.screen().availableGeometry()), "frame": _rect(window.frameGeometry())}
    if args.resize:
        window.resize(*args.resize)
    await close_window(window)
    return placed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--panes", type=int)
    parser.add_argument("--resize", type=int, nargs=2, metavar=("W", "H"))
    app = QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)  # the close is awaited, not the end of the loop
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with loop:
        print(json.dumps(loop.run_until_complete(probe(parser.parse_args()))))


if __name__ == "__main__":
    main()
