"""The loaded models, shown wherever they appear (the panes' pickers, the plots' legend, the model
library, the title), the library's Load and Unload, and blank panes suited to a base model."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QMainWindow
from qasync import asyncSlot

from app.client import EngineClient
from app.engine.errors import EngineError
from app.ui.docks.model_library import ModelLibrary
from app.ui.docks.plots import PlotsPanel
from app.ui.pane.chat_pane import ChatPane
from app.ui.settings import AppSettings
from app.workspace.session import PaneSession
from app.workspace.workspace import Workspace


def short_name(name: str, chars: int = 16) -> str:
    """A model's name within `chars`, its start and its end kept (where sizes and quantizations are)."""
    if len(name) <= chars:
        return name
    tail = chars // 2
    return f"{name[: chars - tail - 1]}…{name[-tail:]}"


def model_paths(client: EngineClient) -> list[str]:
    """The loaded models' files, the default first."""
    return [info.path for info in client.models.values()]


class LoadedModels:
    """Shows the loaded models in `panes` (the window's list, kept in step by it), `plots`, `library`
    and the title and status bar of `window`; keeps them in `settings`."""

    def __init__(
        self,
        client: EngineClient,
        workspace: Workspace,
        panes: list[ChatPane],
        plots: PlotsPanel,
        library: ModelLibrary,
        settings: AppSettings,
        window: QMainWindow,
    ):
        self.client, self.workspace, self.panes = client, workspace, panes
        self.plots, self.library, self.settings, self.window = plots, library, settings, window

    @property
    def paths(self) -> list[str]:
        return model_paths(self.client)

    @property
    def is_base_model(self) -> bool:
        info = self.client.model_info
        return info is not None and not info.has_chat_template

    def suit_blank_panes(self) -> None:
        """Blank panes follow the model: completion mode for a base model (⚙ switches a pane)."""
        completion = self.is_base_model
        self.workspace.suit_blank_panes(completion)
        if completion:
            self.window.statusBar().showMessage(
                f"{Path(self.client.config.model_path).name} has no chat template (a base model): new panes continue "
                "text (completion mode); ⚙ switches a pane to chat.",
                20000,
            )

    @asyncSlot(str)
    async def load(self, path: str) -> None:
        """The library's Load: the model beside those loaded, with the first one's settings; the
        panes pick it in their header. One that cannot be loaded is said in the library."""
        try:
            config = self.client.config.for_other_model(path).with_(chat_template_file=self.settings.chat_template_for(path))
            name = await self.client.load_model(config)
        except (EngineError, ValueError) as e:  # a bad file, a name taken, no memory for it
            self.library.set_loaded(self.paths, str(e))
            return
        self.show()
        self.window.statusBar().showMessage(f"Loaded {name}: pick it in a pane's header.", 10000)

    @asyncSlot(str)
    async def unload(self, path: str) -> None:
        """The library's Unload: its panes' replies end with a notice, and they go on with the first model."""
        name = next((n for n, info in self.client.models.items() if os.path.realpath(info.path) == os.path.realpath(path)), None)
        if name is None:
            return
        try:
            await self.client.unload_model(name)
        except (EngineError, ValueError) as e:  # the last model: nothing would be left to chat with
            self.window.statusBar().showMessage(f"{name} stays loaded: {e}", 10000)
            return
        self.show()
        self.window.statusBar().showMessage(f"Unloaded {name}.", 10000)

    def name_in_plots(self, session: PaneSession) -> None:
        """The pane's name in the plots' legend, with its model's when more than one is loaded."""
        models = self.client.models
        name = session.chat.name
        if len(models) >= 2 and session.params.endpoint() is None:
            name = f"{name} · {short_name(session.model or next(iter(models)))}"
        self.plots.name_pane(session.key, name)

    def show(self) -> None:
        """The loaded models everywhere they show, and kept for the next start."""
        names = list(self.client.models)
        if not names:  # the engine thread has stopped: nothing changed
            return
        seeing = frozenset(name for name, info in self.client.models.items() if info.sees_images)
        for pane in self.panes:
            pane.show_models(names, seeing)
            self.name_in_plots(pane.session)
        self.library.set_loaded(self.paths)
        self.settings.extra_models = self.paths[1:]
        self.show_title()

    def show_title(self) -> None:
        """The window's title names the models the local panes talk to."""
        names = list(self.client.models) or [Path(self.client.config.model_path).stem]
        self.window.setWindowTitle(f"{' + '.join(names)} · Batch playground")
