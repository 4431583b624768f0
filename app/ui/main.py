"""Start the window on the qasync loop: lock the data folder, load the engine, restore the panes, run
the scripted demo if asked.

`run_app(args)` is what `python -m app` calls; args has .model, .panes, .prompt, .screenshot and
.exit_when_done (and optionally .screenshot_after_tokens, from `python -m app.ui.demo`).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path

import qasync
from PySide6.QtCore import QLockFile, QTimer
from PySide6.QtWidgets import QApplication

from app.client import EngineClient
from app.default_model import default_model_path
from app.engine.errors import EngineError, ModelLoadError
from app.engine.prompt.template_file import read_template_file
from app.ui.docks.batching_demo import DEMO_PROMPT, show_batching
from app.ui.window.fan_out import SETTINGS, Sweep, parse_values
from app.ui.window.layout_report import write_layout_report
from app.ui.window.main_window import MainWindow
from app.workspace.chat_store import ChatStore

from .settings import APPLICATION, HOME_ENV, ORGANISATION, AppSettings, data_dir, open_qsettings

POLL_S = 0.1
LOCK_FILE = "batch-playground.lock"
EXIT_LOCKED = 3  # another window has the data folder


def run_app(args) -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName(ORGANISATION)
    app.setApplicationName(APPLICATION)
    app.setQuitOnLastWindowClosed(False)  # the window's async close decides when we are done
    lock = lock_data_folder(data_dir())
    if lock is None:
        return EXIT_LOCKED
    try:
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)
        with loop:
            return loop.run_until_complete(_main(args))
    finally:
        lock.unlock()


def lock_data_folder(folder: Path) -> QLockFile | None:
    """One window per data folder, or two would overwrite each other's chats. None (and a message on
    stderr) when the folder is taken. The lock is held as long as the window runs, so it never goes
    stale with age (stale time 0); the lock of a killed process is taken over, as its process is gone."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot create the data folder {folder}: {e.strerror or e}", file=sys.stderr)
        return None
    lock = QLockFile(str(folder / LOCK_FILE))
    lock.setStaleLockTime(0)
    if lock.tryLock(0):
        return lock
    if lock.error() == QLockFile.LockError.LockFailedError:
        pid, host, _ = lock.getLockInfo()
        print(
            f"error: another Batch playground window (process {pid} on {host}) is using the data folder {folder}.\n"
            f"Close that window first, or set {HOME_ENV} to another folder to run a second one.",
            file=sys.stderr,
        )
    else:
        print(f"error: cannot create the lock file {folder / LOCK_FILE} (is the folder writable?)", file=sys.stderr)
    return None


async def _main(args) -> int:
    sigterm = CloseOnSigterm(QApplication.instance())  # from the start: a stop while loading closes cleanly too
    settings = AppSettings(open_qsettings())
    config = settings.engine_config(default_model_path())
    if args.model:
        config = config.with_(model_path=args.model)
    if args.panes:
        config = config.with_(capacity=max(config.capacity, args.panes))
    overrides = getattr(args, "engine_overrides", {})  # llama.cpp's flags on the command line
    notices: list[str] = []  # template files kept for a model that no longer serve

    def template_for(path: str) -> str | None:
        return usable_template(settings.chat_template_for(path), path, notices)

    config = config.with_(**{"chat_template_file": template_for(config.model_path), **overrides})
    client = EngineClient(config)
    await client.start()  # a bad model raises ModelLoadError here: the command line prints it
    kept = settings.chat_template_for(config.model_path) if "chat_template_file" not in overrides else None
    settings.set_engine_config(config.with_(chat_template_file=config.chat_template_file or kept))  # kept if it comes back
    # more models: those on the command line, else those loaded beside the first when the window closed
    models = getattr(args, "models", None)  # the demo's parser has none
    more = models[1:] if models else settings.extra_models
    not_loaded = await load_more_models(client, config, more, template_for)
    window = MainWindow(client, ChatStore(data_dir()), settings, pane_count=args.panes)
    said = notices + (["Not loaded: " + "; ".join(not_loaded)] if not_loaded else [])
    if said:
        window.statusBar().showMessage("; ".join(said), 20000)
    closed = asyncio.Event()
    window.sigClosed.connect(closed.set)
    window.show()
    if getattr(args, "docks", None):
        window.docks.show(args.docks)
    sigterm.watch(window)
    freeze_startup_objects()
    if getattr(args, "show_batching", False):
        prompt = args.prompt[0] if isinstance(args.prompt, list) else args.prompt  # the demo's --prompt repeats
        await show_batching(window.client, window.workspace, window.batching, window.statusBar(), prompt or DEMO_PROMPT)
        if args.screenshot:
            await asyncio.sleep(2 * POLL_S)  # the dock drawn
            save_screenshot(window, args.screenshot)
    elif args.prompt:
        await run_demo(window, args)
    if getattr(args, "geometry_json", None):
        await asyncio.sleep(2 * POLL_S)  # laid out and drawn after the last token
        window.tick()
        window.refresh_readouts()
        write_layout_report(window, args.geometry_json)
    if args.exit_when_done:
        window.close()
    await closed.wait()
    return 0


class CloseOnSigterm:
    """SIGTERM closes the window as its close button does (chats saved, the engine stopped); one that
    comes while the app starts closes the window as soon as it exists; a second one ends the process
    at once. Python sees a signal only when it runs, so a timer wakes it while Qt idles."""

    def __init__(self, app: QApplication):
        self.window: MainWindow | None = None
        self.asked = False
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._waker = QTimer(app, interval=200)
        self._waker.timeout.connect(lambda: None)
        self._waker.start()

    def _on_sigterm(self, _signum, _frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.asked = True
        if self.window is not None:
            self.window.close()

    def watch(self, window: MainWindow) -> None:
        self.window = window
        if self.asked:  # asked to stop while it started
            window.close()


async def load_more_models(client: EngineClient, config, paths: list[str], template_for=lambda _path: None) -> list[str]:
    """Load each model beside the first, with its settings and its own chat template file
    (`template_for`, None: the model's template); what could not be loaded, and why."""
    failed = []
    for path in paths:
        try:
            await client.load_model(config.for_other_model(path).with_(chat_template_file=template_for(path)))
        except (EngineError, ValueError) as e:  # a file gone or broken, a name taken
            failed.append(f"{Path(path).name}: {e}")
    return failed


def usable_template(path: str | None, model_path: str, notices: list[str]) -> str | None:
    """A template file kept for a model, if it still serves; else None (the model's own template)
    and a notice saying why, so that a file gone since never keeps the model from loading."""
    if path is None:
        return None
    try:
        read_template_file(path)
    except ModelLoadError as e:
        notices.append(f"{Path(model_path).name} chats with its own template: {e}")
        return None
    return path


def freeze_startup_objects() -> None:
    """Put every object made so far (the window's Qt wrappers and plot items, the engine's tables) out
    of the collector's sight, so a full collection scans only what came later. Unfrozen, one took
    59 ms with the window open: the GIL held all along, so the GUI and the engine's Python both
    stopped (measured)."""
    gc.collect()  # garbage first, or it would be kept for good
    gc.freeze()


async def run_demo(window: MainWindow, args) -> None:
    """Broadcast each prompt in turn (or fan the first out); save a screenshot mid-reply (after N
    tokens) or at the end."""
    prompts = args.prompt if isinstance(args.prompt, list) else [args.prompt]
    after_tokens = getattr(args, "screenshot_after_tokens", None)
    if getattr(args, "probs", False):
        for pane in window.panes:
            pane.params_editor.set_params(pane.params.with_(show_probs=True))
    if getattr(args, "schema", None):
        with open(args.schema, encoding="utf-8") as f:
            schema = f.read()
        for pane in window.panes:
            pane.params_editor.set_params(pane.params.with_(output_format="schema", output_text=schema, temperature=0.0))
    for i, prompt in enumerate(prompts):
        fan_out = getattr(args, "fan_out", None)
        if fan_out and i == 0:
            window.fan_out(demo_sweep(window, prompt, fan_out))
        else:
            window.workspace.broadcast(prompt)
        if after_tokens and args.screenshot and i == len(prompts) - 1:
            await _wait(
                lambda: (
                    window.workspace.is_idle or min(window.metrics.panes[p.key].gen_tokens for p in window.panes) >= after_tokens
                )
            )
            save_screenshot(window, args.screenshot)
            window.stop_all()  # the picture is taken: no need to wait for the rest
        await _wait(lambda: window.workspace.is_idle)
    if args.screenshot and not after_tokens:
        await asyncio.sleep(2 * POLL_S)  # one more plot tick after the last token
        save_screenshot(window, args.screenshot)


def demo_sweep(window: MainWindow, prompt: str, spec: str) -> Sweep:
    """A fan-out written as SETTING=VALUES (temperature=0.2..1.4 step 0.4), on the first pane's settings."""
    name, _, values = spec.partition("=")
    setting = next((s for s in SETTINGS if s.name == name.strip()), None)
    if setting is None:
        raise SystemExit(f"error: --fan-out: no setting {name!r}; one of {', '.join(s.name for s in SETTINGS)}")
    try:
        return Sweep(prompt, setting, parse_values(setting, values), window.panes[0].params, seed=42)
    except ValueError as e:
        raise SystemExit(f"error: --fan-out: {e}") from None


async def _wait(condition) -> None:
    while not condition():
        await asyncio.sleep(POLL_S)


def save_screenshot(window: MainWindow, path: str) -> None:
    window.tick()  # grab() paints synchronously; processing events here would re-enter asyncio tasks
    if not window.grab().save(path):
        raise OSError(f"could not write the screenshot to {path}")
