"""What the window remembers: typed QSettings access, per-pane sampling settings, the data folder."""

from __future__ import annotations

import json
import os
import sys
import typing
from dataclasses import fields
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from app.engine.config_fields import config_from_texts, config_texts
from app.engine.params import EngineConfig
from app.engine.sampling.params import BY_NAME as SAMPLING_BY_NAME
from app.workspace.pane_params import PaneParams
from app.workspace.workspace import MAX_PANES

ORGANISATION = "batch-playground"
APPLICATION = "batch-playground"
HOME_ENV = "BATCH_PLAYGROUND_HOME"  # one folder for chats and settings.ini (tests, demos)
PER_MODEL = ("chat_template_file",)  # engine settings kept per model (chat_template_for), not in the engine's group
WINDOW_STATE_VERSION = 2  # of the saved dock layout (QMainWindow.saveState): 1 stacked the docks of an area, 2 tabs them


def data_dir() -> Path:
    """Where chats are saved: $BATCH_PLAYGROUND_HOME, else the platform's app-data folder."""
    home = os.environ.get(HOME_ENV)
    folder = home or QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(folder)


def open_qsettings() -> QSettings:
    """An ini file under $BATCH_PLAYGROUND_HOME when set, else the platform's native store."""
    home = os.environ.get(HOME_ENV)
    if home:
        return QSettings(str(Path(home) / "settings.ini"), QSettings.Format.IniFormat)
    return QSettings()


class AppSettings:
    """Typed reads and writes; every read has a default and a type."""

    def __init__(self, qsettings: QSettings):
        self.q = qsettings
        _owner_only(qsettings)

    def _get(self, key: str, default, kind):
        return self.q.value(key, default, type=kind)

    # -- window --------------------------------------------------------------------------------

    @property
    def geometry(self) -> QByteArray:
        return self._get("window/geometry", QByteArray(), QByteArray)

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self.q.setValue("window/geometry", value)

    @property
    def window_state(self) -> QByteArray:
        """Which docks are shown, where, and the toolbar (QMainWindow.saveState)."""
        return self._get("window/state", QByteArray(), QByteArray)

    @window_state.setter
    def window_state(self, value: QByteArray) -> None:
        self.q.setValue("window/state", value)

    @property
    def broadcast_draft(self) -> str:
        return self._get("window/broadcast_draft", "", str)

    @broadcast_draft.setter
    def broadcast_draft(self, text: str) -> None:
        self._set_or_remove("window/broadcast_draft", text)

    @property
    def pane_ids(self) -> list[str]:
        """The chats shown, in pane order (their count is the pane count)."""
        text = self._get("window/pane_ids", "", str)
        return [x for x in text.split(",") if x]

    @pane_ids.setter
    def pane_ids(self, ids: list[str]) -> None:
        self.q.setValue("window/pane_ids", ",".join(ids))

    # -- the API server ------------------------------------------------------------------------

    @property
    def serve_address(self) -> str:
        return self._get("serve/address", "127.0.0.1:8080", str)

    @serve_address.setter
    def serve_address(self, value: str) -> None:
        self.q.setValue("serve/address", value)

    @property
    def serve_api_key(self) -> str:
        return self._get("serve/api_key", "", str)

    @serve_api_key.setter
    def serve_api_key(self, value: str) -> None:
        self.q.setValue("serve/api_key", value)

    # -- the model library ---------------------------------------------------------------------

    @property
    def library_folders(self) -> list[str]:
        """The folders added to the model library, in the order they were added."""
        return self._paths("library/folders")

    @library_folders.setter
    def library_folders(self, folders: list[str]) -> None:
        self._set_or_remove("library/folders", "\n".join(folders))

    @property
    def extra_models(self) -> list[str]:
        """The models loaded beside the first when the window closed, loaded again at the start."""
        return self._paths("library/extra_models")

    @extra_models.setter
    def extra_models(self, paths: list[str]) -> None:
        self._set_or_remove("library/extra_models", "\n".join(paths))

    def chat_template_for(self, model_path: str) -> str | None:
        """The chat template file a model is used with instead of its own (chosen in the Engine panel), or None."""
        return self._chat_templates().get(os.path.realpath(model_path)) if model_path else None

    def set_chat_template_for(self, model_path: str, template_path: str | None) -> None:
        templates = self._chat_templates()
        if template_path:
            templates[os.path.realpath(model_path)] = template_path
        else:
            templates.pop(os.path.realpath(model_path), None)
        self._set_or_remove("library/chat_templates", json.dumps(templates) if templates else "")

    def _chat_templates(self) -> dict[str, str]:
        try:
            stored = json.loads(self._get("library/chat_templates", "", str) or "{}")
        except ValueError:  # an edited file: no template files
            return {}
        return {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(stored, dict) else {}

    def _paths(self, key: str) -> list[str]:
        """A list of paths kept a line each (a path may hold commas, which QSettings' lists split at)."""
        return [x for x in self._get(key, "", str).split("\n") if x]

    # -- presets -------------------------------------------------------------------------------

    @property
    def saved_presets(self) -> str:
        """The presets saved, as their file's JSON (app/workspace/presets.py reads it)."""
        return self._get("presets/saved", "", str)

    @saved_presets.setter
    def saved_presets(self, text: str) -> None:
        self._set_or_remove("presets/saved", text)

    # -- panes ---------------------------------------------------------------------------------

    def pane_params(self, chat_id: str) -> PaneParams:
        base = PaneParams()
        self.q.beginGroup(f"pane-{chat_id}")
        try:
            values = {
                f.name: self._get(f.name, _stored(f.name, getattr(base, f.name)), _kind(f.name)) for f in fields(PaneParams)
            }
            values = {name: _read(name, value, getattr(base, name)) for name, value in values.items()}
        finally:
            self.q.endGroup()
        values["seed"] = None if values["seed"] < 0 else values["seed"]
        return PaneParams(**values)

    def set_pane_params(self, chat_id: str, params: PaneParams) -> None:
        self.q.beginGroup(f"pane-{chat_id}")
        for f in fields(PaneParams):
            self.q.setValue(f.name, _stored(f.name, getattr(params, f.name)))
        self.q.endGroup()

    def draft(self, chat_id: str) -> str:
        """What was typed in the chat's message field and not sent."""
        return self._get(f"pane-{chat_id}/draft", "", str)

    def set_draft(self, chat_id: str, text: str) -> None:
        self._set_or_remove(f"pane-{chat_id}/draft", text)

    def _set_or_remove(self, key: str, text: str) -> None:
        if text:
            self.q.setValue(key, text)
        else:
            self.q.remove(key)

    def remove_pane_params(self, chat_id: str) -> None:
        """A deleted chat's sliders and draft go with it."""
        self.q.remove(f"pane-{chat_id}")

    # -- engine --------------------------------------------------------------------------------

    def engine_config(self, default_model: str) -> EngineConfig:
        """The saved engine settings (config_fields.py), with the chat template file kept for their
        model; one missing or unreadable keeps its default."""
        base = EngineConfig(model_path=default_model, capacity=MAX_PANES)  # threads: the engine's default
        self.q.beginGroup("engine")
        try:
            texts = {key: self._get(key, "", str) for key in self.q.childKeys() if key not in PER_MODEL}
        finally:
            self.q.endGroup()
        config = config_from_texts(texts, base)
        return config.with_(chat_template_file=self.chat_template_for(config.model_path))

    def set_engine_config(self, config: EngineConfig) -> None:
        """The engine settings; the chat template file is kept for its model (chat_template_for)."""
        self.q.beginGroup("engine")
        for key, text in config_texts(config).items():
            if key not in PER_MODEL:
                self.q.setValue(key, text)
        self.q.endGroup()
        self.set_chat_template_for(config.model_path, config.chat_template_file)

    def sync(self) -> None:
        self.q.sync()
        _owner_only(self.q)


def _owner_only(q: QSettings) -> None:
    """Only the user may read the settings file: it holds API keys.

    An ini file (the native store too, on Unix but macOS) is created with mode 0600 before Qt first
    writes it, and Qt's atomic rewrites keep the mode of the file they replace; one that exists is
    chmodded. Windows keeps native settings in the user's own registry hive, which has no file mode.
    """
    path = Path(q.fileName())
    is_ini = q.format() == QSettings.Format.IniFormat or sys.platform not in ("darwin", "win32")
    if is_ini and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
    if path.is_file():
        path.chmod(0o600)


def _stored(name: str, value):
    """A seed of None (random) is stored as -1; a list knob (the logit bias) as one line of JSON."""
    if name == "seed" and value is None:
        return -1
    knob = SAMPLING_BY_NAME.get(name)
    return knob.to_text(value) if knob is not None and knob.kind is tuple else value


def _kind(name: str) -> type:
    """The stored type of a PaneParams field, from its annotation (seed's `int | None` is stored as
    int, a list as its JSON text)."""
    hint = _PANE_HINTS[name]
    kind = next(t for t in typing.get_args(hint) if t is not type(None)) if typing.get_args(hint) else hint
    return str if kind is tuple else kind


def _read(name: str, value, default):
    """A sampling knob as stored; one out of its declared range or unreadable (a hand-edited file)
    reads as the default."""
    knob = SAMPLING_BY_NAME.get(name)
    if knob is not None and knob.kind is tuple:
        try:
            return knob.from_text(value)
        except ValueError:
            return default
    return default if knob is not None and knob.problem(value) is not None else value


_PANE_HINTS = typing.get_type_hints(PaneParams)
