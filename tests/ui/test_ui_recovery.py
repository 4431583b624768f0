"""When things go wrong: the app killed mid-reply, a second window on the same data folder, the engine
thread dying under the window (the real failure path, no mocks). The kill needs a reply that streams for
seconds: the bundled model's; the engine's death shows alike on the tiny model."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from PySide6.QtCore import QLockFile, Qt
from ui_fixtures import QUICK, TINY_LONG, TINY_QUICK, close_window, open_window, set_params, start_long_reply, until

from app.engine.sampling.params import SamplingParams
from app.ui.main import EXIT_LOCKED, LOCK_FILE
from app.ui.settings import AppSettings, open_qsettings
from app.workspace.chat_store import CUT_BY_EXIT, NOTICE, ChatStore
from app.workspace.session import CHECKPOINT_S

pytestmark = pytest.mark.gui

CHAT_ID = "story"
PROMPT = "Write a long story about a dragon and a knight."  # greedy, it goes on past 3000 tokens


def app_command(home, *args: str) -> tuple[list[str], dict]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", BATCH_PLAYGROUND_HOME=str(home))
    return [sys.executable, "-m", "app", "--panes", "1", "--threads", "1", *args], env  # one: see open_window


def streamed_so_far(path) -> str | None:
    """The streaming reply in the chat file, or None while there is none (or the file is being replaced)."""
    try:
        last = json.loads(path.read_text(encoding="utf-8"))["messages"][-1]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return last["content"] if last.get("streaming") else None


def kill_while_streaming(home) -> tuple[str, float]:
    """Start the app on a long reply; kill -9 it a second after its second save of the reply.
    Returns the text saved last and how long before the kill it was saved."""
    command, env = app_command(home, "--prompt", PROMPT)
    app = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = ChatStore(home).path(CHAT_ID)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while len(seen) < 2:
            assert app.poll() is None, app.stderr.read().decode()
            assert time.monotonic() < deadline, "no reply was saved while it streamed"
            text = streamed_so_far(path)
            if text and text not in seen:
                seen.append(text)
            time.sleep(0.05)
        time.sleep(1.0)
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait()
    killed_at = time.time()
    assert app.returncode == -signal.SIGKILL
    saved = streamed_so_far(path)
    assert saved and saved.startswith(seen[0]) and len(saved) >= len(seen[1])  # it kept growing
    return saved, killed_at - path.stat().st_mtime


def test_a_kill_during_a_stream_loses_at_most_the_last_seconds(loop, home, tiny_model_path):
    settings = AppSettings(open_qsettings())
    settings.pane_ids = [CHAT_ID]
    settings.set_pane_params(CHAT_ID, QUICK.with_(max_tokens=SamplingParams.max_tokens * 8))
    settings.sync()
    saved, age = kill_while_streaming(home)
    assert age <= CHECKPOINT_S + 2.5  # the last save was at most a checkpoint (and some slack) old
    assert (home / LOCK_FILE).exists()  # the killed app's lock is still there...

    command, env = app_command(home, "--exit-when-done")
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr  # ...and does not keep the next start out

    async def reopen():  # what was saved is shown: no reply, any model
        window = await open_window(tiny_model_path, home, panes=1)
        try:
            pane = window.panes[0]
            assert [m["role"] for m in pane.chat.messages] == ["user", "assistant", NOTICE]
            assert pane.chat.messages[1] == {"role": "assistant", "content": saved, "cut": True}
            assert pane.chat.messages[2]["content"] == CUT_BY_EXIT
            shown = pane.transcript.toPlainText()
            assert saved.strip().splitlines()[-1] in shown and CUT_BY_EXIT in shown
        finally:
            await close_window(window)

    loop.run_until_complete(reopen())


def test_a_second_window_on_the_same_data_folder_is_refused(home):
    lock = QLockFile(str(home / LOCK_FILE))
    assert lock.tryLock(0)  # this process plays the first window
    try:
        command, env = app_command(home, "--exit-when-done")
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    finally:
        lock.unlock()
    assert second.returncode == EXIT_LOCKED
    assert f"another Batch playground window (process {os.getpid()}" in second.stderr
    assert str(home) in second.stderr and "BATCH_PLAYGROUND_HOME" in second.stderr


def kill_engine_thread(window) -> asyncio.Task:
    """End the engine thread through its own failure path: a call that raises a BaseException. Its
    answer never comes: cancel the task once the engine has stopped."""
    return asyncio.ensure_future(window.client.call(lambda engine: (_ for _ in ()).throw(SystemExit("boom"))))


def test_a_stopped_engine_shows_the_banner_and_restart_keeps_the_chats(run_tiny_window, qtbot):
    async def send(pane, text: str) -> None:
        qtbot.keyClicks(pane.input, text)
        qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
        await until(lambda: not pane.is_busy, what="the reply")

    async def scenario(window):
        first, second = window.panes
        set_params(window, TINY_QUICK)
        await send(first, "Hello")
        await start_long_reply(window, second, "Write a long story about a dragon.", TINY_LONG)
        await until(lambda: len(second.session.streamed.split()) >= 3, what="a few words")
        killed = kill_engine_thread(window)
        await until(lambda: window.banner.isVisible(), what="the banner")
        killed.cancel()
        await until(lambda: not second.is_busy, what="the stream to end")
        assert "boom" in window.banner.label.text() and window.banner.restart_button.isEnabled()
        reply, notice = second.chat.messages[-2:]
        assert reply["cut"] and len(reply["content"].split()) >= 3  # what was streamed stays
        assert notice["role"] == NOTICE and notice["content"].startswith("cut short:") and "boom" in notice["content"]

        set_params(window, TINY_QUICK)
        await send(first, "Are you there?")  # refused while stopped: said in the pane, the text kept
        assert first.chat.messages[-1]["content"].startswith("not answered:")
        assert first.input.toPlainText() == "Are you there?"

        before = [list(p.chat.messages) for p in window.panes]
        qtbot.mouseClick(window.banner.restart_button, Qt.MouseButton.LeftButton)
        await until(lambda: window.client.is_running and window.banner.isHidden(), what="the restart")
        assert [p.chat.messages for p in window.panes] == before
        first.input.clear()
        await send(first, "Hello again")
        assert [m["role"] for m in first.chat.messages[-3:]] == ["user", "assistant", NOTICE]
        assert first.chat.messages[-2]["content"].strip()

    run_tiny_window(scenario, panes=2)


def test_the_window_closes_with_a_stopped_engine(loop, home, tiny_model_path):
    async def scenario():
        window = await open_window(tiny_model_path, home, panes=1)
        window.panes[0].session.rename("Kept")
        killed = kill_engine_thread(window)
        await until(lambda: window.banner.isVisible(), what="the banner")
        killed.cancel()
        await close_window(window)
        assert window.is_closed and not window.isVisible()
        assert ChatStore(home).load(window.panes[0].key).name == "Kept"

    loop.run_until_complete(scenario())
