"""Pieces of the Lark grammars (llguidance's) that hold a reply to a tool syntax: a literal text, a
JSON value under a schema, free text up to a closing tag, and what a function's parameters say of
the arguments a syntax writes one by one (their names, which are strings, which are required)."""

from __future__ import annotations

import json

from app.engine.sampling.constraints import JSON_OPTIONS, MAX_SCHEMA_BYTES, ConstraintError, closed


def literal(text: str) -> str:
    return json.dumps(text)  # Lark reads JSON's escapes


def json_value(schema: dict, lenient: bool) -> str:
    """A JSON value under `schema`, compiled by llguidance's JSON compiler as JSON_OPTIONS say."""
    text = json.dumps({**closed(schema), "x-guidance": {**JSON_OPTIONS, "lenient": lenient}})
    if len(text) > MAX_SCHEMA_BYTES:
        raise ConstraintError(f"the tools' schemas have {len(text)} bytes, more than the {MAX_SCHEMA_BYTES} taken")
    return f"%json {text}"


def text_until(closer: str) -> str:
    """The body of a lazy rule: any text, up to and with the first `closer` (llguidance ends a lazy
    lexeme at its shortest match)."""
    return "/(.|\\n)*" + regex_text(closer) + "/"


_META = frozenset("\\.+*?()|[]{}^$#&-~/")
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def regex_text(text: str) -> str:
    """`text` as a regular expression inside Lark's slashes that matches it alone (only the
    regex's own metacharacters escaped: `\\<` is a word boundary to llguidance's regex)."""
    return "".join(_ESCAPES.get(c) or ("\\" + c if c in _META else c) for c in text)


def properties(parameters: dict) -> list[tuple[str, dict, bool]]:
    """The arguments a function's parameters name, in their order: (name, schema, required)."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(props, dict):
        return []
    required = parameters.get("required") or []
    return [(name, _resolved(schema, parameters), name in required) for name, schema in props.items()]


_DEFINITIONS = ("$defs", "definitions")


def _resolved(schema: object, parameters: dict) -> dict:
    """An argument's schema on its own: one that is a reference into the parameters' definitions
    (`{"$ref": "#/$defs/Color"}`, as pydantic writes an enum or a nested model) is the schema it
    names; one that refers to them anywhere inside takes them along, as its grammar is compiled
    apart from the parameters that hold them."""
    if not isinstance(schema, dict):
        return {}
    target = _definition(schema.get("$ref"), parameters)
    if target is not None:
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    if '"$ref"' not in json.dumps(schema):
        return schema
    return {**{key: parameters[key] for key in _DEFINITIONS if isinstance(parameters.get(key), dict)}, **schema}


def _definition(reference: object, parameters: dict) -> dict | None:
    """The schema `#/$defs/Name` (or `#/definitions/Name`) names in the parameters, if it is one."""
    for key in _DEFINITIONS:
        prefix, definitions = f"#/{key}/", parameters.get(key)
        if isinstance(reference, str) and reference.startswith(prefix) and isinstance(definitions, dict):
            target = definitions.get(reference[len(prefix) :])
            return target if isinstance(target, dict) else None
    return None


def is_string(schema: dict) -> bool:
    """Whether every value `schema` allows is a string (`type: string`, or strings listed alone):
    a syntax that writes arguments as text writes such a value raw, any other as JSON."""
    kind = schema.get("type")
    if kind is not None:
        return kind == "string"
    if "const" in schema:
        return isinstance(schema["const"], str)
    values = schema.get("enum")
    return isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)


def string_arguments(functions: tuple[dict, ...]) -> frozenset[tuple[str, str]]:
    """(function, argument) for each argument whose values are all strings."""
    return frozenset(
        (f["name"], name) for f in functions for name, schema, _ in properties(f.get("parameters") or {}) if is_string(schema)
    )


def raw_strings(schema: dict) -> list[str] | None:
    """The strings a string schema lists (enum or const), or None when it allows any."""
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None
