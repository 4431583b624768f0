"""A remote pane's output format on the wire: JSON and a JSON schema as the chat API's `response_format`
and the Responses API's `text.format`, a GBNF grammar as `grammar`; against a real `serve`, the reply
follows it, and what the endpoint refuses comes back as its 400's message, naming the format."""

from __future__ import annotations

import json

import pytest
from helpers import collect, run, user
from serving import Serving

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
