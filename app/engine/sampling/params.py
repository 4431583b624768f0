"""How one request samples (SamplingParams): its numeric knobs are declared in fields.py."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..probs import MAX_TOP
from .fields import BY_NAME, SAMPLING_FIELDS

PENALTIES = ("repeat_penalty", "frequency_penalty", "presence_penalty")


@dataclass(frozen=True)
class SamplingParams:
    """How a request samples; its numeric knobs are declared in fields.py (ranges, sliders, API)."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0  # OpenAI's: subtracted from a logit once per time its token came
    presence_penalty: float = 0.0  # OpenAI's: subtracted once from the logit of any token that came
    seed: int | None = None  # None: a fresh random seed per request
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks)
    n_probs: int | None = None  # tell each token's probability and its n likeliest rivals' (None: do not)
    # a grammar every reply must follow, GBNF or llguidance's Lark (JSON, a JSON schema's, a tool call's,
    # or one given: constraints.py)
    grammar: str | None = None
    # set: the grammar is lazy, the reply free until one of these patterns (Python regular expressions)
    # matches its text, control tokens written out; held to the grammar from the match on (llama.cpp's
    # lazy grammar: a tool call's syntax under tool_choice "auto")
    grammar_triggers: tuple[str, ...] = ()
    speculate: bool = True  # may draft ahead where the engine speculates (--spec-type): off, never
    # the functions a chat's own template is given as its `tools` (OpenAI's list, as JSON): serve's
    # tool calls with a template that renders them; None: the template sees no tools
    tools: str | None = None

    def with_(self, **changes) -> SamplingParams:
        return replace(self, **changes)

    @property
    def penalizes(self) -> bool:
        """Whether the penalties sampler has anything to do (it looks back at the last tokens)."""
        return any(getattr(self, name) != BY_NAME[name].neutral for name in PENALTIES)

    @property
    def greedy_needs_chain(self) -> bool:
        """At temperature 0, whether a sampler may still change the likeliest token, so the chain must run."""
        return any(f.neutral is not None and getattr(self, f.name) != f.neutral for f in SAMPLING_FIELDS)

    def problem(self) -> str | None:
        """What is out of range (llama.cpp's samplers would misbehave or abort on it), or None."""
        for f in SAMPLING_FIELDS:
            problem = f.problem(getattr(self, f.name))
            if problem is not None:
                return problem
        if self.n_probs is not None and (not isinstance(self.n_probs, int) or not 0 <= self.n_probs <= MAX_TOP):
            return f"n_probs must be a whole number between 0 and {MAX_TOP}, or unset; got {self.n_probs!r}"
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            return f"seed must be a whole number of at least 0, or unset; got {self.seed!r}"
        if not all(isinstance(s, str) and s for s in self.stop):
            return "every stop string must be a non-empty string"
        if self.grammar is not None and not isinstance(self.grammar, str):
            return "the grammar must be GBNF text, or unset"
        if self.tools is not None and not isinstance(self.tools, str):
            return "the tools must be JSON text, or unset"
        if self.grammar_triggers and self.grammar is None:
            return "grammar triggers need a grammar to start"
        if self.grammar is not None and self.ignore_eos:
            return "ignore_eos cannot go with a format to follow: the reply ends where its format does"
        return None


GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)
