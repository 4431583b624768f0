"""Schemas and grammars from anyone (app/engine/sampling/constraints.py): bounded before they are read, and
any JSON value given as a schema either becomes a grammar or is refused with one error."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.sampling.constraints import MAX_DEPTH, MAX_GRAMMAR_BYTES, ConstraintError, check_grammar, schema_grammar

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
schema_words = st.sampled_from(["type", "properties", "items", "required", "enum", "anyOf", "$ref", "pattern", "minLength"])
schemas = st.recursive(
    st.one_of(st.sampled_from(["object", "array", "string", "integer", "#/x", "^a+$"]), st.integers(-3, 3)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(schema_words, inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, schemas))
def test_any_json_value_as_a_schema_becomes_a_grammar_or_one_error(schema):
    try:
        grammar = schema_grammar(schema)
    except ConstraintError as e:
        assert str(e)
    else:
        assert grammar.startswith("start: %json ")


def test_a_twenty_property_schema_compiles_in_a_few_milliseconds():
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": ["string", "integer", "boolean"][i % 3]} for i in range(20)},
    }
    schema["required"] = list(schema["properties"])
    t0 = time.perf_counter()
    grammar = schema_grammar(schema)
    assert time.perf_counter() - t0 < 0.05 and all(f'"field_{i}"' in grammar for i in range(20))


def test_schemas_and_grammars_past_the_bounds_are_refused_before_they_are_read():
    deep: dict = {}
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(ConstraintError, match="nests deeper"):
        schema_grammar(deep)
    with pytest.raises(ConstraintError, match="more than"):
        schema_grammar({"enum": ["x" * 1000] * 100})
    with pytest.raises(ConstraintError, match="must be an object"):
        schema_grammar(["type", "object"])
    with pytest.raises(ConstraintError, match="more than"):
        check_grammar('root ::= "' + "a" * MAX_GRAMMAR_BYTES + '"')
    with pytest.raises(ConstraintError, match="parentheses deeper"):
        check_grammar("root ::= " + "(" * (MAX_DEPTH + 1) + '"a"' + ")" * (MAX_DEPTH + 1))
    # parentheses inside a quoted literal are text, not nesting
    assert check_grammar('root ::= "' + "(" * 200 + '"')
