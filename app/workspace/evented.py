"""Signals without Qt: the workspace tells its observers (the window, tests) what changed."""

from __future__ import annotations

from collections.abc import Callable


class Signal:
    """Callbacks called in the order they were connected, with what is emitted, on the emitter's thread."""

    def __init__(self) -> None:
        self._slots: list[Callable] = []

    def connect(self, slot: Callable) -> None:
        self._slots.append(slot)

    def disconnect(self, slot: Callable) -> None:
        self._slots.remove(slot)

    def emit(self, *args) -> None:
        for slot in tuple(self._slots):  # a slot may disconnect itself
            slot(*args)
