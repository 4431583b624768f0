"""A pane's output format as a remote endpoint is asked for it: the chat API's `response_format` (or
llama-server's `grammar`), the Responses API's `text.format`. The endpoint constrains the reply; what
it cannot honour comes back as its own error, which the pane shows. A Lark grammar or a regular
expression (llguidance's) has no field of OpenAI's: it goes as `grammar`, in Lark (`serve` takes it;
llama-server's GBNF parser refuses it with a 400); an endpoint that takes the field and ignores it
(many ignore what they do not know) is caught afterwards: the reply is read against the grammar
(`follows`), and one that does not follow it says so."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.engine.sampling.params import SamplingParams

SCHEMA_NAME = "reply"  # the name a schema is sent under (the APIs require one) when its title will not do
LABELS = {
    "json": "any JSON object",
    "schema": "a JSON schema",
    "grammar": "a GBNF grammar",
    "lark": "a Lark grammar",
    "regex": "a regular expression",
}
SENT_AS_GRAMMAR = ("grammar", "lark", "regex")


class FormatError(ValueError):
    """An output format that cannot be sent, and why (one line)."""


def parse_schema(text: str) -> dict:
    """The JSON schema typed in a pane; FormatError when it is none."""
    if not text.strip():
        raise FormatError("no JSON schema: type one in ⚙ or load it from a file")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"the JSON schema is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise FormatError("a JSON schema must be an object")
    return schema


@dataclass(frozen=True)
class OutputFormat:
    """What every reply must be: "json" (any JSON object), "schema" (JSON valid under the schema in
    `text`), "grammar" (text the GBNF grammar in `text` allows), "lark" or "regex" (text the Lark
    grammar in `text` allows, or the regular expression matches; `lark`: it as llguidance's Lark,
    once checked, else empty)."""

    kind: str
    text: str = ""
    lark: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def problem(self) -> str | None:
        """Why this format cannot be sent (nothing to send); None if it can. The rest is the endpoint's to judge."""
        if self.kind == "schema":
            try:
                parse_schema(self.text)
            except FormatError as e:
                return str(e)
        if self.kind == "grammar" and not self.text.strip():
            return "a grammar must be GBNF text"
        if self.kind in ("lark", "regex") and not self.lark:
            return f"{self.label} that llguidance cannot compile is not sent"
        return None

    @property
    def grammar(self) -> str | None:
        """The grammar the reply is sent to follow (GBNF or llguidance's Lark); None for JSON."""
        if self.kind not in SENT_AS_GRAMMAR:
            return None
        return self.text if self.kind == "grammar" else self.lark

    def chat_fields(self) -> dict:
        """The chat completions body's fields that ask for this format."""
        if self.kind in SENT_AS_GRAMMAR:
            return {"grammar": self.grammar}  # llama-server's and serve's own field: OpenAI's API refuses it
        if self.kind == "json":
            return {"response_format": {"type": "json_object"}}
        return {"response_format": {"type": "json_schema", "json_schema": self._named_schema()}}

    def responses_fields(self) -> dict:
        """The Responses body's `text`: its format, with a schema's name and strictness beside the type.
        The API has no grammar: one is sent as on chat, for an endpoint that takes it to take."""
        if self.kind in SENT_AS_GRAMMAR:
            return {"grammar": self.grammar}
        form = {"type": "json_object"} if self.kind == "json" else {"type": "json_schema", **self._named_schema()}
        return {"text": {"format": form}}

    def _named_schema(self) -> dict:
        # strict: the endpoint must keep to the schema, not take it as a hint
        schema = parse_schema(self.text)
        return {"name": _schema_name(schema), "schema": schema, "strict": True}


def _schema_name(schema: dict) -> str:
    """The schema's title as a name the APIs take (letters, digits, _ and -, at most 64), else SCHEMA_NAME."""
    title = schema.get("title")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", title).strip("_")[:64] if isinstance(title, str) else ""
    return name or SCHEMA_NAME


@dataclass(frozen=True)
class FormattedSampling(SamplingParams):
    """A remote pane's sampling with its output format as the pane gave it: the endpoint is asked in its
    API's own terms (a schema, not the grammar the local engine would make of it)."""

    output: OutputFormat | None = None


def output_of(params: SamplingParams) -> OutputFormat | None:
    """The format a request asks of an endpoint: a pane's own, or a bare grammar (sent as `grammar`)."""
    if isinstance(params, FormattedSampling):
        return params.output
    return OutputFormat("grammar", params.grammar) if params.grammar else None
