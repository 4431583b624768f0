"""A remote pane's output format on the wire: JSON and a JSON schema as the chat API's `response_format`
and the Responses API's `text.format`, a GBNF grammar as `grammar`; against a real `serve`, the reply
follows it, and what the endpoint refuses comes back as its 400's message, naming the format."""

from __future__ import annotations

import json
import re

import pytest
from aiohttp import web
from helpers import collect, run, user
from serving import Serving
from spawn import free_port

from app.engine.events import FinishReason
from app.engine.sampling.params import GREEDY
from app.engine.sequence import Request
from app.remote import Endpoint, FormattedSampling, OutputFormat, RemoteClient
from app.remote.chat_api import body as chat_body
from app.remote.responses_api import ResponsesApi
from app.workspace.pane_params import PaneParams

ANSWER = {
    "title": "Yes or no",
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
    "additionalProperties": False,
}  # a reply of bounded length, even from the tiny model's random weights
SCHEMA = json.dumps(ANSWER)
YES_NO = 'root ::= "yes" | "no"'
ENDPOINT = Endpoint("http://example.test/v1")


def sent(output: OutputFormat | None, api: str = "chat") -> dict:
    """The body a reply with `output` is asked with, over `api`."""
    params = FormattedSampling(output=output)
    if api == "chat":
        return chat_body(ENDPOINT, user("Hi"), params)
    (body,) = ResponsesApi().bodies(ENDPOINT, user("Hi"), params, None)
    return body


@pytest.mark.unit
def test_each_format_is_asked_in_the_apis_own_terms():
    named = {"name": "Yes_or_no", "schema": ANSWER, "strict": True}  # the title, as a name the APIs take
    assert sent(OutputFormat("json"))["response_format"] == {"type": "json_object"}
    assert sent(OutputFormat("schema", SCHEMA))["response_format"] == {"type": "json_schema", "json_schema": named}
    assert sent(OutputFormat("grammar", YES_NO))["grammar"] == YES_NO
    assert sent(OutputFormat("json"), "responses")["text"] == {"format": {"type": "json_object"}}
    assert sent(OutputFormat("schema", SCHEMA), "responses")["text"] == {"format": {"type": "json_schema", **named}}
    assert sent(OutputFormat("grammar", YES_NO), "responses")["grammar"] == YES_NO  # the endpoint says if it takes it
    assert not {"response_format", "grammar", "text"} & (set(sent(None)) | set(sent(None, "responses")))
    untitled = OutputFormat("schema", json.dumps({"type": "object"}))
    assert sent(untitled)["response_format"]["json_schema"]["name"] == "reply"
    # a grammar alone (not a pane's format) is sent as one
    assert chat_body(ENDPOINT, user("Hi"), GREEDY.with_(grammar=YES_NO))["grammar"] == YES_NO


@pytest.mark.unit
def test_a_remote_pane_sends_its_format_and_leaves_the_schema_to_the_endpoint():
    pane = PaneParams(output_format="schema", output_text=SCHEMA, remote_url="http://example.test/v1")
    params = pane.sampling()
    assert isinstance(params, FormattedSampling) and params.output == OutputFormat("schema", SCHEMA)
    assert params.grammar is None  # no grammar made here: the endpoint constrains the reply
    assert pane.format_problem() is None
    # a schema llama.cpp cannot turn into a grammar is the endpoint's to judge; no JSON at all is not sent
    assert pane.with_(output_text='{"type": "objectx"}').format_problem() is None
    assert pane.with_(output_text="{bad").format_problem().startswith("the JSON schema is not JSON")
    assert pane.with_(output_format="grammar", output_text=" ").format_problem() == "a grammar must be GBNF text"
    assert type(pane.with_(remote_url="").sampling()) is not FormattedSampling  # the local engine: its grammar
    assert pane.with_(remote_url="").sampling().grammar


async def _replies(config, asks) -> list:
    """Each (api, output, text) asked of a `serve` on loopback through RemoteClient.reply, the pane's path."""
    finals = []
    async with Serving(config) as (_client, _server, url):
        for i, (api, output, text) in enumerate(asks):
            remote = RemoteClient(Endpoint(url, api=api))
            params = FormattedSampling(temperature=0.0, max_tokens=120, output=output)
            request = Request(f"r{i}", params, messages=tuple(user(text)), conversation_id=f"c{i}")
            finals.append((await collect(remote.reply(request)))[1])
            await remote.close()
    return finals


@pytest.mark.tiny
def test_a_serve_follows_the_format_each_api_asks_for_and_its_refusals_are_said(tiny_config):
    asks = [
        ("chat", OutputFormat("schema", SCHEMA), "Are you sure?"),
        ("responses", OutputFormat("schema", SCHEMA), "Are you sure?"),
        ("chat", OutputFormat("grammar", YES_NO), "Yes or no?"),
        ("chat", OutputFormat("schema", '{"type": "objectx"}'), "Hi"),
        ("responses", OutputFormat("grammar", YES_NO), "Yes or no?"),
    ]
    chat, responses, grammar, bad_schema, responses_grammar = run(_replies(tiny_config.with_(capacity=2), asks))
    for final in (chat, responses):
        assert final.reason is FinishReason.STOP  # a constrained reply ends where its format does
        reply = json.loads(final.text)
        assert set(reply) == {"answer", "sure"} and reply["answer"] in ("yes", "no") and isinstance(reply["sure"], bool)
    assert grammar.reason is FinishReason.STOP and grammar.text in ("yes", "no")
    assert bad_schema.reason is FinishReason.ERROR and bad_schema.text == ""
    assert "/chat/completions answered 400 (asked for a JSON schema in ⚙ Output): the JSON schema cannot" in bad_schema.error
    assert "/responses answered 400 (asked for a GBNF grammar in ⚙ Output)" in responses_grammar.error
    assert 'does not support "grammar"' in responses_grammar.error


@pytest.mark.tiny
def test_a_serve_holds_a_remote_panes_regex_or_lark_and_says_nothing_more(tiny_config):
    pane = PaneParams(remote_url="http://example.test/v1")
    regex = pane.with_(output_format="regex", output_text="[0-9]{3}-[a-c]{2}").remote_output()
    lark = pane.with_(output_format="lark", output_text='start: "#" /[0-9a-f]{6}/').remote_output()
    assert regex.chat_fields() == {"grammar": "start: /[0-9]{3}-[a-c]{2}/"}  # sent as serve's grammar, in Lark
    held_regex, held_lark = run(
        _replies(tiny_config.with_(capacity=2), [("chat", regex, "A code?"), ("chat", lark, "A colour?")])
    )
    assert held_regex.reason is FinishReason.STOP and re.fullmatch(r"[0-9]{3}-[a-c]{2}", held_regex.text)
    assert held_lark.reason is FinishReason.STOP and re.fullmatch(r"#[0-9a-f]{6}", held_lark.text)
    assert held_regex.notice is None and held_lark.notice is None


@pytest.mark.unit
def test_an_endpoint_that_ignores_the_grammar_is_said_to_have_ignored_it():
    """An endpoint that takes `grammar` and does nothing with it (as many do with a field they do not
    know): the reply is read against the pane's regular expression, and the pane is told."""
    bodies = []

    async def ignores(request):
        bodies.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in ({"delta": {"content": "Hello there"}}, {"delta": {}, "finish_reason": "stop"}):
            await response.write(b"data: " + json.dumps({"choices": [chunk]}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", ignores)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        remote = RemoteClient(Endpoint(f"http://127.0.0.1:{port}/v1"))
        try:
            finals = []
            for text in ("[0-9]{3}", "Hello [a-z]+"):
                pane = PaneParams(output_format="regex", output_text=text, remote_url=remote.endpoint.base_url)
                request = Request(f"r{text}", pane.sampling(), messages=tuple(user("Hi")))
                finals.append((await collect(remote.reply(request)))[1])
            return finals
        finally:
            await remote.close()
            await runner.cleanup()

    ignored, matched = run(main())
    assert bodies[0]["grammar"] == "start: /[0-9]{3}/"
    assert ignored.reason is FinishReason.STOP and ignored.text == "Hello there"
    assert ignored.notice.startswith("the reply does not follow a regular expression in ⚙ Output: 127.0.0.1:")
    assert "ignored it" in ignored.notice
    assert matched.notice is None  # a reply that follows it: nothing to say
