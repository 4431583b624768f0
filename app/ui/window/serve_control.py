"""The window's switch that serves the shared engine over the OpenAI-compatible API while it is on."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QLineEdit, QWidget
from qasync import asyncSlot

from app.loopback import is_loopback
from app.server.server import ApiServer


def parse_address(text: str) -> tuple[str, int]:
    """ "host:port" (or a bare port, on loopback) -> (host, port); ValueError with the reason."""
    host, _, port = text.strip().rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, e.g. 127.0.0.1:8080; got {text!r}")
    return host or "127.0.0.1", int(port)


class ServeControl(QWidget):
    sigServing = Signal(bool)  # the server started (True) or stopped (False)

    def __init__(self, server: ApiServer, address: str, api_key: str, parent=None):
        super().__init__(parent)
        self.server = server
        self.toggle = QCheckBox("Serve API")
        self.toggle.setToolTip("Serve the engine over the OpenAI-compatible API; outside requests join the panes' batches")
        self.address_edit = QLineEdit(address)
        self.address_edit.setFixedWidth(130)
        self.key_edit = QLineEdit(api_key, placeholderText="API key (optional)")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setFixedWidth(120)
        self.status = QLabel()
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        for w in (self.toggle, self.address_edit, self.key_edit, self.status):
            row.addWidget(w)
        self.toggle.toggled.connect(self._on_toggled)

    @asyncSlot(bool)
    async def _on_toggled(self, on: bool) -> None:
        if on:
            await self.start()
        else:
            await self.stop()

    async def start(self) -> bool:
        """Listen on the address shown; on failure say why and turn the switch back off."""
        try:
            host, port = parse_address(self.address_edit.text())
            self.server.api_key = self.key_edit.text().strip() or None
            url = await self.server.start(host, port)
        except (OSError, ValueError) as e:
            self.status.setText(f"not serving: {getattr(e, 'strerror', None) or e}")
            self._show(False)
            return False
        open_to_all = "" if self.server.api_key or is_loopback(host) else " · no API key: anyone who reaches it can use it"
        self.status.setText(f"{url}/v1{open_to_all}")
        self.status.setToolTip(open_to_all.removeprefix(" · "))
        self._show(True)
        self.sigServing.emit(True)
        return True

    async def stop(self) -> None:
        if self.server.is_serving:
            await self.server.stop()
            self.sigServing.emit(False)
        self.status.setText("")
        self._show(False)

    def _show(self, serving: bool) -> None:
        self.toggle.blockSignals(True)
        self.toggle.setChecked(serving)
        self.toggle.blockSignals(False)
        self.address_edit.setEnabled(not serving)
        self.key_edit.setEnabled(not serving)
