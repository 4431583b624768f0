"""The window over HTTP: a pane chatting with a second `serve` process, a dead endpoint, the serve switch;
on the tiny model, here and in the second process (what is checked is what goes over HTTP, not its words)."""

from __future__ import annotations

import json
import math
import stat

import aiohttp
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from spawn import free_port, running, serve_command
from ui_fixtures import TINY_LONG, TINY_QUICK, set_params, start_long_reply, until

from app.engine.events import FinishReason
from app.ui.pane.params_editor import PaneParamsEditor
from app.ui.settings import AppSettings, open_qsettings
from app.ui.window.main_window import API_KEY
from app.workspace.chat_store import NOTICE
from app.workspace.markdown_stream import VALID_JSON
from app.workspace.pane_params import PaneParams

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def second_serve(tiny_model_path):
    port = free_port()
    flags = ("--model", tiny_model_path, "--threads", "1", "--ctx", "2048", "--parallel", "2")
    with running(serve_command(port, *flags), port) as url:
        yield url


def test_a_remote_pane_chats_with_a_second_serve_process(run_tiny_window, second_serve):
    async def scenario(window):
        local, remote = window.panes
        set_params(window, TINY_QUICK)
        remote.params_editor.set_params(TINY_QUICK.with_(remote_url=second_serve))
        steps_before = window.client.snapshot.steps
        remote.session.send("What is the capital of France?")
        await until(lambda: not remote.is_busy, what="the remote reply")
        assert window.client.snapshot.steps == steps_before, "the local engine served the remote pane"
        assert [m["role"] for m in remote.chat.messages] == ["user", "assistant", NOTICE]  # cut at 24 tokens
        remote.session.send("And of Italy?")
        await until(lambda: not remote.is_busy, what="the second remote reply")
        m = window.metrics.panes[remote.key]
        assert m.ttft_s > 0 and m.kv_hit_rate > 0.3  # from the server's cached_tokens
        assert len(m.ttft) == 2 and len(m.kv_hit) == 2  # the plots got their points
        assert "127.0.0.1" in remote.name_label.text()
        await start_long_reply(window, remote, "Tell me a long story.", TINY_LONG.with_(remote_url=second_serve))
        remote.session.stop()
        await until(lambda: not remote.is_busy, what="the stop")
        assert remote.chat.messages[-1]["content"] == "stopped"
        local.session.send("Hi")
        await until(lambda: not local.is_busy, what="the local reply")
        assert [m["role"] for m in local.chat.messages][:2] == ["user", "assistant"]

    run_tiny_window(scenario, panes=2)


def test_a_pane_set_to_the_responses_api_goes_on_from_its_last_response(run_tiny_window, second_serve):
    async def scenario(window):
        (remote,) = window.panes
        remote.params_editor.set_params(TINY_QUICK.with_(remote_url=second_serve))
        combo = remote.params_editor.api_combo
        combo.setFocus()
        QTest.keyClick(combo, Qt.Key.Key_Down)  # Chat completions -> Responses, by the keyboard
        assert remote.params_editor.params.remote_api == "responses"
        for question in ("What is the capital of France?", "And of Italy?", "And of Spain?"):
            remote.session.send(question)
            await until(lambda: not remote.is_busy, what="the remote reply")
        endpoint = remote.params_editor.params.endpoint()
        client = window.workspace.sources.for_endpoint(endpoint)
        assert endpoint.api == "responses" and client.api.path == "/responses"
        assert [m["role"] for m in remote.chat.messages if m["role"] != NOTICE][-2:] == ["user", "assistant"]
        m = window.metrics.panes[remote.key]
        assert len(m.kv_hit) == 3 and m.kv_hit_rate > 0.3  # from input_tokens_details.cached_tokens
        return list(client.api.last.values())

    (last,) = run_tiny_window(scenario, panes=1)
    assert last.response_id.startswith("resp_") and last.turns[-2]["content"] == "And of Spain?"


ANSWER_SCHEMA = (  # a reply of bounded length, even from the tiny model's random weights
    '{"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},'
    ' "required": ["answer", "sure"], "additionalProperties": false}'
)


def _type_into(qtbot, field, text: str) -> None:
    """Click into a field, replace what it holds by typing, as a person does."""
    qtbot.mouseClick(field.viewport() if hasattr(field, "viewport") else field, Qt.MouseButton.LeftButton)
    qtbot.keyClick(field, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(field, text)


def _pick(qtbot, combo, label: str) -> None:
    """Open a combo box with the mouse and pick `label` with the keyboard."""
    qtbot.mouseClick(combo, Qt.MouseButton.LeftButton)
    combo.view().setCurrentIndex(combo.model().index(combo.findText(label), 0))
    qtbot.keyClick(combo.view(), Qt.Key.Key_Return)
    assert combo.currentText() == label


async def _send(qtbot, pane, text: str):
    """Type a message, click Send, and wait for the reply's end; its final event."""
    finals = []
    pane.sigReplyFinished.connect(finals.append)
    _type_into(qtbot, pane.input, text)
    qtbot.mouseClick(pane.send_button, Qt.MouseButton.LeftButton)
    await until(lambda: finals and not pane.is_busy, 60, "the remote reply")
    pane.sigReplyFinished.disconnect(finals.append)
    return finals[0]


def test_a_remote_pane_held_to_a_schema_gets_json_with_its_keys_and_a_refusal_is_said(run_tiny_window, qtbot, second_serve):
    async def scenario(window):
        (pane,) = window.panes
        set_params(window, TINY_QUICK.with_(temperature=0.0, max_tokens=120))
        steps_before = window.client.snapshot.steps
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        editor = pane.params_editor
        _type_into(qtbot, editor.endpoint_edits["remote_url"], second_serve)
        qtbot.keyClick(editor.endpoint_edits["remote_url"], Qt.Key.Key_Return)  # the edit is applied
        _pick(qtbot, editor.output_combo, "JSON schema")
        _type_into(qtbot, editor.output_edit, ANSWER_SCHEMA)
        await until(lambda: editor.output_check.text().startswith("✓ sent with each request"), 5, "the schema's check")
        assert pane.params.remote_url == second_serve and pane.params.output_format == "schema"
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)  # the settings fold away

        final = await _send(qtbot, pane, "Are you sure?")
        assert final.reason is FinishReason.STOP and window.client.snapshot.steps == steps_before  # the remote's reply
        reply = json.loads(pane.chat.messages[-1]["content"])
        assert set(reply) == {"answer", "sure"} and reply["answer"] in ("yes", "no") and isinstance(reply["sure"], bool)
        assert VALID_JSON in pane.transcript.toPlainText()

        # a schema the endpoint refuses: its 400 is said in the pane, naming the format, and the message is kept
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        _type_into(qtbot, editor.output_edit, '{"type": "objectx"}')
        await until(lambda: editor.output_check.text().startswith("✓"), 5, "the schema's check")
        qtbot.mouseClick(pane.settings_button, Qt.MouseButton.LeftButton)
        final = await _send(qtbot, pane, "And now?")
        assert final.reason is FinishReason.ERROR
        notice = pane.chat.messages[-1]
        assert notice["role"] == NOTICE and notice["content"].startswith(f"not answered: {second_serve}")
        assert (
            "answered 400 (asked for a JSON schema in ⚙ Output): the JSON schema cannot be turned into a grammar"
            in notice["content"]
        )
        assert pane.input.toPlainText() == "And now?"  # given back to send again
        assert [m["role"] for m in pane.chat.messages] == ["user", "assistant", NOTICE]

    run_tiny_window(scenario, panes=1)


def test_a_dead_endpoint_shows_the_reason_and_the_other_panes_go_on(run_tiny_window):
    async def scenario(window):
        local, remote = window.panes
        set_params(window, TINY_QUICK)
        remote.params_editor.set_params(TINY_QUICK.with_(remote_url=f"http://127.0.0.1:{free_port()}/v1"))
        remote.session.send("Hello?")
        local.session.send("Hi")
        await until(lambda: window.workspace.is_idle, what="both panes")
        assert remote.chat.messages[-1]["content"].startswith("not answered: cannot reach http://127.0.0.1:")
        assert remote.input.toPlainText() == "Hello?"  # the refused message is given back
        assert [m["role"] for m in local.chat.messages][:2] == ["user", "assistant"]

    run_tiny_window(scenario, panes=2)


def test_serve_switch_shares_the_engine_and_plots_api_requests(run_tiny_window):
    async def scenario(window):
        control = window.serve_control
        control.address_edit.setText(f"127.0.0.1:{free_port()}")
        control.toggle.setChecked(True)
        await until(lambda: window.api_server.is_serving, what="the server")
        assert API_KEY in window.plots.pane_curves
        set_params(window, TINY_QUICK)
        window.panes[0].session.send("Tell me about cats.")
        async with aiohttp.ClientSession() as http:
            body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 1, "seed": 1}
            async with http.post(f"{window.api_server.url}/v1/chat/completions", json=body) as r:
                assert r.status == 200 and (await r.json())["choices"][0]["message"]["content"]
        assert not math.isnan(window.metrics.panes[API_KEY].ttft_s)
        await until(lambda: window.workspace.is_idle)
        control.toggle.setChecked(False)
        await until(lambda: not window.api_server.is_serving, what="the server to stop")
        assert API_KEY not in window.plots.pane_curves and API_KEY not in window.metrics.panes

    run_tiny_window(scenario, panes=1)


def test_serving_beyond_loopback_without_a_key_says_so(run_tiny_window):
    async def scenario(window):
        control, shown = window.serve_control, {}
        for address, key in (("0.0.0.0", ""), ("0.0.0.0", "sesame"), ("127.0.0.1", "")):
            control.address_edit.setText(f"{address}:{free_port()}")
            control.key_edit.setText(key)
            control.toggle.setChecked(True)
            await until(lambda: window.api_server.is_serving, what="the server")
            shown[(address, key)] = control.status.text()
            control.toggle.setChecked(False)
            await until(lambda: not window.api_server.is_serving, what="the server to stop")
        return shown

    shown = run_tiny_window(scenario, panes=1)
    assert "anyone who reaches it" in shown[("0.0.0.0", "")]
    assert "anyone" not in shown[("0.0.0.0", "sesame")] and "anyone" not in shown[("127.0.0.1", "")]


def test_a_pane_endpoint_is_saved_with_its_settings(home, qapp):
    settings = AppSettings(open_qsettings())
    params = PaneParams(
        remote_url="http://example.test:8000/v1", remote_model="m", remote_api_key="secret", remote_api="responses"
    )
    settings.set_pane_params("p1", params)
    settings.sync()
    assert AppSettings(open_qsettings()).pane_params("p1") == params
    assert params.endpoint().api_url == "http://example.test:8000/v1" and params.endpoint().api == "responses"
    assert PaneParams().endpoint() is None


def test_the_settings_file_is_readable_by_its_owner_only(home, qapp):
    ini = home / "settings.ini"
    ini.write_text("[General]\n")
    ini.chmod(0o644)  # as an older version left it
    settings = AppSettings(open_qsettings())
    assert stat.S_IMODE(ini.stat().st_mode) == 0o600
    ini.unlink()  # a first run: Qt must not write the key into a file others can read
    settings = AppSettings(open_qsettings())
    settings.set_pane_params("p1", PaneParams(remote_url="https://example.test/v1", remote_api_key="secret"))
    settings.sync()
    assert "secret" in ini.read_text() and stat.S_IMODE(ini.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "url, key, warned_host",
    [
        ("http://example.test:8000/v1", "secret", "example.test"),
        ("http://10.0.0.7:8080", "secret", "10.0.0.7"),
        ("https://example.test/v1", "secret", None),
        ("http://localhost:8080/v1", "secret", None),
        ("http://127.0.0.2:8080", "secret", None),
        ("http://[::1]:8080", "secret", None),
        ("http://example.test:8000/v1", "", None),
    ],
)
def test_a_key_sent_over_plain_http_is_warned_of(qtbot, url, key, warned_host):
    editor = PaneParamsEditor(PaneParams())
    qtbot.addWidget(editor)
    editor.show()
    qtbot.keyClicks(editor.endpoint_edits["remote_api_key"], key)
    assert editor.key_warning.isHidden()
    qtbot.keyClicks(editor.endpoint_edits["remote_url"], url)
    assert editor.key_warning.isVisible() is (warned_host is not None)
    if warned_host:
        assert editor.key_warning.text() == f"The API key is sent unencrypted over http to {warned_host}."
        editor.endpoint_edits["remote_api_key"].clear()  # no key, nothing to warn of
        assert editor.key_warning.isHidden()
