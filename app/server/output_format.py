"""The reply's format a request asks for, as the grammar (llguidance's) the engine constrains it
with: OpenAI's `response_format` (`text`, `json_object`, `json_schema` {name, schema, strict}) and
llama-server's `json_schema` (a schema) and `grammar` (GBNF, or Lark as llguidance takes it), on
chat and completions alike. A schema or grammar that cannot constrain a reply is a 400 saying why,
never a reply that ignores it; a schema `strict` false (as OpenAI's default) leaves the keywords
llguidance cannot hold unchecked, where a strict one is refused naming them."""

from __future__ import annotations

from app.engine.sampling.constraints import JSON_OBJECT_GRAMMAR, ConstraintError, check_grammar, schema_grammar

FORMAT_FIELDS = ("response_format", "json_schema", "grammar")


class FieldError(ValueError):
    """A field of a request that cannot be honoured (a format, a tool): the message, and the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def grammar_of(body: dict) -> str | None:
    """The GBNF grammar the reply must follow, or None for free text."""
    asked = [name for name in FORMAT_FIELDS if body.get(name) not in (None, "")]
    if len(asked) > 1:
        raise FieldError(f"send one of {', '.join(FORMAT_FIELDS)}, not {' and '.join(asked)}", asked[1])
    if not asked:
        return None
    name = asked[0]
    try:
        if name == "grammar":
            return check_grammar(body["grammar"])
        if name == "json_schema":
            return schema_grammar(body["json_schema"])  # llama-server's field: strict
        return _response_format(body["response_format"])
    except ConstraintError as e:
        raise FieldError(str(e), name) from None


def text_format_grammar(text: object) -> str | None:
    """The Responses API's `text.format`: `text`, `json_object`, or `json_schema` with its `name`,
    `schema` and `strict` beside the type (not nested, as in chat's response_format)."""
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict):
        raise FieldError("'text' must be an object with a 'format' object", "text")
    kind = form.get("type")
    try:
        if kind == "json_schema":
            if "schema" not in form:
                raise FieldError("'text.format' of type json_schema must hold a 'schema'", "text")
            return schema_grammar(form["schema"], _strict(form, "text.format"))
        return _response_format(form)
    except ConstraintError as e:
        raise FieldError(str(e), "text") from None
    except FieldError as e:
        raise FieldError(str(e).replace("'response_format", "'text.format"), "text") from None


def _response_format(value: object) -> str | None:
    if not isinstance(value, dict):
        raise FieldError("'response_format' must be an object with a 'type'", "response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT_GRAMMAR
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise FieldError("'response_format.json_schema' must be an object holding a 'schema'", "response_format")
        return schema_grammar(spec["schema"], _strict(spec, "response_format.json_schema"))
    raise FieldError(f"'response_format.type' must be text, json_object or json_schema; got {kind!r}", "response_format")


def _strict(spec: dict, where: str) -> bool:
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise FieldError(f"'{where}.strict' must be a boolean", where.split(".")[0])
    return bool(strict)
