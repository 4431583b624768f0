"""Where the window opens: on a 1366x768 laptop screen it fits, whether a geometry was saved or not
(each case in a process of its own, whose only screen is the one the test gives it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QRect

from app.ui.window.placement import DEFAULT_SIZE, clamped, room_for_window

PROBE = Path(__file__).parents[1] / "window_probe.py"
ROOT = PROBE.parent.parent


def _probe(home: Path, screen: tuple[int, int], *args: str) -> dict:
    """Open and close the app's window in a process whose only screen is `screen`; where the window went."""
    width, height = screen
    config = home / f"screen-{width}x{height}.json"  # the offscreen platform's screens
    config.write_text(json.dumps({"screens": [{"name": "s", "x": 0, "y": 0, "width": width, "height": height}]}))
    platform = f"offscreen:configfile={config}"
    env = dict(os.environ, QT_QPA_PLATFORM=platform, BATCH_PLAYGROUND_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _on_screen(placed: dict) -> bool:
    return QRect(*placed["available"]).contains(QRect(*placed["frame"]))


@pytest.mark.gui  # the window, in a process of its own
def test_the_first_window_fits_a_laptop_screen(tmp_path):
    placed = _probe(tmp_path, (1366, 768), "--panes", "8")
    assert _on_screen(placed), placed


@pytest.mark.gui  # the window, in a process of its own
def test_a_saved_window_larger_than_the_screen_opens_on_it(tmp_path):
    _probe(tmp_path, (1366, 768), "--resize", "1600", "960")  # dragged past the screen's edge, then closed
    assert _on_screen(_probe(tmp_path, (1366, 768)))
    _probe(tmp_path, (1920, 1080), "--resize", "1850", "1020")  # closed on a large monitor, opened on the laptop
    assert _on_screen(_probe(tmp_path, (1366, 768)))


@pytest.mark.unit
def test_a_window_keeps_the_default_size_where_the_screen_has_room():
    second_monitor = QRect(1920, 0, 1920, 1080)
    room = room_for_window(second_monitor, 24)
    assert clamped(QRect(room.topLeft(), DEFAULT_SIZE), room).size() == DEFAULT_SIZE
    assert clamped(QRect(0, 0, 3000, 2000), room) == room  # too big and off to the left: shrunk and moved onto it
