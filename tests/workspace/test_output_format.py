"""A pane's output format: PaneParams -> the request's grammar, the check that refuses a bad one, how it
is saved, and how a finished JSON reply is shown."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QSettings

from app.engine.sampling.constraints import JSON_OBJECT_GRAMMAR, ConstraintError, follows
from app.ui.settings import AppSettings
from app.workspace.markdown_stream import CUT_JSON, VALID_JSON, fenced_code, json_reply
from app.workspace.pane_params import PaneParams

pytestmark = pytest.mark.unit

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_free_text_has_no_grammar():
    assert PaneParams().sampling().grammar is None and PaneParams().format_problem() is None
    # a schema typed and then left for free text does not constrain
    assert PaneParams(output_format="free", output_text="{bad").sampling().grammar is None


def test_json_is_any_object():
    params = PaneParams(output_format="json")
    assert params.sampling().grammar == JSON_OBJECT_GRAMMAR and params.json_replies
    assert not params.sampling().ignore_eos and params.sampling().problem() is None


def test_a_schema_becomes_its_grammar():
    params = PaneParams(output_format="schema", output_text=json.dumps(PERSON, indent=2), max_tokens=120)
    sampling = params.sampling()
    assert sampling.grammar.startswith("start: %json ") and '"age": {"type": "integer"}' in sampling.grammar
    assert not sampling.ignore_eos and sampling.problem() is None and sampling.max_tokens == 120
    assert params.json_replies and params.format_problem() is None


def test_a_grammar_is_taken_as_it_is():
    grammar = 'root ::= "yes" | "no"'
    params = PaneParams(output_format="grammar", output_text=grammar)
    assert params.sampling().grammar == grammar and not params.json_replies


@pytest.mark.parametrize(
    ("fmt", "text", "says"),
    [
        ("schema", "", "no JSON schema"),
        ("schema", "{bad", "the JSON schema is not JSON"),
        ("schema", "[1, 2]", "a JSON schema must be an object"),
        ("schema", '{"type": "objectx"}', "cannot be turned into a grammar"),
        ("schema", json.dumps({"a": {"b": 1}} | {"x": "y" * 70000}), "bytes, more than"),
        ("grammar", "   ", "a grammar must be GBNF text"),
        ("grammar", "root ::= " + "(" * 70 + '"a"' + ")" * 70, "nests parentheses deeper"),
        ("lark", "", "a Lark grammar must be text"),
        ("lark", 'start: "a"\nfoo: "b" )', "line 2, column 10: expecting rule"),
        ("lark", 'root ::= "yes"', "line 1, column 7"),  # GBNF is not read as Lark
        ("lark", 'foo: "a"', "no start rule"),
        ("regex", "", "a regular expression must be non-empty"),
        ("regex", "[0-9]{3", "line 1, column 6: unclosed counted repetition"),
        ("regex", "a/b(c", "line 1, column 4: unclosed group"),  # the place in the pattern as typed
        ("regex", "ab\ncd(", "line 2, column 3: unclosed group"),
        ("regex", "abc\\", "line 1, column 4: a lone backslash"),
    ],
)
def test_a_format_that_cannot_constrain_says_why_in_one_line(fmt, text, says):
    params = PaneParams(output_format=fmt, output_text=text)
    problem = params.format_problem()
    assert problem is not None and says in problem and "\n" not in problem
    with pytest.raises(ConstraintError):
        params.sampling()  # never a request that ignores it


def test_a_lark_grammar_or_a_regular_expression_is_llguidances_grammar():
    lark = PaneParams(output_format="lark", output_text='start: "#" /[0-9a-f]{6}/')
    assert lark.sampling().grammar == 'start: "#" /[0-9a-f]{6}/' and lark.format_problem() is None
    assert not lark.json_replies
    question = PaneParams(output_format="lark", output_text='?start: "yes" | "no"').sampling().grammar
    assert follows(question, "yes") and not follows(question, "maybe")  # read as Lark, not GBNF
    regex = PaneParams(output_format="regex", output_text="[0-9]{3}-[a-c]{2}").sampling().grammar
    assert follows(regex, "123-ab") and not follows(regex, "123-ab ") and follows(regex, "12", whole=False)
    assert not follows(regex, "1x", whole=False)


def test_a_remote_pane_sends_lark_and_regex_as_grammar_checked_here_first():
    remote = PaneParams(output_format="regex", output_text="[0-9]{3}", remote_url="http://example.test/v1")
    output = remote.sampling().output
    assert output.kind == "regex" and output.grammar == "start: /[0-9]{3}/" and output.label == "a regular expression"
    broken = remote.with_(output_text="[0-9")  # llguidance's own dialect: checked here, never sent broken
    assert "unclosed character class" in broken.format_problem()
    with pytest.raises(ConstraintError):
        broken.sampling()
    lark = remote.with_(output_format="lark", output_text='start: "a"')
    assert lark.sampling().output.grammar == 'start: "a"' and lark.format_problem() is None


def test_a_remote_pane_sends_its_format_to_the_endpoint():
    params = PaneParams(output_format="json", remote_url="http://example.test/v1")
    assert (
        params.format_problem() is None and params.sampling().output.kind == "json"
    )  # tests/remote/test_remote_output_format.py


def test_an_unknown_stored_format_is_free_text():
    assert PaneParams(output_format="yaml").sampling().grammar is None


def test_the_format_is_saved_with_the_pane_and_old_files_load(tmp_path):
    path = str(tmp_path / "s.ini")
    settings = AppSettings(QSettings(path, QSettings.Format.IniFormat))
    params = PaneParams(output_format="schema", output_text=json.dumps(PERSON, indent=2) + "\n", max_tokens=120)
    settings.set_pane_params("p", params)
    settings.set_pane_params("old", PaneParams(top_k=12))
    settings.q.remove("pane-old/output_format")  # a file written before the format was a setting
    settings.q.remove("pane-old/output_text")
    settings.sync()
    again = AppSettings(QSettings(path, QSettings.Format.IniFormat))
    assert again.pane_params("p") == params and again.pane_params("p").sampling().grammar == params.sampling().grammar
    assert again.pane_params("old") == PaneParams(top_k=12)


def test_valid_json_is_pretty_printed_and_marked():
    shown = json_reply('{"name": "Ann", "age": 31}')
    assert fenced_code(shown) == [json.dumps({"name": "Ann", "age": 31}, indent=2)]
    assert shown.rstrip().endswith(VALID_JSON)


def test_invalid_json_is_shown_as_written_with_why():
    shown = json_reply('{"name": "An')
    assert fenced_code(shown) == ['{"name": "An']
    assert "✗ not valid JSON: Unterminated string" in shown


def test_json_cut_at_max_tokens_is_marked_cut():
    shown = json_reply('{"name": "An', cut_at_max_tokens=True)
    assert shown.rstrip().endswith(CUT_JSON) and "not valid" not in shown
    assert json_reply('{"a": 1}', cut_at_max_tokens=True).rstrip().endswith(VALID_JSON)  # whole after all


def test_backticks_in_a_reply_do_not_close_its_block():
    text = '{"code": "```x```"}'
    assert fenced_code(json_reply(text)) == [json.dumps(json.loads(text), indent=2)]
    assert fenced_code(json_reply("``` not json")) == ["``` not json"]


# -- the pane's session: a format that cannot constrain is not sent ---------------------------


def test_a_session_sends_the_format_s_grammar_and_refuses_a_bad_one(tmp_path):
    from test_workspace import make, run, settle

    ws, source, *_ = make(tmp_path)
    session = ws.add_pane()
    refused = []
    session.send_refused.connect(refused.append)

    async def scenario():
        session.set_params(session.params.with_(output_format="schema", output_text="{bad"))
        assert not session.send("Describe a person as JSON.")
        assert refused[-1].startswith("Not sent: the JSON schema is not JSON") and session.chat.messages == []
        session.set_params(session.params.with_(output_text=json.dumps(PERSON)))
        assert session.send("Describe a person as JSON.")
        await settle(ws)
        session.set_params(session.params.with_(output_format="grammar", output_text=" "))
        assert not session.regenerate() and len(session.chat.messages) == 2  # the last reply is kept
        assert refused[-1] == "Not sent: a grammar must be GBNF text"

    run(scenario())
    assert (
        len(source.requests) == 1
        and source.requests[0].params.grammar == PaneParams(output_format="schema", output_text=json.dumps(PERSON)).grammar()
    )


def test_a_format_spoilt_between_send_and_start_is_a_refused_turn(tmp_path):
    from test_workspace import make, run, settle

    ws, source, *_ = make(tmp_path)
    session = ws.add_pane()
    restored = []
    session.draft_restored.connect(restored.append)

    async def scenario():
        session.set_params(session.params.with_(output_format="json"))
        assert session.send("Hi")
        session.set_params(session.params.with_(output_format="grammar", output_text=""))  # before the reply's task runs
        await settle(ws)

    run(scenario())
    assert source.requests == [] and restored == ["Hi"]
    assert session.chat.messages[-1]["content"] == "not answered: the output format: a grammar must be GBNF text"
