"""Thinking models through `serve`, with the official `openai` client: the bundled model carrying a
thinking family's template (think_templates.py, conftest's `thinking_models`), whose generation
prompt opens the thoughts, so that a reasoning budget gives thoughts, the closing marker, then an
answer. Chat completions send the thoughts as `reasoning_content` (whole and as deltas) and count
them in the usage; `reasoning_format: none` leaves them in the content; the template's variables
switch thinking off; earlier thoughts go back to the template; the Responses API gives a reasoning
item and its events."""

from __future__ import annotations

import aiohttp
import pytest
from helpers import run
from serving import Serving
from test_server_responses import openai_client

from app.cli import build_parser
from app.engine.params import EngineConfig
from app.server.protocol import Thinking

ASK = [{"role": "user", "content": "What is 2+2?"}]
# greedy, no penalty; 3 tokens of thoughts, then the marker and the answer
THINK = {"model": "m", "temperature": 0, "max_tokens": 40, "extra_body": {"repeat_penalty": 1.0, "reasoning_budget_tokens": 3}}
CLOSE_TOKENS = 5  # "\n</think>\n\n" in the bundled model's tokens


def _serve(path: str, body, **server_options):
    async def main():
        config = EngineConfig(model_path=path, n_ctx=4096, n_batch=256, capacity=4, n_threads=2)
        async with Serving(config, **server_options) as (_client, _server, url):
            api = openai_client(url)
            try:
                return await body(api, url)
            finally:
                await api.close()

    return run(main())


@pytest.mark.model
def test_chat_sends_thoughts_as_reasoning_content_whole_and_streamed(thinking_models):
    async def body(api, _url):
        whole = await api.chat.completions.create(messages=ASK, **THINK)
        chunks = [c async for c in await api.chat.completions.create(messages=ASK, stream=True, **THINK)]
        return whole, chunks

    whole, chunks = _serve(thinking_models["r1"], body)
    message = whole.choices[0].message
    assert message.reasoning_content and message.content.strip()
    assert "</think>" not in message.content + message.reasoning_content
    assert whole.usage.completion_tokens_details.reasoning_tokens == 3 + CLOSE_TOKENS
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thoughts = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert (thoughts, content) == (message.reasoning_content, message.content)
    first_thought = next(i for i, d in enumerate(deltas) if getattr(d, "reasoning_content", None))
    first_answer = next(i for i, d in enumerate(deltas) if d.content)
    assert first_thought < first_answer  # streamed as they come: the thoughts first


@pytest.mark.model
def test_reasoning_format_none_leaves_the_thoughts_in_the_content(thinking_models):
    async def body(api, _url):
        asked = await api.chat.completions.create(
            messages=ASK, **{**THINK, "extra_body": {**THINK["extra_body"], "reasoning_format": "none"}}
        )
        apart = await api.chat.completions.create(
            messages=ASK, **{**THINK, "extra_body": {**THINK["extra_body"], "reasoning_format": "deepseek"}}
        )
        return asked, apart

    asked, apart = _serve(thinking_models["r1"], body)
    message = asked.choices[0].message
    assert getattr(message, "reasoning_content", None) is None and "</think>" in message.content
    assert asked.usage.completion_tokens_details.reasoning_tokens == 3 + CLOSE_TOKENS  # still counted
    # the server's default (--reasoning-format none) and a request that asks for them apart
    assert apart.choices[0].message.reasoning_content


@pytest.mark.model
def test_the_servers_defaults_a_budget_and_thoughts_left_in(thinking_models):
    async def body(api, _url):
        return await api.chat.completions.create(messages=ASK, model="m", temperature=0, max_tokens=40)

    reply = _serve(thinking_models["r1"], body, thinking=Thinking(separate=False, budget=3))
    assert "</think>" in reply.choices[0].message.content
    assert reply.usage.completion_tokens_details.reasoning_tokens == 3 + CLOSE_TOKENS


@pytest.mark.model
def test_thinking_switched_off_by_template_variables_or_reasoning_effort(thinking_models):
    async def body(api, _url):
        off = await api.chat.completions.create(
            messages=ASK, **{**THINK, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
        )
        none = await api.chat.completions.create(messages=ASK, reasoning_effort="none", **THINK)
        return off, none

    for reply in _serve(thinking_models["r1"], body):
        message = reply.choices[0].message
        assert getattr(message, "reasoning_content", None) is None and message.content.strip()
        assert reply.usage.completion_tokens_details.reasoning_tokens == 0


@pytest.mark.model
def test_earlier_thoughts_go_back_to_the_template(thinking_models):
    thought = "Two and two make four, as counting on fingers shows."
    turns = [*ASK, {"role": "assistant", "content": "Four."}, {"role": "user", "content": "And 3+3?"}]
    with_thought = [*turns[:1], {**turns[1], "reasoning_content": thought}, *turns[2:]]

    async def body(api, _url):
        short = {"model": "m", "temperature": 0, "max_tokens": 2}
        return [(await api.chat.completions.create(messages=m, **short)).usage.prompt_tokens for m in (turns, with_thought)]

    without, given = _serve(thinking_models["qwen3"], body)
    assert given > without + 8  # the template wrote the thoughts into the prompt


@pytest.mark.model
def test_responses_give_a_reasoning_item_whole_and_streamed(thinking_models):
    asked = {"model": "m", "input": "What is 2+2?", "temperature": 0, "max_output_tokens": 40}
    asked["extra_body"] = {"repeat_penalty": 1.0, "reasoning_budget_tokens": 3}

    async def body(api, _url):
        whole = await api.responses.create(**asked)
        events = [e async for e in await api.responses.create(stream=True, **asked)]
        chained = await api.responses.create(**{**asked, "input": "And 3+3?", "previous_response_id": whole.id})
        off = await api.responses.create(**asked, reasoning={"effort": "none"})
        return whole, events, chained, off

    whole, events, chained, off = _serve(thinking_models["r1"], body)
    thoughts, message = whole.output
    assert thoughts.type == "reasoning" and thoughts.content[0].type == "reasoning_text" and thoughts.content[0].text
    assert message.type == "message" and whole.output_text.strip()
    assert whole.usage.output_tokens_details.reasoning_tokens == 3 + CLOSE_TOKENS
    types = [e.type for e in events]
    deltas = types.count("response.reasoning_text.delta")
    opening = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    closing = ["response.reasoning_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[: 4 + deltas + 3] == opening + ["response.reasoning_text.delta"] * deltas + closing
    assert types[4 + deltas + 3 : 4 + deltas + 5] == ["response.output_item.added", "response.content_part.added"]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == thoughts.content[0].text
    last = events[-1].response
    assert [item.type for item in last.output] == ["reasoning", "message"] and last.output_text == whole.output_text
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1]
    assert chained.output[0].type == "reasoning"  # the stored turn's thoughts went back with it
    assert [item.type for item in off.output] == ["message"] and off.reasoning.effort == "none"


@pytest.mark.model
def test_reasoning_items_given_back_as_input_reach_the_template(thinking_models):
    thought = "Two and two make four, as counting on fingers shows."

    async def body(api, _url):
        items = [
            {"role": "user", "content": "What is 2+2?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": thought}]},
            {"role": "assistant", "content": "Four."},
            {"role": "user", "content": "And 3+3?"},
        ]
        short = {"model": "m", "temperature": 0, "max_output_tokens": 2}
        given = await api.responses.create(input=items, **short)
        without = await api.responses.create(input=[items[0], *items[2:]], **short)
        return given.usage.input_tokens, without.usage.input_tokens

    given, without = _serve(thinking_models["qwen3"], body)
    assert given > without + 8


@pytest.mark.model
def test_bad_thinking_fields_are_a_400_that_names_them(thinking_models):
    bad = [
        ({"reasoning_format": "loud"}, "reasoning_format"),
        ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": "on"}, "chat_template_kwargs"),
        ({"reasoning_budget_tokens": -5}, "reasoning_budget_tokens"),
        ({"messages": [*ASK, {"role": "assistant", "content": "x", "reasoning_content": 7}]}, "messages[1].reasoning_content"),
    ]

    async def body(_api, url):
        replies = []
        async with aiohttp.ClientSession() as http:
            for fields, _ in bad:
                async with http.post(f"{url}/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, **fields}) as r:
                    replies.append((r.status, (await r.json())["error"]))
            async with http.post(f"{url}/v1/responses", json={"input": "hi", "reasoning": {"effort": 3}}) as r:
                replies.append((r.status, (await r.json())["error"]))
        return replies

    replies = _serve(thinking_models["r1"], body)
    for (status, error), (_, param) in zip(replies, bad, strict=False):
        assert status == 400 and error["param"] == param, error
    assert replies[-1][0] == 400 and replies[-1][1]["param"] == "reasoning"


@pytest.mark.model
def test_a_remote_pane_reads_the_thoughts_apart_over_either_api(thinking_models):
    from app.engine.events import FinishEvent
    from app.engine.sampling.params import GREEDY
    from app.remote import Endpoint, RemoteClient

    async def main():
        config = EngineConfig(model_path=thinking_models["r1"], n_ctx=4096, n_batch=256, capacity=4, n_threads=2)
        async with Serving(config, thinking=Thinking(budget=3)) as (_client, _server, url):
            replies = []
            for api in ("chat", "responses"):
                remote = RemoteClient(Endpoint(f"{url}/v1", api=api))
                try:
                    events = [e async for e in remote.generate(ASK, GREEDY.with_(max_tokens=40), conversation_id=api)]
                finally:
                    await remote.close()
                replies.append(events)
            return replies

    for events in run(main()):
        *tokens, final = events
        assert isinstance(final, FinishEvent) and final.reasoning and final.text.strip()
        assert "".join(e.reasoning for e in tokens) == final.reasoning and "".join(e.text for e in tokens) == final.text
        assert any(e.thought for e in tokens) and final.stats.reasoning_tokens == 3 + CLOSE_TOKENS


@pytest.mark.model
def test_a_remote_panes_think_switch_and_budget_reach_the_endpoint_over_either_api(thinking_models):
    """A pane's ⚙ Think off, and its budget, as the workspace asks a remote endpoint (a Request):
    sent as chat_template_kwargs and reasoning_budget_tokens, which serve and llama-server read."""
    from app.engine.events import FinishEvent
    from app.engine.sampling.params import GREEDY
    from app.engine.sequence import Request
    from app.remote import Endpoint, RemoteClient
    from app.workspace.pane_params import PaneParams

    async def main():
        config = EngineConfig(model_path=thinking_models["r1"], n_ctx=4096, n_batch=256, capacity=4, n_threads=2)
        async with Serving(config) as (_client, _server, url):
            finals = {}
            for api in ("chat", "responses"):
                for name, pane in (("off", PaneParams(think=False)), ("budget", PaneParams(reasoning_budget=2))):
                    remote = RemoteClient(Endpoint(f"{url}/v1", api=api))
                    request = Request(f"{api}-{name}", GREEDY.with_(max_tokens=40), messages=tuple(ASK), **pane.thinking())
                    try:
                        events = [e async for e in remote.reply(request)]
                    finally:
                        await remote.close()
                    assert isinstance(events[-1], FinishEvent)
                    finals[api, name] = events[-1]
            return finals

    for (_api, name), final in run(main()).items():
        assert final.ok and final.text.strip(), final
        if name == "off":
            assert not final.reasoning and final.stats.reasoning_tokens == 0
        else:
            assert final.reasoning and final.stats.reasoning_tokens == 2 + CLOSE_TOKENS


@pytest.mark.unit
def test_serves_thinking_flags_as_llama_server_names_them():
    args = build_parser().parse_args(
        [
            "serve",
            "--reasoning-format",
            "none",
            "--reasoning-budget",
            "64",
            "--chat-template-kwargs",
            '{"enable_thinking": false}',
        ]
    )
    assert (args.reasoning_format, args.reasoning_budget, args.chat_template_kwargs) == ("none", 64, {"enable_thinking": False})
    defaults = build_parser().parse_args(["serve"])
    assert (defaults.reasoning_format, defaults.reasoning_budget, defaults.chat_template_kwargs) == ("deepseek", -1, {})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--chat-template-kwargs", "[1]"])
