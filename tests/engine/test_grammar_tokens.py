"""A tool syntax's markers that a vocabulary holds as control tokens, written into a grammar as
those tokens (`with_tokens`): inside literals, and at the end of a lazy rule of free text; JSON
bodies, regular expressions and comments untouched."""

from __future__ import annotations

import pytest

from app.engine.sampling.constraints import with_tokens

pytestmark = pytest.mark.unit

TOKENS = {"<|call|>": 7, "[TOOL_CALLS]": 5, "<|end|>": 9}


def test_a_marker_inside_a_literal_becomes_its_token_in_a_group_the_rest_stays_text():
    assert with_tokens('start: "[TOOL_CALLS][" x "]<|call|>"?', TOKENS) == 'start: (<[5]> "[") x ("]" <[7]>)?'
    assert with_tokens('start: "<|call|>"', TOKENS) == "start: (<[7]>)"
    assert with_tokens('start: "no marker here"', TOKENS) == 'start: "no marker here"'


def test_json_bodies_regexes_comments_and_case_blind_literals_are_left_as_they_are():
    grammar = 'start: "a" %json {"const": "<|call|>", "x": "\\"}"} "<|call|>"\nb: /\\/<|call|>/ // "<|call|>"\nc: "<|call|>"i'
    assert with_tokens(grammar, TOKENS) == (
        'start: "a" %json {"const": "<|call|>", "x": "\\"}"} (<[7]>)\nb: /\\/<|call|>/ // "<|call|>"\nc: "<|call|>"i'
    )


def test_a_lazy_rule_of_text_up_to_a_marker_becomes_text_then_the_token():
    grammar = "t[lazy]: /(.|\\n)*<\\|end\\|>/\nu[lazy]: /(.|\\n)*<\\/p>/"
    assert with_tokens(grammar, TOKENS) == "t: /(.|\\n)*/ <[9]>\nu[lazy]: /(.|\\n)*<\\/p>/"


def test_no_tokens_leave_the_grammar_alone():
    assert with_tokens('start: "<|call|>"', {}) == 'start: "<|call|>"'


def test_a_lazy_rule_up_to_a_closer_that_opens_with_a_marker_keeps_the_closers_rest():
    tokens = {"</arg_value>": 3, "<arg_key>": 4}
    grammar = "v[lazy]: /(.|\\n)*<\\/arg_value>\\n<arg_key>/"
    assert with_tokens(grammar, tokens) == 'v: /(.|\\n)*/ <[3]> ("\\n" <[4]>)'
