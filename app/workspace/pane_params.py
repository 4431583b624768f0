"""A pane's settings: its sliders, system prompt, mode, output format and where it chats (the local engine or a URL)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.engine.params import Priority
from app.engine.sampling.constraints import (
    JSON_OBJECT_GRAMMAR,
    ConstraintError,
    check_grammar,
    lark_only,
    regex_grammar,
    schema_grammar,
)
from app.engine.sampling.params import PANE_FIELDS, SamplingParams
from app.remote import Endpoint, FormatError, FormattedSampling, OutputFormat, parse_schema

PROBS_SHOWN = 5  # rivals a token shows on hover
# a reply's format: free text, any JSON object, JSON valid under a schema, text a GBNF grammar (or
# Lark) allows, text a Lark grammar allows, text a regular expression matches
OUTPUT_FORMATS = ("free", "json", "schema", "grammar", "lark", "regex")
JSON_FORMATS = ("json", "schema")  # replies shown as formatted JSON with a valid/invalid mark
TYPED_FORMATS = ("schema", "grammar", "lark", "regex")  # a format of the text typed in ⚙ Output
CHECKED_HERE = ("lark", "regex")  # llguidance's own dialects: checked here for a remote endpoint too


def _with_knobs(cls: type) -> type:
    """`cls` with a field first for each knob of SamplingParams on a pane (its sliders and its
    Advanced group: sampling/params.py), of its kind and with its default: declared there only."""
    knobs = {f.name: f.kind.__name__ for f in PANE_FIELDS}
    cls.__annotations__ = {**knobs, **cls.__annotations__}
    for name in knobs:
        setattr(cls, name, getattr(SamplingParams, name))
    return cls


@dataclass(frozen=True)
@_with_knobs
class PaneParams:
    """A pane's sampling knobs (a field each, made by `_with_knobs`), its system prompt (engine
    defaults) and where it chats (the local engine or a URL)."""

    seed: int | None = SamplingParams.seed
    system_prompt: str = ""
    high_priority: bool = False  # served first under the priority policy
    show_probs: bool = False  # the transcript tints each token of a reply by its probability
    completion: bool = False  # the chat is one text the model continues (a base model), not turns
    builtin_template: bool = False  # the chat rendered with the built-in ChatML template, not the model's
    draft_ahead: bool = True  # a greedy reply drafts ahead where the engine speculates (its --spec-type)
    model: str = ""  # the loaded model it talks to, by name ("": the first loaded)
    remote_url: str = ""  # empty: the local engine
    remote_model: str = ""
    remote_api_key: str = ""
    remote_api: str = "chat"  # "chat": /chat/completions; "responses": /responses (continues by previous_response_id)
    output_format: str = "free"  # one of OUTPUT_FORMATS (any other, e.g. hand-edited: free)
    output_text: str = ""  # the JSON schema, the GBNF or Lark grammar or the regular expression of output_format
    # a thinking model: whether it thinks before it answers (off: its template's `enable_thinking` false,
    # and thoughts a template opens closed at once), and for how many tokens at most (-1: no limit)
    think: bool = True
    reasoning_budget: int = -1

    @property
    def priority(self) -> Priority:
        return Priority.HIGH if self.high_priority else Priority.NORMAL

    def endpoint(self) -> Endpoint | None:
        """The remote endpoint this pane chats with; None for the local engine."""
        if not self.remote_url.strip():
            return None
        return Endpoint(self.remote_url.strip(), self.remote_model.strip(), self.remote_api_key.strip(), self.remote_api)

    @property
    def json_replies(self) -> bool:
        """The replies are JSON documents (shown formatted, marked valid or not)."""
        return self.output_format in JSON_FORMATS

    def grammar(self) -> str | None:
        """The grammar the replies follow; None for free text. Raises ConstraintError (one line: why,
        where llguidance gives it) when the schema, grammar or expression cannot constrain a reply."""
        if self.output_format == "json":
            return JSON_OBJECT_GRAMMAR
        if self.output_format == "schema":
            try:
                return schema_grammar(parse_schema(self.output_text))
            except FormatError as e:
                raise ConstraintError(str(e)) from None
        if self.output_format == "grammar":
            return check_grammar(self.output_text)
        if self.output_format == "lark":
            return lark_only(self.output_text)
        if self.output_format == "regex":
            return regex_grammar(self.output_text)
        return None

    def remote_output(self) -> OutputFormat | None:
        """The output format as a remote endpoint is asked for it; None for free text. A Lark grammar
        or a regular expression goes as the grammar (llguidance's Lark) it is checked as here."""
        if self.output_format in CHECKED_HERE:
            try:
                return OutputFormat(self.output_format, self.output_text, self.grammar())
            except ConstraintError:
                return OutputFormat(self.output_format, self.output_text)  # its problem() says there is none to send
        return OutputFormat(self.output_format, self.output_text) if self.output_format in OUTPUT_FORMATS[1:] else None

    def format_problem(self) -> str | None:
        """Why this pane's output format cannot constrain a reply; None when it can (or is free text).
        A remote endpoint checks a schema or GBNF grammar itself: here only that there is one to
        send; a Lark grammar or a regular expression is llguidance's, checked here wherever it goes."""
        output, endpoint = self.remote_output(), self.endpoint()
        if output is None:
            return None
        if endpoint is not None and self.output_format not in CHECKED_HERE:
            return output.problem()
        try:
            self.grammar()
        except ConstraintError as e:
            return str(e)
        return None

    def sampling(self) -> SamplingParams:
        """The request's sampling; with an output format, its grammar, or for a remote endpoint the
        format itself (ignore_eos stays off: the reply ends where its format does). Raises
        ConstraintError for a format that cannot constrain a reply."""
        knobs = {f.name: getattr(self, f.name) for f in PANE_FIELDS}
        common = dict(
            n_probs=PROBS_SHOWN if self.show_probs else None,
            seed=self.seed,
            ignore_eos=False,
            speculate=self.draft_ahead,
            **knobs,
        )
        if self.endpoint() is not None:
            problem = self.format_problem()
            if problem is not None:
                raise ConstraintError(problem)
            return FormattedSampling(output=self.remote_output(), **common)
        return SamplingParams(grammar=self.grammar(), **common)

    def thinking(self) -> dict:
        """The request's thinking fields (Request's `template_kwargs` and `reasoning_budget`)."""
        if not self.think:
            return {"template_kwargs": {"enable_thinking": False}, "reasoning_budget": 0}
        return {"reasoning_budget": self.reasoning_budget if self.reasoning_budget >= 0 else None}

    def with_(self, **changes) -> PaneParams:
        return replace(self, **changes)
