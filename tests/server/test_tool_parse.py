"""Reading tool calls out of a reply (tool_parse.py), for each family's syntax, and telling the family
from a template (tool_syntax.py): pure functions over text. Any text reads as content and calls
without raising; calls written in a family's syntax come back whole and never leak into content; a
stream of any text, cut anywhere, sends exactly what the whole reply reads as."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import string

import pytest
import tool_templates
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from app.engine.sampling.constraints import follows
from app.engine.thinking import HARMONY as HARMONY_THOUGHTS
from app.engine.thoughts import Thoughts
from app.server.tool_parse import ToolStream, scan
from app.server.tool_syntax import (
    APERTUS,
    COMMAND_R7B,
    DEEPSEEK_R1,
    DEEPSEEK_V3_1,
    DEEPSEEK_V3_2,
    DEEPSEEK_V4,
    FUNCTIONARY_V3_2,
    GENERIC,
    GLM_4_5,
    GLM_4_7,
    GPT_OSS,
    GRANITE,
    HERMES,
    KIMI_K2,
    LFM2,
    LLAMA_3,
    MINIMAX_M2,
    MINISTRAL_3,
    MISTRAL_NEMO,
    MISTRAL_SMALL_3_2,
    NEMOTRON_NANO_V2,
    QWEN3_CODER,
    SEED_OSS,
    Syntax,
    Wrapper,
    call_grammar,
    detect,
)
from app.server.tool_syntaxes.json_text import ValueReads, read_value, value_end

pytestmark = pytest.mark.unit

NATIVE = [HERMES, LLAMA_3, MISTRAL_NEMO, GRANITE, COMMAND_R7B, FUNCTIONARY_V3_2, GPT_OSS, APERTUS, NEMOTRON_NANO_V2]
XML = [QWEN3_CODER, SEED_OSS, GLM_4_5, GLM_4_7, MINIMAX_M2, DEEPSEEK_V3_2, DEEPSEEK_V4]
NATIVE += XML
NAMED = [DEEPSEEK_V3_1, DEEPSEEK_R1, KIMI_K2, MINISTRAL_3, MISTRAL_SMALL_3_2]
NATIVE += NAMED
NATIVE += [LFM2]
ONE_BY_ONE = [*XML, LFM2]  # arguments written one by one, not as a JSON object
SYNTAXES = [*NATIVE, GENERIC, HERMES.with_parallel(False), COMMAND_R7B.with_parallel(False)]
# text rich in what the syntaxes are made of, so that generated replies hit their corners
PIECES = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", '{"name": "f", ', '"arguments": ', '"parameters": ']
PIECES += ["<|tool_call|>", "<|START_ACTION|>", "<|END_ACTION|>", '{"tool_call_id": "0", ', '"tool_name": "f", ']
PIECES += [">>>", "all\n", "f\n"]
PIECES += ["<|channel|>", "commentary", " to=functions.", "to=functions.f", "<|constrain|>json", "<|message|>", "<|call|>"]
PIECES += ["<|start|>assistant", "<|end|>"]
PIECES += [
    "<function=f>",
    "</function>",
    "<parameter=a>",
    "</parameter>",
    "\n</parameter>\n",
    "<seed:tool_call>",
    "</seed:tool_call>",
]
PIECES += ["<arg_key>a</arg_key>", "<arg_value>", "</arg_value>", "<minimax:tool_call>", "</minimax:tool_call>"]
PIECES += ['<invoke name="f">', "</invoke>", '<parameter name="a">']
PIECES += ["<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜tool_calls>", '<｜DSML｜invoke name="f">']
PIECES += ['<｜DSML｜parameter name="a" string="true">', '" string="false">', "</｜DSML｜parameter>", "</｜DSML｜invoke>"]
PIECES += ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"]
PIECES += ["function<｜tool▁sep｜>", "\n```json\n", "\n```", "<|tool_calls_section_begin|>", "<|tool_call_begin|>functions.f:0"]
PIECES += ["<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>", "[ARGS]", "[CALL_ID]", "abc123XYZ"]
PIECES += ["<|tools_prefix|>", "<|tools_suffix|>", '{"f": ', "<TOOLCALL>", "</TOOLCALL>"]
PIECES += ["<|tool_call_start|>[", "]<|tool_call_end|>", "f(", "a=", ")", "'x'", "True", "-", ".", "e"]
# a syntax that writes arguments as text streams a string one as it comes: `a` is one
SYNTAXES += [
    s.with_functions(({"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}},)) for s in XML
]
PIECES += [
    '{"tool_calls": [',
    '{"response": "',
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ",",
    ":",
    " ",
    "\n",
    "a",
    "é",
    "<",
    "\\u00e9",
    "\\ud83d",
]
replies = st.one_of(st.text(max_size=60), st.lists(st.sampled_from(PIECES), max_size=24).map("".join))


def stream(text: str, syntax: Syntax, cuts: list[int]) -> tuple[str, list[dict]]:
    """What a stream of `text`, fed in pieces ending at `cuts`, sends: its content and its calls."""
    ids = iter(range(1000))
    tool_stream = ToolStream(syntax, lambda: f"call_{next(ids)}")
    deltas = []
    for cut in sorted(set(cuts)):
        deltas += tool_stream.feed(text[:cut])
    deltas += tool_stream.feed(text, final=True)
    content, calls = "", []
    for delta in deltas:
        content += delta.get("content", "")
        for call in delta.get("tool_calls", []):
            if "id" in call:  # a call's head comes first, with its arguments empty
                assert call["index"] == len(calls) and call["type"] == "function" and call["function"]["arguments"] == ""
                calls.append({"name": call["function"]["name"], "arguments": ""})
            else:
                calls[call["index"]]["arguments"] += call["function"]["arguments"]
    return content, calls


@settings(max_examples=400, deadline=None)
@given(replies, st.sampled_from(SYNTAXES), st.lists(st.integers(0, 80), max_size=12))
@example('<tool_call>\n{"name": "f", "arguments": {"a": "\\u00e9"}}\n</tool_call>', HERMES, list(range(60)))
@example('{"response": "a\\ud83d\\ude00b"}', GENERIC, list(range(30)))
@example('{"name":"" ,"arguments":{""[}', HERMES, [])  # arguments that turn malformed once streamed
@example('<tool_call>{"name": "f", "arguments": {}, "arguments": {"a": 1}}</tool_call>', HERMES, list(range(80)))
@example('<tool_call>{"name": "f", "name": "g", "arguments": {}}</tool_call>', HERMES, list(range(70)))
def test_any_reply_streams_exactly_what_it_reads_as_whole_and_never_raises(text, syntax, cuts):
    whole = scan(text, syntax)
    content, calls = stream(text, syntax, cuts)
    assert content == whole.content
    assert calls == [{"name": c.name, "arguments": c.arguments} for c in whole.calls]
    assert syntax.parallel or len(calls) <= 1


def rescanned(text: str, syntax: Syntax, cuts: list[int]) -> list[dict]:
    """The deltas of a stream that scans the whole text so far at every feed (as ToolStream once did)."""
    ids, deltas, content_sent, arguments_sent = iter(range(1000)), [], 0, []
    for cut, final in [*((c, False) for c in sorted(set(cuts))), (len(text), True)]:
        found = scan(text[:cut], syntax, final)
        if len(found.content) > content_sent:
            deltas.append({"content": found.content[content_sent:]})
            content_sent = len(found.content)
        for index, call in enumerate(found.calls):
            if index == len(arguments_sent):
                arguments_sent.append(0)
                head = {"id": f"call_{next(ids)}", "type": "function", "function": {"name": call.name, "arguments": ""}}
                deltas.append({"tool_calls": [{"index": index, **head}]})
            if fragment := call.arguments[arguments_sent[index] :]:
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                arguments_sent[index] = len(call.arguments)
    return deltas


@settings(max_examples=400, deadline=None)
@given(replies, st.sampled_from(SYNTAXES), st.lists(st.integers(0, 80), max_size=24))
@example('{"response": "C:\\Users\\me"}', GENERIC, list(range(30)))
@example('<tool_call>{"name": "f", "arguments": {"a": "x\\\n"}}', HERMES, list(range(50)))
def test_a_stream_reading_on_sends_what_rescanning_sends(text, syntax, cuts):
    """ToolStream reads only what each feed adds; its deltas are those of a scan of the whole text at every feed."""
    ids = iter(range(1000))
    tool_stream = ToolStream(syntax, lambda: f"call_{next(ids)}")
    deltas = [d for cut in sorted(set(cuts)) for d in tool_stream.feed(text[:cut])]
    deltas += tool_stream.feed(text, final=True)
    assert deltas == rescanned(text, syntax, cuts)


VALUE_PIECES = ["{", "}", "[", "]", '"', "\\", ",", ":", " ", "\n", "\u00a0", "a", "1", '"x"', "\\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(VALUE_PIECES), max_size=30).map("".join), st.lists(st.integers(0, 40), max_size=8))
@example('"a\\\n" ]', [2, 3, 4])  # a backslash before a line break: that quote opens no string
@example('"a\\"b"', [3])  # cut after a backslash: the quote that follows is escaped
def test_a_value_read_on_reads_as_one_read_at_once(text, cuts):
    reads = ValueReads()
    for cut in [*sorted(set(cuts)), len(text)]:
        assert reads.read(text[:cut], 0) == read_value(text[:cut], 0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
calls = st.lists(
    st.tuples(
        st.text(string.ascii_letters + "_-", min_size=1, max_size=12),
        st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
)
prose = st.text(string.ascii_letters + string.digits + " .,!?'\n", max_size=30)


def written(syntax: Syntax, before: str, made: list[tuple[str, dict]]) -> str:
    """Calls as a model of `syntax`'s family writes them, after some text."""
    objects = [_call_object(syntax, index, name, arguments) for index, (name, arguments) in enumerate(made)]
    if syntax is HERMES:
        return before + "".join(f"\n<tool_call>\n{o}\n</tool_call>" for o in objects)
    if syntax.wrapper is Wrapper.ARRAY:
        return f"{before}{syntax.trigger}[{', '.join(objects)}]{syntax.closer}"
    if syntax is FUNCTIONARY_V3_2:  # the prompt wrote the first `>>>`
        text = f"all\n{before}>>>" if before.strip() else ""
        return text + ">>>".join(f"{name}\n{json.dumps(arguments)}" for name, arguments in made)
    if syntax is LLAMA_3:
        return f"<|python_tag|>{objects[0]}"
    if syntax.form is not None:
        return before + syntax.form.write(made)
    return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in made]})


def _call_object(syntax: Syntax, index: int, name: str, arguments: dict) -> str:
    if not syntax.name_key:  # the name is the one key
        return json.dumps({name: arguments})
    numbered = {syntax.id_key: str(index)} if syntax.id_key else {}
    return json.dumps(numbered | {syntax.name_key: name, syntax.arguments_key: arguments})


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([*(s for s in NATIVE if s not in ONE_BY_ONE), GENERIC]), prose, calls)
def test_calls_in_a_familys_syntax_come_back_whole_and_never_leak_into_content(syntax, before, made):
    made = made[:1] if syntax is LLAMA_3 else made
    assume(syntax is not FUNCTIONARY_V3_2 or all(name != "all" for name, _ in made))  # `all` is its recipient for text
    found = scan(written(syntax, before, made), syntax)
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == made
    assert found.content == ("" if syntax in (LLAMA_3, GENERIC) else before.strip())


def test_each_familys_reply_reads_as_content_and_calls():
    hermes = scan('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', HERMES)
    assert hermes.content == "Let me look." and hermes.calls[0].name == "get_weather"
    assert json.loads(hermes.calls[0].arguments) == {"city": "Paris"}
    # a trigger written as a control token is no text: the call alone opens the reply
    assert scan('[{"name": "f", "arguments": {}}]', MISTRAL_NEMO).calls[0].name == "f"
    assert scan('  {"name": "f", "parameters": {"x": 1}}', LLAMA_3).calls[0].arguments == '{"x": 1}'
    # what only looks like a call's start is content
    assert scan("<tool_call>not json", HERMES).content == "<tool_call>not json"
    assert scan('{"answer": 42}', LLAMA_3).content == '{"answer": 42}'
    # a call without arguments takes none
    assert scan('<tool_call>{"name": "now"}</tool_call>', HERMES).calls[0].arguments == "{}"
    # one call when parallel calls are off
    two = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    assert [c.name for c in scan(two, HERMES).calls] == ["a", "b"]
    assert [c.name for c in scan(two, HERMES.with_parallel(False)).calls] == ["a"]


def test_a_stream_holds_back_what_may_still_open_a_call():
    assert scan("Sure <tool_c", HERMES, final=False).content == "Sure"
    assert scan("Sure <tool_c", HERMES, final=True).content == "Sure <tool_c"
    assert scan("<|python_t", LLAMA_3, final=False).content == ""
    assert scan('{"respo', GENERIC, final=False).content == ""
    # a call cut short (max_tokens) keeps the arguments written; an unnamed one is dropped
    cut = scan('<tool_call>{"name": "f", "arguments": {"city": "Pa', HERMES)
    assert cut.calls[0].arguments == '{"city": "Pa' and cut.content == ""
    assert scan('Hi <tool_call>{"na', HERMES).content == "Hi" and not scan('Hi <tool_call>{"na', HERMES).calls


def test_a_json_value_ends_where_its_brackets_close():
    assert value_end('{"a": [1, "]"]} tail', 0) == 15
    assert value_end('"a\\"b" x', 0) == 6
    assert value_end('{"a": 1', 0) is None and value_end("12", 0) is None and value_end("12,", 0) == 2
    assert value_end('{"a": 1]', 0) == -1


def test_the_family_is_told_from_the_template_source():
    assert detect(tool_templates.HERMES) is HERMES
    assert detect(tool_templates.LLAMA_3) is LLAMA_3
    assert detect(tool_templates.MISTRAL_NEMO) is MISTRAL_NEMO
    assert detect(tool_templates.GRANITE) is GRANITE
    assert detect(tool_templates.COMMAND_R7B) is COMMAND_R7B
    assert detect(tool_templates.FUNCTIONARY_V3_2) is FUNCTIONARY_V3_2
    assert detect(tool_templates.GPT_OSS) is GPT_OSS
    assert detect(tool_templates.QWEN3_CODER) is QWEN3_CODER and detect(tool_templates.SEED_OSS) is SEED_OSS
    assert detect(tool_templates.GLM_4_5) is GLM_4_5 and detect(tool_templates.GLM_4_7) is GLM_4_7
    assert detect(tool_templates.MINIMAX_M2) is MINIMAX_M2
    assert detect(tool_templates.DEEPSEEK_V3_1) is DEEPSEEK_V3_1 and detect(tool_templates.DEEPSEEK_R1) is DEEPSEEK_R1
    assert detect(tool_templates.KIMI_K2) is KIMI_K2 and detect(tool_templates.MINISTRAL_3) is MINISTRAL_3
    assert detect(tool_templates.MISTRAL_SMALL_3_2) is MISTRAL_SMALL_3_2
    assert detect(tool_templates.APERTUS) is APERTUS and detect(tool_templates.NEMOTRON_NANO_V2) is NEMOTRON_NANO_V2
    assert detect(tool_templates.LFM2) == dataclasses.replace(LFM2, calls_in_content=True)  # it shows no tool_calls
    assert detect(tool_templates.LFM2 + "{# tool_calls #}") is LFM2
    assert detect(None) is GENERIC and detect("{% for m in messages %}{{ m.content }}{% endfor %}") is GENERIC
    # Qwen3-Coder's XML calls are not Hermes' JSON ones, nor GLM's
    assert detect("{% if tools %}<tool_call>\n<function=x>\n<parameter=y>{% endif %}") is QWEN3_CODER
    assert detect("{% if tools %}<tool_call>{{ name }}\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>{% endif %}") is GLM_4_5
    assert detect("{% if tools %}<tool_call>{{ name }}<arg_key>k</arg_key><arg_value>v</arg_value>{% endif %}") is GLM_4_7
    assert detect("{% if tools %}<seed:tool_call>\n<function=x>\n<parameter=y>{% endif %}") is SEED_OSS
    assert detect('{% if tools %}<minimax:tool_call>\n<invoke name="x">{% endif %}') is MINIMAX_M2
    dsml = "{%- set dsml_token = '｜DSML｜' -%}{% if tools %}{{ '<' + dsml_token + 'function_calls>' }}{% endif %}"
    assert detect(dsml) is DEEPSEEK_V3_2 and detect(dsml.replace("function_calls", "tool_calls")) is DEEPSEEK_V4
    assert detect("{% if tools %}<|start|>assistant<|channel|>final<|message|>{% endif %}") is GPT_OSS


def test_each_new_familys_distinctive_text_tells_it_apart():
    """The strings the real templates carry: a family's own markers pick it, and never another's."""
    granite = "{% if tools %}respond only with <|tool_call|> followed by a JSON list{% endif %}<|start_of_role|>"
    command_r7b = "{% if tools %}write <|START_ACTION|> followed by a list of JSON-formatted tool calls<|END_ACTION|>{% endif %}"
    functionary = "{% if not tools %}{% endif %}Respond in this format:\n>>>${recipient}\n${content}{{ '>>>all\\n' }}"
    assert detect(granite) is GRANITE and detect(command_r7b) is COMMAND_R7B and detect(functionary) is FUNCTIONARY_V3_2
    # the newer Cohere template writes <|START_TEXT|> answers, another format
    assert detect("{% if tools %}<|START_ACTION|>{% endif %}") is GENERIC
    # a template of an earlier family that mentions a later one's marker stays that family
    assert detect(tool_templates.HERMES + "<|tool_call|><|start_of_role|>") is HERMES
    assert detect(tool_templates.MISTRAL_NEMO + "<|START_ACTION|><|END_ACTION|>") is MISTRAL_NEMO


def test_array_families_read_their_closer_and_numbered_calls():
    action = 'Plan.<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {"x": 1}}]<|END_ACTION|> done'
    found = scan(action, COMMAND_R7B)
    assert found.content == "Plan.done" and found.calls[0].name == "f" and found.calls[0].arguments == '{"x": 1}'
    assert scan('[{"tool_call_id": "0", "tool_name": "f", "parameters": {}}]', COMMAND_R7B).calls[0].name == "f"
    assert scan("Hi <|START_AC", COMMAND_R7B, final=False).content == "Hi"
    granite = scan('<|tool_call|>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"y": 2}}]', GRANITE)
    assert [c.name for c in granite.calls] == ["a", "b"] and granite.content == ""


def test_functionary_reads_recipients_text_and_calls():
    found = scan('all\nLet me see.>>>get_weather\n{"city": "Paris"}>>>get_time\n{}', FUNCTIONARY_V3_2)
    assert found.content == "Let me see." and [(c.name, c.arguments) for c in found.calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", "{}"),
    ]
    # a reply that names no recipient is text; one still naming it waits
    assert scan("Hello there", FUNCTIONARY_V3_2).content == "Hello there"
    assert scan("get_wea", FUNCTIONARY_V3_2, final=False).content == ""
    assert scan("get_wea", FUNCTIONARY_V3_2).content == "get_wea"
    assert FUNCTIONARY_V3_2.triggers_for(("f", "g.h")) == (r"^(?:f|g\.h)\n", r">>>(?:f|g\.h)\n")


@pytest.mark.parametrize("syntax", [HERMES, COMMAND_R7B, GENERIC], ids=lambda s: s.family)
def test_several_calls_only_when_asked_and_a_named_function_once(syntax):
    """parallel_tool_calls is off unless asked (as llama-server's); a named function is called once
    even where it is on (OpenAI's rule): the grammar then holds one call and ends after it."""
    from app.server.tool_calls import parse_tools

    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]
    named = {"type": "function", "function": {"name": "a"}}
    assert not parse_tools({"tools": tools, "tool_choice": "required"}, syntax).syntax.parallel
    assert parse_tools({"tools": tools, "tool_choice": "required", "parallel_tool_calls": True}, syntax).syntax.parallel
    assert not parse_tools({"tools": tools, "tool_choice": named, "parallel_tool_calls": True}, syntax).syntax.parallel


# -- gpt-oss: the split of a reply (thoughts.py) and the tool parser together


def _harmony_stream(text: str, cuts: list[int]) -> tuple[str, str, list[dict], str, list]:
    """A gpt-oss reply fed in pieces through the thinking split, its answer through a ToolStream:
    the thoughts, the streamed content and calls, and the whole answer's content and calls."""
    thoughts, ids = Thoughts(HARMONY_THOUGHTS), iter(range(1000))
    tool_stream, answer, deltas = ToolStream(GPT_OSS, lambda: f"call_{next(ids)}"), "", []
    for start, end in itertools.pairwise([0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]):
        answer += thoughts.feed(text[start:end])[1]
        deltas += tool_stream.feed(answer)
    answer += thoughts.finish()[1]
    deltas += tool_stream.feed(answer, final=True)
    content = "".join(d.get("content", "") for d in deltas)
    calls = [c["function"] for d in deltas for c in d.get("tool_calls", []) if "id" in c]
    for d in deltas:
        for c in d.get("tool_calls", []):
            if "id" not in c:
                calls[c["index"]] = {
                    **calls[c["index"]],
                    "arguments": calls[c["index"]]["arguments"] + c["function"]["arguments"],
                }
    whole = scan(answer, GPT_OSS)
    return thoughts.reasoning, content, calls, whole.content, [{"name": c.name, "arguments": c.arguments} for c in whole.calls]


HARMONY_CALL = (
    "<|channel|>analysis<|message|>The user wants the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Let me look.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(HARMONY_CALL)), max_size=30))
@example(list(range(len(HARMONY_CALL))))
def test_a_gpt_oss_call_streams_apart_from_its_analysis_and_preamble(cuts):
    """analysis → thoughts, a commentary preamble → content, a message to a function → a call;
    streamed in any pieces, what the whole answer reads as."""
    reasoning, content, calls, whole_content, whole_calls = _harmony_stream(HARMONY_CALL, cuts)
    assert reasoning == "The user wants the weather." and content == whole_content == "Let me look."
    assert calls == whole_calls == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]


def test_gpt_oss_calls_read_in_either_header_and_a_final_answer_is_content():
    # the recipient in the role's header, as its template writes a call back
    in_role = (
        "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{}"
    )
    reasoning, content, calls, _, _ = _harmony_stream(in_role, [5, 40, 70])
    assert reasoning == "Hm." and content == "" and calls == [{"name": "get_time", "arguments": "{}"}]
    final = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>It is 4."
    assert _harmony_stream(final, [3, 30])[:3] == ("Easy.", "It is 4.", [])
    # as the model wrote it (reasoning_format none): the messages' headers are content, the call is not
    raw = scan(
        '<|channel|>final<|message|>Hi<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"a": 1}',
        GPT_OSS,
    )
    assert raw.content == "<|channel|>final<|message|>Hi<|end|>" and [(c.name, c.arguments) for c in raw.calls] == [
        ("f", '{"a": 1}')
    ]
    # a recipient that is no function, or a header that never closes, is no call
    assert not scan("<|channel|>commentary to=browser.search<|message|>{}", GPT_OSS).calls
    assert scan("to=functions.f " + "x" * 300, GPT_OSS).content.startswith("to=functions.f")


FUNCTIONS = (
    {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "London"]}, "days": {"enum": [1, 2, 3]}},
            "required": ["city", "days"],
        },
    },
    {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
)


def _trigger_start(match: re.Match) -> int:
    """Where a lazy grammar starts (the engine's rule): the trigger's first group that matched, else the match."""
    return next((match.start(i) for i in range(1, len(match.groups()) + 1) if match.group(i)), match.start())


@pytest.mark.parametrize("syntax", NATIVE, ids=lambda s: s.family)
def test_under_auto_the_familys_trigger_sets_off_a_grammar_its_calls_follow(syntax):
    """tool_choice auto: the reply is free until a trigger matches; the grammar holds it from there,
    and a call written in the family's syntax follows it. Prose sets nothing off."""
    names = tuple(f["name"] for f in FUNCTIONS)
    grammar, triggers = call_grammar(syntax, FUNCTIONS, "auto"), syntax.triggers_for(names)
    text = written(syntax, "Let me look.", [("get_weather", {"city": "Paris", "days": 1})])
    text = text.removesuffix("<|call|>")  # gpt-oss ends its turn with it: an end-of-generation token
    starts = [_trigger_start(m) for m in (re.search(p, text) for p in triggers) if m]
    assert starts and follows(grammar, text[min(starts) :]), (text, triggers)
    assert not any(re.search(p, "Let me look at the weather in Paris, then get the time.") for p in triggers)


# arguments as tags or a Python call's: names and string values as a template writes them (no tag, no
# line break at an end)
_TEXT = string.ascii_letters + string.digits + " .,!?'{}[]:\"\\"
xml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(_TEXT, max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
xml_calls = st.lists(
    st.tuples(
        st.text(string.ascii_letters + "_-", min_size=1, max_size=12),
        st.dictionaries(st.text(string.ascii_letters + "_", min_size=1, max_size=6), xml_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda call: call[0],
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ONE_BY_ONE), prose, xml_calls, st.lists(st.integers(0, 400), max_size=12))
def test_arguments_written_one_by_one_come_back_as_json_whole_and_streamed(syntax, before, made, cuts):
    """Arguments as tags or a Python call's: a string one (by its function's parameters) comes
    back as the string written, any other as the JSON written; the same whole and streamed."""
    functions = tuple(
        {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string"} if isinstance(v, str) else {} for k, v in args.items()},
            },
        }
        for name, args in made
    )
    syntax = syntax.with_functions(functions)
    text = written(syntax, before, made)
    found = scan(text, syntax)
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == made and found.content == before.strip()
    assert stream(text, syntax, cuts) == (found.content, [{"name": c.name, "arguments": c.arguments} for c in found.calls])


def test_a_string_argument_streams_as_it_is_written():
    syntax = QWEN3_CODER.with_functions(({"name": "note", "parameters": {"properties": {"text": {"type": "string"}}}},))
    text = "<tool_call>\n<function=note>\n<parameter=text>\nBuy milk\nand eggs\n</parameter>\n</function>\n</tool_call>"
    ids, tool_stream, fragments = iter(range(9)), None, []
    tool_stream = ToolStream(syntax, lambda: f"call_{next(ids)}")
    for cut in range(1, len(text) + 1):
        for delta in tool_stream.feed(text[:cut], final=cut == len(text)):
            fragments += [c["function"]["arguments"] for c in delta.get("tool_calls", []) if "id" not in c]
    assert "".join(fragments) == '{"text": "Buy milk\\nand eggs"}'
    assert '{"text": "Buy' in fragments[0] + fragments[1] + fragments[2] + fragments[3] + fragments[4] and len(fragments) > 10
    # a typed argument (here none said) waits to be whole; text is a string, JSON is JSON
    found = scan(
        "<tool_call><function=f><parameter=a>12</parameter><parameter=b>twelve</parameter></function></tool_call>", QWEN3_CODER
    )
    assert json.loads(found.calls[0].arguments) == {"a": 12, "b": "twelve"}


def test_tags_that_only_look_like_a_call_are_content():
    assert scan("<tool_call>hello</tool_call>", QWEN3_CODER).content == "<tool_call>hello</tool_call>"
    assert scan("Use <tool_call> tags.", GLM_4_5).content == "Use <tool_call> tags."
    # a call without arguments, GLM's way; a block of several, MiniMax's
    assert [(c.name, c.arguments) for c in scan("<tool_call>get_time</tool_call>", GLM_4_7).calls] == [("get_time", "{}")]
    two = '<minimax:tool_call>\n<invoke name="a">\n</invoke>\n<invoke name="b">\n<parameter name="x">1</parameter>\n</invoke>\n</minimax:tool_call>'
    assert [(c.name, c.arguments) for c in scan(two, MINIMAX_M2).calls] == [("a", "{}"), ("b", '{"x": 1}')]
    # malformed after the name: the call stands as far as it went, the rest is content
    broken = scan("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\noops", QWEN3_CODER)
    assert broken.calls[0].name == "f" and broken.calls[0].arguments == '{"a": 1' and broken.content == "oops"


def test_dsml_arguments_say_whether_their_value_is_a_string():
    """DeepSeek V3.2's and V4's tags: `string="true"` a value written raw, `string="false"` JSON, whatever
    the function's parameters say (here none), whole and streamed."""
    text = (
        'Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="true">12</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="b" string="false">12</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="c" string="false">[1, "x"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>'
    )
    found = scan(text, DEEPSEEK_V3_2)
    assert found.content == "Checking." and json.loads(found.calls[0].arguments) == {"a": "12", "b": 12, "c": [1, "x"]}
    assert stream(text, DEEPSEEK_V3_2, list(range(0, len(text), 7)))[1] == [{"name": "f", "arguments": found.calls[0].arguments}]
    v4 = text.replace("function_calls>", "tool_calls>")
    assert scan(v4, DEEPSEEK_V4).calls[0].arguments == found.calls[0].arguments
    assert scan(v4, DEEPSEEK_V3_2).calls == []  # V3.2's block is another
    # the writer and the grammar say it the same way
    made = [("f", {"a": "x y", "n": 3})]
    written = DEEPSEEK_V3_2.form.write(made)
    assert 'name="a" string="true">x y<' in written and 'name="n" string="false">3<' in written
    function = {
        "name": "f",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["a", "n"],
        },
    }
    assert follows(call_grammar(DEEPSEEK_V3_2, (function,), "required"), written)
