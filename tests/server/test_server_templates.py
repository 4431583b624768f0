"""Chat templates through `serve`, with the official `openai` client, on the bundled model carrying
short templates of the tests' own (caps_templates.py, think_templates.py): a template that refuses a
system message gets it folded into the first user turn, one that reads `functions` or typed content
serves chats and tools, and the arguments of a call reach each template as it reads them;
`--chat-template-file` on the command line; a last assistant message is
continued (llama-server's prefill: the reply sends the continuation only), whole and streamed, and
inside or after a thinking model's thoughts; `POST /apply-template` shows the prompt."""

from __future__ import annotations

import json
import subprocess
import sys

import aiohttp
import caps_templates
import pytest
import tool_templates
from helpers import run
from serving import Serving
from spawn import ROOT, free_port, running, serve_command
from test_server_responses import openai_client

from app.client import new_request_id
from app.engine.params import EngineConfig
from app.engine.sampling.params import GREEDY as GREEDY_PARAMS
from app.engine.sequence import Request

pytestmark = pytest.mark.model

SYSTEM = "Answer in one word."
ASK = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"model": "m", "temperature": 0, "max_tokens": 12}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call0A1b2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
RESULT = "sunny, 21 degrees"


def _serve(path: str, body, template_file: str | None = None):
    async def main():
        config = EngineConfig(model_path=path, n_ctx=4096, n_batch=256, capacity=4, n_threads=2, chat_template_file=template_file)
        async with Serving(config) as (_client, _server, url):
            api = openai_client(url)
            try:
                async with aiohttp.ClientSession() as http:
                    return await body(api, Prompts(http, url))
            finally:
                await api.close()

    return run(main())


class Prompts:
    """`POST /apply-template`: the prompt a chat completion's body makes."""

    def __init__(self, http: aiohttp.ClientSession, url: str):
        self.http, self.url = http, url

    async def __call__(self, messages: list[dict], **fields) -> str:
        async with self.http.post(f"{self.url}/apply-template", json={"messages": messages, **fields}) as response:
            body = await response.json()
            assert response.status == 200, body
            return body["prompt"]

    async def refused(self, messages: list[dict], **fields) -> dict:
        async with self.http.post(f"{self.url}/apply-template", json={"messages": messages, **fields}) as response:
            assert response.status == 400
            return (await response.json())["error"]


async def _called(api, messages: list[dict]) -> tuple[str, str]:
    """The name of the `required` call, whole and streamed."""
    fields = {**GREEDY, "max_tokens": 48, "tools": [WEATHER], "tool_choice": "required"}
    whole = await api.chat.completions.create(messages=messages, **fields)
    streamed = ""
    async for chunk in await api.chat.completions.create(messages=messages, stream=True, **fields):
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            streamed += (delta.function.name or "") if delta.function else ""
    return whole.choices[0].message.tool_calls[0].function.name, streamed


def test_a_system_message_is_folded_into_the_first_user_turn_where_the_template_refuses_it(caps_models):
    asked = [{"role": "system", "content": SYSTEM}, *ASK]

    async def body(api, prompts):
        reply = await api.chat.completions.create(messages=asked, **GREEDY)
        return reply, await prompts(asked), await _called(api, asked)

    reply, prompt, called = _serve(caps_models["refuses_system"], body)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert f"<start_of_turn>user\n{SYSTEM}\n{ASK[0]['content']}<end_of_turn>" in prompt
    # the tools' description (a system message) is folded too, and the call comes back whole and streamed
    assert called == ("get_weather", "get_weather")


def test_templates_that_read_functions_or_typed_content_serve_chats_tools_and_results(caps_models):
    turn = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": RESULT},
    ]

    async def body(api, prompts):
        replies = [await api.chat.completions.create(messages=ASK, **GREEDY), await _called(api, ASK)]
        return replies, await prompts(turn, tools=[WEATHER])

    for family in ("functions", "typed_no_tool_role"):
        (reply, called), prompt = _serve(caps_models[family], body)
        assert reply.choices[0].message.content is not None and called == ("get_weather", "get_weather")
        assert RESULT in prompt and ASK[0]["content"] in prompt, family


def test_the_engine_gives_a_calls_arguments_as_the_template_reads_them(caps_models):
    # the engine's own chat (a pane's, the bench's): a mapping for a template that adds the arguments
    # to its text is written as JSON text; JSON text for one that walks them is read as a mapping
    mapping = {**CALL, "function": {**CALL["function"], "arguments": {"city": "Paris"}}}
    chat = (*ASK, {"role": "assistant", "content": "", "tool_calls": [mapping]})

    async def main():
        config = EngineConfig(model_path=caps_models["string_arguments"], n_ctx=2048, n_batch=256, capacity=2, n_threads=2)
        async with Serving(config, more=[(config.with_(model_path=caps_models["functions"]), "functions")]) as (client, *_):
            as_text = await client.apply_template(Request(new_request_id(), GREEDY_PARAMS, messages=chat))
            text_given = (*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]})
            as_mapping = await client.apply_template(
                Request(new_request_id(), GREEDY_PARAMS, messages=text_given, model="functions")
            )
            return as_text, as_mapping

    as_text, as_mapping = run(main())
    assert '>>>get_weather\n{"city": "Paris"}' in as_text
    assert 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]' in as_mapping


def test_the_chat_template_file_given_on_the_command_line(model_path, tmp_path):
    path = tmp_path / "gemma2.jinja"
    path.write_text(caps_templates.REFUSES_SYSTEM)
    port = free_port()
    with running(serve_command(port, "--model", model_path, "--chat-template-file", str(path), "-c", "2048"), port) as url:
        asked = json.dumps({"messages": [{"role": "system", "content": SYSTEM}, *ASK]}).encode()
        with _urlopen(f"{url}/apply-template", asked) as response:
            prompt = json.load(response)["prompt"]
        with _urlopen(f"{url}/v1/models") as response:
            meta = json.load(response)["data"][0]["meta"]
    assert f"<start_of_turn>user\n{SYSTEM}\n" in prompt
    assert meta["chat_template_file"] == str(path) and meta["chat_template"] is True


def test_a_template_files_tool_syntax_is_the_one_tools_are_given_in(model_path, tmp_path):
    path = tmp_path / "hermes.jinja"
    path.write_text(tool_templates.HERMES)
    turn = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": CALL["id"], "content": RESULT},
    ]

    async def body(api, prompts):
        return await prompts(turn, tools=[WEATHER]), await _called(api, ASK)

    prompt, called = _serve(model_path, body, template_file=str(path))
    # the file's syntax (Hermes), not the model's (the generic format): its template lists the tools
    # and writes the call and its result its own way
    assert "<tools>\n" in prompt and '"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert f"<tool_response>\n{RESULT}\n</tool_response>" in prompt
    assert called == ("get_weather", "get_weather")


def test_a_template_file_that_cannot_serve_stops_the_command_with_its_reason(model_path, tmp_path):
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    for path, said in ((tmp_path / "missing.jinja", "does not exist"), (broken, "line 1: unexpected '}'")):
        command = [sys.executable, "-m", "app", "serve", "--model", model_path, "--chat-template-file", str(path)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2
        assert f"error: the chat template file {path}" in done.stderr and said in done.stderr


def test_a_last_assistant_message_is_continued_whole_and_streamed(model_path):
    start = "The capital of France is"
    prefilled = [*ASK, {"role": "assistant", "content": start}]

    async def body(api, prompts):
        whole = await api.chat.completions.create(messages=prefilled, **GREEDY)
        chunks = [c async for c in await api.chat.completions.create(messages=prefilled, stream=True, **GREEDY)]
        shown = {
            "prefill": await prompts(prefilled),
            "new turn": await prompts(prefilled, continue_final_message=False),
            "vllm": await prompts(prefilled, continue_final_message=True, add_generation_prompt=False),
            "no header": await prompts(ASK, add_generation_prompt=False),
            "asked": await prompts(ASK),
        }
        refusals = [
            await prompts.refused(prefilled, continue_final_message=True, add_generation_prompt=True),
            await prompts.refused(ASK, continue_final_message=True),
        ]
        return whole, chunks, shown, refusals

    whole, chunks, shown, refusals = _serve(model_path, body)
    content = whole.choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content and streamed == content  # the continuation only, as llama-server sends it
    assert not content.startswith(start)
    assert shown["prefill"] == shown["vllm"] == shown["asked"] + start
    assert shown["new turn"].startswith(shown["prefill"]) and shown["new turn"].endswith(shown["asked"][-22:])
    assert shown["asked"].startswith(shown["no header"]) and len(shown["no header"]) < len(shown["asked"])
    assert "cannot both be true" in refusals[0]["message"]
    assert "needs a last assistant message" in refusals[1]["message"]


def test_a_thinking_reply_is_continued_inside_or_after_its_thoughts(thinking_models):
    # the R1 template opens <think> in its generation prompt
    thought = [*ASK, {"role": "assistant", "content": "", "reasoning_content": "Paris is"}]
    answered = [*ASK, {"role": "assistant", "content": "It is"}]
    budget = {**GREEDY, "max_tokens": 24, "extra_body": {"reasoning_budget_tokens": 4}}

    async def body(api, prompts):
        inside = await api.chat.completions.create(messages=thought, **budget)
        chunks = [c async for c in await api.chat.completions.create(messages=thought, stream=True, **budget)]
        after = await api.chat.completions.create(messages=answered, **budget)
        return inside, chunks, after, await prompts(thought), await prompts(answered)

    inside, chunks, after, inside_prompt, after_prompt = _serve(thinking_models["r1"], body)
    assert inside_prompt.endswith("<think>\nParis is") and after_prompt.endswith("</think>\n\nIt is")
    message = inside.choices[0].message
    # the thoughts went on from the prefill (4 tokens, the budget), then the marker and the answer
    assert message.reasoning_content and not message.reasoning_content.startswith("Paris is")
    assert message.content and "</think>" not in message.content + message.reasoning_content
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == message.reasoning_content
    assert "".join(d.content or "" for d in deltas) == message.content
    # after the thoughts: the answer goes on, nothing thought
    assert after.choices[0].message.content and not getattr(after.choices[0].message, "reasoning_content", None)
    assert after.usage.completion_tokens_details.reasoning_tokens == 0


def _urlopen(url: str, data: bytes | None = None):
    import urllib.request

    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=60)


def test_props_shows_the_template_what_it_renders_and_what_is_polyfilled_for_it(caps_models):
    """`GET /props`, as llama-server's: the template, `chat_template_caps` found by rendering (here a
    template that refuses a system message), the polyfill that follows from it in words, the slots."""

    async def body(api, prompts):
        async with prompts.http.get(f"{prompts.url}/props") as response:
            assert response.status == 200
            return await response.json()

    props = _serve(caps_models["refuses_system"], body)
    assert props["chat_template"] == caps_templates.FAMILIES["refuses_system"]
    caps = props["chat_template_caps"]
    assert caps["supports_system_role"] is False and caps["supports_tools"] is False  # it shows no tools either
    assert caps["requires_typed_content"] is False and caps["requires_functions"] is False
    polyfills = props["chat_template_polyfills"]
    assert polyfills[:2] == ["system messages folded into the first user turn", "tools described in the system message"]
    assert props["total_slots"] == 4 and props["modalities"] == {"vision": False, "audio": False}
    assert props["default_generation_settings"]["n_ctx"] > 0
