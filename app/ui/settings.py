"""What the window remembers: typed QSettings access, per-pane sampling settings, the data folder."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, fields
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from app.engine.params import (
    GPU_LAYERS_ALL,
    KV_UNIFIED,
    CacheType,
    EngineConfig,
    FlashAttn,
    OverflowPolicy,
    Policy,
    ServingMode,
    kv_unified_name,
)
from app.workspace.pane_params import PaneParams

ORGANISATION = "batch-playground"
APPLICATION = "batch-playground"
HOME_ENV = "BATCH_PLAYGROUND_HOME"  # one folder for chats and settings.ini (tests, demos)
DEFAULT_PANES = 4
MAX_PANES = 8


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

    def _paths(self, key: str) -> list[str]:
        """A list of paths kept a line each (a path may hold commas, which QSettings' lists split at)."""
        return [x for x in self._get(key, "", str).split("\n") if x]

    # -- panes ---------------------------------------------------------------------------------

    def pane_params(self, chat_id: str) -> PaneParams:
        base = PaneParams()
        self.q.beginGroup(f"pane-{chat_id}")
        try:
            values = {
                f.name: self._get(f.name, _stored(f.name, getattr(base, f.name)), _kind(f.name)) for f in fields(PaneParams)
            }
        finally:
            self.q.endGroup()
        values["seed"] = None if values["seed"] < 0 else values["seed"]
        return PaneParams(**values)

    def set_pane_params(self, chat_id: str, params: PaneParams) -> None:
        self.q.beginGroup(f"pane-{chat_id}")
        for key, value in asdict(params).items():
            self.q.setValue(key, _stored(key, value))
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
        base = EngineConfig(model_path=default_model, capacity=MAX_PANES)  # threads: the engine's default
        self.q.beginGroup("engine")
        try:
            return base.with_(
                model_path=self._get("model_path", base.model_path, str) or default_model,
                n_ctx=self._get("n_ctx", base.n_ctx, int),
                n_batch=self._get("n_batch", base.n_batch, int),
                capacity=self._get("capacity", base.capacity, int),
                n_threads=self._get("n_threads", base.n_threads, int),
                mode=ServingMode(self._get("mode", base.mode.value, str)),
                overflow=OverflowPolicy(self._get("overflow", base.overflow.value, str)),
                policy=Policy(self._get("policy", base.policy.value, str)),
                itl_target_ms=self._get("itl_target_ms", 0.0, float) or None,
                n_threads_batch=self._get("n_threads_batch", 0, int) or None,
                gpu_layers=_gpu_layers(self._get("gpu_layers", "auto", str)),
                main_gpu=max(0, self._get("main_gpu", 0, int)),
                flash_attn=_choice(FlashAttn, self._get("flash_attn", base.flash_attn.value, str), base.flash_attn),
                cache_type_k=_choice(CacheType, self._get("cache_type_k", "f16", str), base.cache_type_k),
                cache_type_v=_choice(CacheType, self._get("cache_type_v", "f16", str), base.cache_type_v),
                use_mlock=self._get("use_mlock", base.use_mlock, bool),
                use_mmap=self._get("use_mmap", base.use_mmap, bool),
                kv_unified=KV_UNIFIED.get(self._get("kv_unified", "auto", str)),
            )
        finally:
            self.q.endGroup()

    def set_engine_config(self, config: EngineConfig) -> None:
        self.q.beginGroup("engine")
        for key in ("model_path", "n_ctx", "n_batch", "capacity", "n_threads"):
            self.q.setValue(key, getattr(config, key))
        self.q.setValue("mode", config.mode.value)
        self.q.setValue("overflow", config.overflow.value)
        self.q.setValue("policy", config.policy.value)
        self.q.setValue("itl_target_ms", config.itl_target_ms or 0.0)  # 0: a fixed batch
        # llama.cpp's settings
        layers = config.gpu_layers
        self.q.setValue("gpu_layers", "auto" if layers is None else "all" if layers == GPU_LAYERS_ALL else str(layers))
        self.q.setValue("n_threads_batch", config.n_threads_batch or 0)  # 0: as many as for decoding
        self.q.setValue("main_gpu", config.main_gpu)
        for key in ("flash_attn", "cache_type_k", "cache_type_v"):
            self.q.setValue(key, getattr(config, key).value)
        self.q.setValue("use_mlock", config.use_mlock)
        self.q.setValue("use_mmap", config.use_mmap)
        self.q.setValue("kv_unified", kv_unified_name(config.kv_unified))
        self.q.endGroup()

    def sync(self) -> None:
        self.q.sync()
        _owner_only(self.q)


def _gpu_layers(text: str) -> int | None:
    """A stored GPU layer count: "auto" (or anything unreadable), "all" or a number."""
    if text == "all":
        return GPU_LAYERS_ALL
    return int(text) if text.isdigit() else None


def _choice(kind, text: str, default):
    try:
        return kind(text)
    except ValueError:  # an edited or older settings file: the default
        return default


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
    """A seed of None (random) is stored as -1."""
    return -1 if name == "seed" and value is None else value


def _kind(name: str) -> type:
    """The stored type of a PaneParams field (seed is stored as int, -1 meaning random)."""
    if name in ("high_priority", "show_probs", "completion"):
        return bool
    return int if name in ("top_k", "max_tokens", "seed") else str if name in _TEXT_FIELDS else float


_TEXT_FIELDS = ("system_prompt", "remote_url", "remote_model", "remote_api_key", "model")
