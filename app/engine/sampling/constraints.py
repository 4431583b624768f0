"""Output constraints as llguidance grammars (Lark in llguidance's dialect): any JSON object, a JSON
schema through llguidance's JSON compiler, a GBNF grammar through its converter, a Lark grammar or a
regular expression as llguidance takes them.

A schema or a grammar comes from whoever sends a request: it is bounded before anything reads it
(its size, how deeply it nests), then compiled by llguidance, whose own limits (`LIMITS`: fuel and
item counts, never a clock) refuse one too costly to use, the same on any machine and load. A
refusal says why in one line, with the position where llguidance gives one."""

from __future__ import annotations

import functools
import json
import re

from llguidance import LLMatcher, LLParserLimits, LLTokenizer, regex_to_lark
from llguidance.gbnf_to_lark import any_to_lark, is_lark_syntax

MAX_SCHEMA_BYTES = 64 << 10
MAX_GRAMMAR_BYTES = 64 << 10
MAX_DEPTH = 64  # nested objects, arrays or parentheses: a real format needs few, a hostile one many
MAX_TRIGGERS = 8  # a lazy grammar's trigger patterns: a family's tool syntax needs one or two
MAX_TRIGGER_CHARS = 256

# llguidance's default limits (grammar size, lexer fuel, Earley items per token), named here so that
# the compile check and every request's matcher use the same; short errors: the sender's own text
LIMITS = LLParserLimits(verbose_errors=False)
# JSON as json.dumps writes it: no free whitespace, which a small model can loop on until max_tokens
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

JSON_OBJECT_GRAMMAR = "start: %json " + json.dumps({"type": "object", "x-guidance": JSON_OPTIONS})


class ConstraintError(ValueError):
    """A schema or grammar that cannot constrain a reply, and why."""


def schema_grammar(schema: object, strict: bool = True) -> str:
    """The grammar of replies that are JSON documents valid under `schema`. `strict`: a keyword
    llguidance cannot hold a reply to is refused (naming it); not strict, it is left unchecked."""
    if not isinstance(schema, dict):
        raise ConstraintError("a JSON schema must be an object")
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_BYTES:
        raise ConstraintError(f"the JSON schema has {len(text)} bytes, more than the {MAX_SCHEMA_BYTES} taken")
    if _depth(schema) > MAX_DEPTH:
        raise ConstraintError(f"the JSON schema nests deeper than {MAX_DEPTH} levels")
    return _compiled_schema(text, strict)


@functools.lru_cache(maxsize=64)
def _compiled_schema(text: str, strict: bool) -> str:
    """A schema's grammar, checked once and kept for the next request with the same schema."""
    schema = closed(json.loads(text))
    schema["x-guidance"] = {**JSON_OPTIONS, "lenient": not strict}  # ours, whatever the sender's said
    grammar = "start: %json " + json.dumps(schema)
    problem = compile_error(grammar)
    if problem is not None:
        raise ConstraintError(f"the JSON schema cannot be turned into a grammar: {problem}")
    return grammar


def closed(schema: object, in_all_of: bool = False) -> object:
    """`schema` with its objects that list `properties` and say nothing of others closed to others
    (`additionalProperties: false`), as llama.cpp's converter and OpenAI's strict mode read them:
    a small model left free adds keys until max_tokens. What it allows is valid under the schema as
    given. Not inside `allOf`, whose branches' properties add up; never inside literal values."""
    if isinstance(schema, list):
        return [closed(item, in_all_of) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _LITERAL_KEYS else closed(v, k == "allOf") for k, v in schema.items() if k not in _SCHEMA_MAPS}
    for k in _SCHEMA_MAPS & schema.keys():  # names to schemas: a schema each, the map itself none
        value = schema[k]
        out[k] = {name: closed(sub) for name, sub in value.items()} if isinstance(value, dict) else value
    open_ended = "additionalProperties" in schema or "patternProperties" in schema or "unevaluatedProperties" in schema
    if isinstance(schema.get("properties"), dict) and not open_ended and not in_all_of:
        out["additionalProperties"] = False
    return out


_LITERAL_KEYS = frozenset({"const", "enum", "default", "examples", "x-guidance", "required"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})


def check_grammar(grammar: object) -> str:
    """`grammar` as it is (GBNF, or Lark as llguidance takes it), once llguidance compiles it within
    the bounds; ConstraintError says why not."""
    lark_grammar(grammar)
    return grammar


def lark_grammar(grammar: object) -> str:
    """A grammar within the bounds, as llguidance's Lark: GBNF (rules `name ::= ...`) converted, Lark
    taken as it is; ConstraintError when it does not compile."""
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError("a grammar must be GBNF text")
    if len(grammar) > MAX_GRAMMAR_BYTES:
        raise ConstraintError(f"the grammar has {len(grammar)} characters, more than the {MAX_GRAMMAR_BYTES} taken")
    if _paren_depth(grammar) > MAX_DEPTH:
        raise ConstraintError(f"the grammar nests parentheses deeper than {MAX_DEPTH} levels")
    return _compiled_grammar(grammar)


@functools.lru_cache(maxsize=64)
def _compiled_grammar(grammar: str) -> str:
    try:
        lark = any_to_lark(grammar)
    except Exception as e:  # the converter raises what it meets
        raise ConstraintError(f"the grammar does not parse: {_first_line(str(e))}") from None
    problem = compile_error(lark)
    if problem is not None:
        raise ConstraintError(f"the grammar does not parse: {problem}")
    return lark


def lark_only(text: object) -> str:
    """A Lark grammar as typed (llguidance's dialect, never read as GBNF), within the bounds, as
    `lark_grammar` takes it; ConstraintError says why not, with llguidance's line and column in it."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError("a Lark grammar must be text, e.g. start: /[0-9]{3}/")
    if len(text) > MAX_GRAMMAR_BYTES:
        raise ConstraintError(f"the grammar has {len(text)} characters, more than the {MAX_GRAMMAR_BYTES} taken")
    if _paren_depth(text) > MAX_DEPTH:
        raise ConstraintError(f"the grammar nests parentheses deeper than {MAX_DEPTH} levels")
    problem = compile_error(text)
    if problem is not None:
        raise ConstraintError(f"the Lark grammar does not parse: {problem}")
    # a grammar whose start rule is not a line `start:` (`?start:`) would be read as GBNF: say it is
    # Lark, not on the first line (llama-server without llguidance aborts on `%llguidance` there)
    return text if is_lark_syntax(text) else f"// Lark\n%llguidance {{}}\n{text}"


def with_tokens(lark: str, tokens: dict[str, int]) -> str:
    """`lark` with every text of `tokens` inside its string literals written as that token
    (`<[id]>`): a model whose vocabulary holds a tool syntax's marker as a control token draws it
    as that token, as it was trained to, not spelled out in text pieces; a lazy rule of any text up
    to such a text (`name[lazy]: /(.|\\n)*TEXT/`) becomes any text, then the token. JSON bodies
    (`%json {...}`), other regular expressions, comments and case-blind literals are left as they are."""
    if not tokens:
        return lark
    lark = _LAZY_UNTIL.sub(lambda m: _until_token(m, tokens), lark)
    out, i, n = [], 0, len(lark)
    while i < n:
        end = _skipped_end(lark, i)
        if end > i:
            out.append(lark[i:end])
            i = end
        elif lark[i] == '"':
            end = _string_end(lark, i)
            blind = lark.startswith("i", end) and not lark[end + 1 : end + 2].isalnum()  # "..."i
            out.append(lark[i:end] if blind else _tokens_in_literal(lark[i:end], tokens))
            i = end
        else:
            out.append(lark[i])
            i += 1
    return "".join(out)


_LAZY_UNTIL = re.compile(r"^([ \t]*[\w-]+)\[lazy\]:[ \t]*/\(\.\|\\n\)\*((?:[^/\\\n]|\\.)+)/[ \t]*$", re.M)


def _until_token(match: re.Match[str], tokens: dict[str, int]) -> str:
    """A lazy rule of any text up to a closer that opens with a token's text, as any text then the
    token and the closer's rest (a regular expression cannot match a control token: its bytes are
    no text's, so the text ends where the token comes)."""
    closer = re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t", "r": "\r"}.get(e[1], e[1]), match[2])
    opening = next((t for t in sorted(tokens, key=len, reverse=True) if closer.startswith(t)), None)
    if opening is None:
        return match[0]
    rest = closer[len(opening) :]
    return f"{match[1]}: /(.|\\n)*/ <[{tokens[opening]}]>" + (f" {_tokens_in_literal(json.dumps(rest), tokens)}" if rest else "")


def _skipped_end(lark: str, i: int) -> int:
    """Where a piece of `lark` at `i` that `with_tokens` leaves alone ends (i: none starts there)."""
    if lark.startswith("//", i):
        end = lark.find("\n", i)
        return len(lark) if end < 0 else end
    if lark[i] == "/":  # a regular expression, to its closing slash
        j = i + 1
        while j < len(lark) and lark[j] != "/":
            j += 2 if lark[j] == "\\" else 1
        return min(j + 1, len(lark))
    if lark[i] == "%":  # a directive: its name, then a JSON body if one follows
        j = i + 1
        while j < len(lark) and (lark[j].isalnum() or lark[j] == "_"):
            j += 1
        while j < len(lark) and lark[j] in " \t":
            j += 1
        if j < len(lark) and lark[j] == "{":
            try:
                return json.JSONDecoder().raw_decode(lark, j)[1]
            except ValueError:
                return j
        return j
    return i


def _string_end(lark: str, i: int) -> int:
    j = i + 1
    while j < len(lark) and lark[j] != '"':
        j += 2 if lark[j] == "\\" else 1
    return min(j + 1, len(lark))


def _tokens_in_literal(literal: str, tokens: dict[str, int]) -> str:
    try:
        text = json.loads(literal)
    except ValueError:  # an escape JSON does not have: left as it is
        return literal
    pattern = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
    parts = [p for p in re.split(f"({pattern})", text) if p]
    if len(parts) == 1 and parts[0] not in tokens:
        return literal
    return "(" + " ".join(f"<[{tokens[p]}]>" if p in tokens else json.dumps(p) for p in parts) + ")"


def regex_grammar(pattern: object) -> str:
    """The grammar of replies that match the regular expression `pattern` whole (Rust's regex syntax);
    ConstraintError says why not, with the line and column in the pattern that llguidance's regex
    parser points at."""
    if not isinstance(pattern, str) or not pattern:
        raise ConstraintError("a regular expression must be non-empty text")
    if len(pattern) > MAX_GRAMMAR_BYTES:
        raise ConstraintError(f"the regular expression has {len(pattern)} characters, more than the {MAX_GRAMMAR_BYTES} taken")
    if (len(pattern) - len(pattern.rstrip("\\"))) % 2:  # llguidance's conversion would drop it
        where = _place(pattern, len(pattern) - 1)
        raise ConstraintError(f"the regular expression cannot constrain a reply: {where}: a lone backslash at its end")
    written = regex_to_lark(pattern, "")
    grammar = f"start: /{written}/"
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar, None, limits=LIMITS)
    if failed:
        raise ConstraintError(f"the regular expression cannot constrain a reply: {_regex_reason(pattern, messages[0])}")
    return grammar


def _regex_reason(pattern: str, message: str) -> str:
    """llguidance's error for a regular expression, placed in the pattern as typed: its regex
    parser echoes the pattern as the grammar writes it, a caret under the place, then `error: why`."""
    lines = message.splitlines()
    why = next((line[len("error: ") :] for line in lines if line.startswith("error: ")), None)
    carets = next((i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"^"}), None)
    if why is None or carets is None or carets == 0 or not lines[carets - 1].startswith("    "):
        return reason(message)
    column = len(lines[carets]) - len(lines[carets].lstrip())  # in the echoed pattern, indented by 4
    return f"{_place(pattern, _typed_offset(pattern, column - 4))}: {why}"


def _typed_offset(pattern: str, written: int) -> int:
    """The offset in `pattern` of the character at offset `written` of its grammar form (which
    escapes `/` and line breaks): the shortest prefix whose form reaches past it."""
    lo, hi = 0, len(pattern)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(regex_to_lark(pattern[: mid + 1], "")) > written:
            hi = mid
        else:
            lo = mid + 1
    return min(lo, max(len(pattern) - 1, 0))


def _place(text: str, offset: int) -> str:
    """`line L, column C` (from 1) of the character at `offset` of `text`."""
    line = text.count("\n", 0, offset) + 1
    return f"line {line}, column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def follows(grammar: str, text: str, whole: bool = True) -> bool:
    """Whether `text` follows `grammar` (as `lark_grammar` takes it): all of it when `whole`, else
    as far as it goes (a reply cut short). Read a byte at a time, whatever model wrote it."""
    matcher = LLMatcher(_byte_tokenizer(), lark_grammar(grammar), log_level=0, limits=LIMITS)
    tokens = _byte_tokenizer().tokenize_bytes(text.encode())
    if matcher.is_error() or matcher.validate_tokens(tokens) != len(tokens):
        return False
    return not whole or (matcher.consume_tokens(tokens) and matcher.is_accepting())


@functools.cache
def _byte_tokenizer() -> LLTokenizer:
    return LLTokenizer("byte")


def compile_error(grammar: str) -> str | None:
    """Why llguidance cannot compile `grammar` within LIMITS (one line), or None. Limits that depend on
    a model's vocabulary are checked again when a request's matcher is made."""
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar, None, limits=LIMITS)
    return reason(messages[0]) if failed else None


def reason(message: str) -> str:
    """llguidance's error as one line: `line L, column C: what` where it gives a position (`L(C): `);
    the position of a schema inside the grammar that wraps it is not the sender's, and is left out."""
    line = _first_line(message)
    line = re.sub(r"^at \d+\(\d+\): (?=failed to compile JSON schema)", "", line)
    return re.sub(r"^(?:at )?(\d+)\((\d+)\): ", r"line \1, column \2: ", line)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no reason given"


def _paren_depth(grammar: str) -> int:
    """The deepest parentheses outside quoted literals (GBNF's and Lark's alike)."""
    depth = deepest = 0
    quoted = escaped = False
    for c in grammar:
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
    return deepest


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
