"""A model file is untrusted input: a chat template that loops fails its request and the model goes
on serving; serve and the window stop at once whatever a render is doing; a model path that is not a
regular file is refused without being opened."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import openai
import pytest
from conftest import write_tiny_model
from helpers import Started, collect, run
from PySide6.QtCore import Qt
from serving import Serving
from spawn import free_port, running, serve_command
from test_template_budget import LOOPS_ON_REQUEST
from ui_fixtures import TINY_QUICK, close_window, open_window, set_params, until

from app.client import new_request_id
from app.engine.errors import ModelLoadError
from app.engine.events import FinishReason
from app.engine.model_file import check_gguf_file
from app.engine.params import EngineConfig
from app.engine.prompt.chat_template import RENDER_SECONDS
from app.engine.sampling.params import GREEDY
from app.models.gguf_meta import read_gguf
from app.models.library import ModelFinder, ModelFolder
from app.workspace.chat_store import NOTICE

LOOP = [{"role": "user", "content": "loop"}]
HI = [{"role": "user", "content": "hi"}]
TINY_GREEDY = GREEDY.with_(max_tokens=4)


@pytest.fixture(scope="module")
def looping_model_path(model_path, tmp_path_factory) -> str:
    """The tiny model whose chat template loops 10^10 times when the chat's first message is "loop"."""
    folder = tmp_path_factory.mktemp("hostile")
    template = folder / "loops.jinja"
    template.write_text(LOOPS_ON_REQUEST)
    return write_tiny_model(model_path, folder / "Looper.gguf", "--chat-template", str(template))


def _config(path: str) -> EngineConfig:
    return EngineConfig(model_path=path, n_ctx=2048, n_batch=256, capacity=4, n_threads=1)


@pytest.mark.tiny
def test_a_looping_template_is_a_400_naming_it_while_completions_and_other_chats_are_served(looping_model_path):
    async def main():
        async with Serving(_config(looping_model_path)) as (_client, _server, url):
            api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
            started = time.monotonic()
            looped = asyncio.ensure_future(api.chat.completions.create(model="m", messages=LOOP, max_tokens=4))
            await asyncio.sleep(0.2)  # the render is running: a completion beside it
            completion = await api.completions.create(model="m", prompt="Once upon", max_tokens=4, temperature=0)
            with pytest.raises(openai.BadRequestError) as info:
                await looped
            took = time.monotonic() - started
            chat = await api.chat.completions.create(model="m", messages=HI, max_tokens=4, temperature=1.0, seed=1)
            return completion, info.value, took, chat

    completion, error, took, chat = run(main())
    assert completion.usage.completion_tokens == 4
    message = error.body["message"]
    assert "the chat template of Looper did not finish within 2 s" in message and "built-in template" in message
    assert took < RENDER_SECONDS + 3
    assert chat.usage.completion_tokens == 4 and chat.choices[0].finish_reason == "length"  # a fresh sandbox renders it


@pytest.mark.tiny
def test_a_request_cancelled_while_its_template_loops_ends_at_once_as_cancelled(looping_model_path):
    async def main():
        async with Started(_config(looping_model_path)) as client:
            request_id = new_request_id()
            reply = asyncio.ensure_future(collect(client.generate(LOOP, request_id=request_id)))
            await asyncio.sleep(0.5)  # the render has begun
            started = time.monotonic()
            client.cancel(request_id)
            _, final = await reply
            took = time.monotonic() - started
            _, after = await collect(client.generate(HI, TINY_GREEDY))  # the next render: a fresh sandbox
            return final, took, after

    final, took, after = run(main())
    assert final.reason is FinishReason.CANCELLED and took < 1.0
    assert after.reason is FinishReason.LENGTH


@pytest.mark.tiny
def test_serve_stops_on_sigterm_at_once_while_a_template_loops(looping_model_path):
    port = free_port()
    command = serve_command(port, "--model", looping_model_path, "--parallel", "2", "--ctx", "2048", "--threads", "1")
    with running(command, port) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)
        threading.Thread(target=_quietly, args=(client, LOOP), daemon=True).start()
        time.sleep(0.5)  # the render has begun
        process = _server_process(port)
        started = time.monotonic()
        os.kill(process, signal.SIGTERM)
        while _alive(process) and time.monotonic() - started < 30:
            time.sleep(0.05)
        took = time.monotonic() - started
    # its requests in flight get the server's graceful 2 s (shutdown_timeout), then are cancelled, which kills a render
    assert took < 2.0 + 3, f"serve took {took:.1f} s to stop"


def _quietly(client, messages) -> None:
    try:
        client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    except openai.OpenAIError:
        pass


def _server_process(port: int) -> int:
    """The pid of the serve process listening on `port` (running() holds the Popen)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f"--port\0{port}\0".encode() in f.read():
                        return int(pid)
            except OSError:
                continue
    raise AssertionError("the serve process was not found")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.unit
def test_a_fifo_as_the_model_is_refused_at_once_everywhere(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(ModelLoadError, match="model path is a FIFO \\(named pipe\\), not a GGUF file"):
        check_gguf_file(str(fifo))
    assert read_gguf(fifo).error == "not a regular file (a FIFO, socket or device)"
    scan = ModelFinder().scan([ModelFolder(str(tmp_path))])
    assert [entry.meta.error for entry in scan.entries] == ["not a regular file (a FIFO, socket or device)"]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(fifo), "--max-tokens", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "FIFO" in result.stderr and time.monotonic() - started < 30


@pytest.mark.model
def test_a_split_model_whose_other_part_is_a_fifo_is_refused(tmp_path, model_path):
    first = tmp_path / "big-00001-of-00002.gguf"
    os.symlink(model_path, first)
    os.mkfifo(tmp_path / "big-00002-of-00002.gguf")
    with pytest.raises(ModelLoadError, match="a part of this split model is a FIFO"):
        check_gguf_file(str(first))


@pytest.mark.gui
def test_the_pane_says_the_template_failed_and_its_offer_chats_with_the_built_in_one(loop, home, looping_model_path, qtbot):
    async def main():
        window = await open_window(looping_model_path, home, panes=1)
        try:
            pane = window.panes[0]
            set_params(window, TINY_QUICK.with_(max_tokens=6))
            qtbot.keyClicks(pane.input, "loop")
            qtbot.keyClick(pane.input, Qt.Key.Key_Return)
            await until(lambda: pane.template_button.isVisible(), 30, "the offer of the built-in template")
            notice = pane.chat.messages[-1]
            assert notice["role"] == NOTICE and "the chat template of Looper did not finish" in notice["content"]
            assert pane.input.toPlainText() == "loop"  # the turn is back in the field
            assert "Looper" in pane.template_button.toolTip()
            qtbot.mouseClick(pane.template_button, Qt.MouseButton.LeftButton)
            await until(lambda: not pane.is_busy and any(m["role"] == "assistant" for m in pane.chat.messages), 30, "the reply")
            assert [m["role"] for m in pane.chat.messages if m["role"] != NOTICE] == ["user", "assistant"]
            assert pane.params.builtin_template and pane.params_editor.builtin_template.isChecked()
            assert not pane.template_button.isVisible() and pane.input.toPlainText() == ""
        finally:
            await close_window(window)

    loop.run_until_complete(main())


@pytest.mark.gui
def test_the_window_closes_at_once_while_a_template_loops(loop, home, looping_model_path, qtbot):
    async def main():
        window = await open_window(looping_model_path, home, panes=1)
        pane = window.panes[0]
        qtbot.keyClicks(pane.input, "loop")
        qtbot.keyClick(pane.input, Qt.Key.Key_Return)
        await asyncio.sleep(0.5)  # the render has begun
        started = time.monotonic()
        await close_window(window)
        return time.monotonic() - started

    assert loop.run_until_complete(main()) < RENDER_SECONDS


@pytest.mark.gui
@pytest.mark.parametrize("after_s", [0.0, 1.0], ids=["while-starting", "window-up"])
def test_the_app_closes_its_window_on_sigterm_and_saves_before_it_exits(tmp_path, tiny_model_path, after_s):
    env = dict(os.environ, BATCH_PLAYGROUND_HOME=str(tmp_path), QT_QPA_PLATFORM="offscreen")
    command = [sys.executable, "-m", "app", "--model", tiny_model_path, "--panes", "1", "--threads", "1"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "settings.ini").exists() and time.monotonic() < deadline:  # written once the window is up
            time.sleep(0.1)
        time.sleep(after_s)  # 0: the engine may still be loading, no window yet
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        rc = process.wait(30)
        took = time.monotonic() - started
    finally:
        process.kill()
    assert rc == 0 and took < 10  # closed as by its close button, not killed (-15)
    assert not (tmp_path / "batch-playground.lock").exists()
