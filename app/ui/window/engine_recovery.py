"""When the engine thread ends on its own: the banner says why, and its Restart (or the Engine menu's)
brings up a fresh engine."""

from __future__ import annotations

from PySide6.QtWidgets import QStatusBar
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.errors import EngineError
from app.ui.docks.engine_panel import EnginePanel

from .engine_banner import EngineBanner


class EngineRecovery:
    def __init__(self, client: EngineClient, banner: EngineBanner, engine_panel: EnginePanel, status_bar: QStatusBar):
        self.client, self.banner, self.engine_panel, self.status_bar = client, banner, engine_panel, status_bar
        client.add_failure_listener(self.on_failed)
        banner.sigRestart.connect(self.restart)

    def on_failed(self, reason: str) -> None:
        """Every stream has already ended with the reason."""
        self.banner.show_failure(reason)

    @asyncSlot()
    async def restart(self) -> None:
        """A fresh engine on the same configuration; the panes keep their chats (their next turn
        reads the whole chat again, as the old engine's cache is gone)."""
        self.banner.show_restarting()
        try:
            await self.client.restart()
        except (EngineError, OSError, ValueError) as e:
            self.banner.show_restart_failed(str(e))
            return
        self.banner.hide()
        self.engine_panel.show_model_facts()
        self.status_bar.showMessage("The engine was restarted.", 10000)
