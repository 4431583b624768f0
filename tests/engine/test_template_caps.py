"""What a chat template can render, found by rendering it in its own process (as llama.cpp's minja
does), and the conversation made fit for it (llama.cpp's polyfills): a system message folded into
the first user turn, arguments in the form the template reads, `functions`, typed content, a tool's
result as user text; the Jinja of real templates ({% break %}, {% generation %}, append,
from_json); a template file read and checked, each fault said with the file's name."""

from __future__ import annotations

import json

import caps_templates
import pytest
import think_templates
import tool_templates

from app.engine.errors import ModelLoadError
from app.engine.prompt.caps import ALL, TOOLS_PREAMBLE, TemplateCaps, polyfill
from app.engine.prompt.chat_template import ChatTemplate
from app.engine.prompt.template_file import read_template_file

pytestmark = pytest.mark.unit

SYSTEM = {"role": "system", "content": "Answer in French."}
USER = {"role": "user", "content": "What is the weather?"}
CALL = {"id": "call0A1b2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALLING = {"role": "assistant", "content": "", "tool_calls": [CALL]}
RESULT = {"role": "tool", "tool_call_id": "call0A1b2", "content": "sunny, 21 degrees"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def templates():
    sources = {**caps_templates.FAMILIES, **{f"tool_{k}": v for k, v in tool_templates.FAMILIES.items()}}
    made = {name: ChatTemplate(source, "<s>", "</s>", model=name) for name, source in sources.items()}
    yield made
    for template in made.values():
        template.close()


def test_the_capabilities_found_for_each_short_template(templates):
    assert templates["refuses_system"].caps() == TemplateCaps(
        supports_system_role=False,
        supports_tools=False,
        supports_tool_calls=False,
        supports_tool_responses=False,
        supports_parallel_tool_calls=False,
    )
    assert templates["string_arguments"].caps() == TemplateCaps(supports_tools=False, requires_string_arguments=True)
    functions = templates["functions"].caps()
    assert functions.requires_functions and functions.requires_object_arguments
    assert functions.supports_tools  # through `functions`
    typed = templates["typed_no_tool_role"].caps()
    assert typed.requires_typed_content and not typed.supports_tool_responses and not typed.supports_tool_calls
    # the families the tool syntaxes know render every part of a chat, the arguments as a mapping
    # (they write them with tojson), Llama 3 one call a turn
    assert templates["tool_hermes"].caps() == TemplateCaps(requires_object_arguments=True)
    assert templates["tool_llama3"].caps() == TemplateCaps(supports_parallel_tool_calls=False, requires_object_arguments=True)


def test_a_system_message_is_folded_into_the_first_user_turn_where_the_template_refuses_it(templates):
    text = templates["refuses_system"].render([SYSTEM, USER, {"role": "assistant", "content": "Il fait beau."}, USER])
    assert text.startswith("<s><start_of_turn>user\nAnswer in French.\nWhat is the weather?<end_of_turn>")
    assert text.count("Answer in French.") == 1 and text.endswith("<start_of_turn>model\n")


def test_arguments_go_as_the_template_reads_them(templates):
    text = templates["string_arguments"].render([USER, CALLING, RESULT], tools=TOOLS)
    assert '>>>get_weather\n{"city": "Paris"}' in text  # a mapping given: written as JSON text for it
    as_text = {**CALL, "function": {**CALL["function"], "arguments": '{"city": "Paris"}'}}
    text = templates["tool_hermes"].render([USER, {**CALLING, "tool_calls": [as_text]}], tools=TOOLS)
    assert '"arguments": "{' not in text  # JSON text given: read as the mapping Hermes writes with tojson
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text.replace("\n", "")


def test_tools_go_as_functions_where_the_template_reads_that(templates):
    text = templates["functions"].render([USER, CALLING, RESULT], tools=TOOLS)
    assert json.dumps(TOOLS, indent=2) in text
    assert 'functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]' in text
    assert "Today is " in text and "{{" not in text  # llama.cpp's date, which the template prints
    assert "Available functions as JSON spec:\n\n" in templates["functions"].render([USER])  # no tools: empty


def test_a_tool_result_and_calls_become_text_where_the_template_has_no_tool_role(templates):
    text = templates["typed_no_tool_role"].render([SYSTEM, USER, CALLING, RESULT])
    assert "Answer in French." in text and "What is the weather?" in text  # strings given as typed parts
    assert '"tool_response"' in text and "sunny, 21 degrees" in text
    assert '"tool_calls"' in text and '"get_weather"' in text


def test_the_polyfills_leave_a_chat_alone_for_a_template_that_renders_it_all():
    messages = [SYSTEM, USER, CALLING, RESULT]
    assert polyfill(ALL, messages, TOOLS) == (messages, {})


def test_tools_are_described_in_the_system_message_where_the_template_ignores_them():
    caps = TemplateCaps(supports_tools=False, supports_system_role=False)
    shown, extra = polyfill(caps, [SYSTEM, USER], TOOLS)
    assert extra == {} and [m["role"] for m in shown] == ["user"]
    assert shown[0]["content"].startswith("Answer in French.\n\n" + TOOLS_PREAMBLE)
    assert shown[0]["content"].endswith("What is the weather?")


def test_system_text_before_an_assistant_turn_becomes_a_user_turn():
    caps = TemplateCaps(supports_system_role=False)
    shown, _ = polyfill(caps, [SYSTEM, {"role": "assistant", "content": "Bonjour."}], None)
    assert shown == [{"role": "user", "content": "Answer in French."}, {"role": "assistant", "content": "Bonjour."}]


def test_the_jinja_real_templates_use():
    source = """{%- set ns = namespace(seen=[]) -%}
{%- for m in messages -%}
{%- if m.role == 'stop' %}{% break %}{% endif -%}
{%- set _ = ns.seen.append(m.role) -%}
{%- generation %}[{{ m.content }}]{% endgeneration -%}
{%- endfor %}{{ ns.seen | join(',') }} {{ ('{"a": 1}' | from_json).a }}"""
    template = ChatTemplate(source)
    try:
        text = template.render([USER, {"role": "stop", "content": "x"}, USER], add_generation_prompt=False)
    finally:
        template.close()
    assert not template.is_fallback and text == "[What is the weather?]user 1"


def test_every_short_template_of_the_tests_is_read_as_it_is(templates):
    for source in (*think_templates.FAMILIES.values(), *tool_templates.FAMILIES.values(), *caps_templates.FAMILIES.values()):
        template = ChatTemplate(source)
        try:
            template.caps()
            assert not template.is_fallback
        finally:
            template.close()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"\xff\xfe{{ x }}", "is not UTF-8 text"),
        (b"{% for m in messages %}{{ m.content }}", "line 1: Unexpected end of template"),
        (b"hi\n{{ m.content }", "line 2: unexpected '}'"),
    ],
)
def test_a_template_file_that_cannot_serve_is_said_with_its_name(tmp_path, content, said):
    path = tmp_path / "mine.jinja"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelLoadError, match="the chat template file .*mine.jinja") as raised:
        read_template_file(str(path))
    assert said in str(raised.value)
    with pytest.raises(ModelLoadError, match="is not a file"):
        read_template_file(str(tmp_path))


def test_a_template_file_is_read(tmp_path):
    path = tmp_path / "chatml.jinja"
    path.write_text(tool_templates.HERMES)
    assert read_template_file(str(path)) == tool_templates.HERMES
