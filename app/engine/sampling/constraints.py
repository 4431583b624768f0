"""Output constraints, their one home: GBNF grammars (llama.cpp's grammar sampler reads them) for
any JSON object, a JSON schema (turned into a grammar by llama-cpp-python's converter, reached
through llama/grammar.py), or a grammar given as it is, and a lazy grammar's triggers. The server
and the workspace reach grammars through this module only.

A schema or a grammar comes from whoever sends a request: it is bounded before anything reads it
(its size, how deeply it nests), and a converter that fails says why in one line."""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING

from ..llama.grammar import JSON_OBJECT_GBNF, schema_to_gbnf
from .params import SamplingParams

if TYPE_CHECKING:
    from ..llama.samplers import Grammar, Samplers

MAX_SCHEMA_BYTES = 64 << 10
MAX_GRAMMAR_BYTES = 64 << 10  # llama.cpp parses 256 KiB of alternatives in 0.5 s: a quarter of that at most
MAX_DEPTH = 64  # nested objects, arrays or parentheses: a real format needs few, a hostile one many
MAX_TRIGGERS = 8  # a lazy grammar's trigger patterns: a family's tool syntax needs one or two
MAX_TRIGGER_CHARS = 256

JSON_OBJECT_GRAMMAR = JSON_OBJECT_GBNF


class ConstraintError(ValueError):
    """A schema or grammar that cannot constrain a reply, and why."""


def schema_grammar(schema: object) -> str:
    """The GBNF grammar of replies that are JSON documents valid under `schema`."""
    if not isinstance(schema, dict):
        raise ConstraintError("a JSON schema must be an object")
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_BYTES:
        raise ConstraintError(f"the JSON schema has {len(text)} bytes, more than the {MAX_SCHEMA_BYTES} taken")
    if _depth(schema) > MAX_DEPTH:
        raise ConstraintError(f"the JSON schema nests deeper than {MAX_DEPTH} levels")
    return _converted(text)


@functools.lru_cache(maxsize=64)
def _converted(text: str) -> str:
    """A schema's grammar, kept for the next request with the same schema (a refusal is not kept)."""
    try:
        grammar = schema_to_gbnf(text)
    except RecursionError:
        raise ConstraintError("the JSON schema refers to itself too deeply to be turned into a grammar") from None
    except Exception as e:  # the converter raises what it meets: KeyError, ValueError, TypeError, ...
        raise ConstraintError(f"the JSON schema cannot be turned into a grammar: {type(e).__name__}: {e}") from None
    return check_grammar(grammar)


def check_grammar(grammar: object) -> str:
    """A GBNF grammar within the bounds; llama.cpp parses it when the request's sampler is made."""
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError("a grammar must be GBNF text")
    if len(grammar) > MAX_GRAMMAR_BYTES:
        raise ConstraintError(f"the grammar has {len(grammar)} characters, more than the {MAX_GRAMMAR_BYTES} taken")
    depth = deepest = 0
    quoted = escaped = False
    for c in grammar:  # parentheses outside quoted literals and character classes
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif not quoted and c == ")":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise ConstraintError(f"the grammar nests parentheses deeper than {MAX_DEPTH} levels")
    return grammar


def _depth(value: object, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def trigger_patterns(patterns: object) -> tuple[re.Pattern[bytes], ...]:
    """A lazy grammar's triggers (Python regular expressions, searched in the reply's bytes with
    control tokens written out, `^` at the reply's start), compiled; ConstraintError says why not."""
    if not isinstance(patterns, tuple) or not all(isinstance(p, str) and p for p in patterns):
        raise ConstraintError("the grammar's triggers must be non-empty pattern texts")
    if len(patterns) > MAX_TRIGGERS or any(len(p) > MAX_TRIGGER_CHARS for p in patterns):
        raise ConstraintError(f"at most {MAX_TRIGGERS} grammar triggers of at most {MAX_TRIGGER_CHARS} characters each")
    try:
        return tuple(re.compile(p.encode()) for p in patterns)
    except re.error as e:
        raise ConstraintError(f"a grammar trigger is not a regular expression: {e}") from None


def grammar_sampler(samplers: Samplers, params: SamplingParams) -> Grammar:
    """llama.cpp's grammar sampler for the request's grammar, lazy when it has triggers; ValueError
    (a ConstraintError among them) when the grammar does not parse or a trigger is not a pattern."""
    return samplers.grammar(params.grammar, trigger_patterns(params.grammar_triggers))
