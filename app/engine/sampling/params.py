"""How one request samples (SamplingParams); each numeric knob declared once, on its field: its range,
help, API names, llama.cpp's flag and slider (fields.py's `knob`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..probs import MAX_TOP
from .fields import MAX_INT, Slider, knob, knobs

PENALTIES = ("repeat_penalty", "frequency_penalty", "presence_penalty")


@dataclass(frozen=True)
class SamplingParams:
    """How a request samples. The knobs come in the order a pane shows its sliders."""

    temperature: float = knob(
        0.7, "Temperature", 0.0, 2.0,
        "How adventurous the choice of each next token is: 0 always takes the likeliest\n"
        "(the same reply every time), higher spreads the choice over less likely tokens.",
        api=("temperature",), flag="--temp", slider=Slider(0.0, 2.0, 0.05),
    )  # fmt: skip
    top_p: float = knob(
        0.95, "Top-p", 0.0, 1.0,
        "Nucleus sampling: choose only among the likeliest tokens that together make up this\n"
        "share of the probability. 1 keeps them all; lower is more focused.",
        api=("top_p",), flag="--top-p", slider=Slider(0.05, 1.0, 0.01),
    )  # fmt: skip
    top_k: int = knob(
        40, "Top-k", 0, MAX_INT,
        "Choose only among this many likeliest tokens. 0 turns the limit off.",
        api=("top_k",), flag="--top-k", slider=Slider(0, 200, 1),
    )  # fmt: skip
    min_p: float = knob(
        0.05, "Min-p", 0.0, 1.0,
        "Drop tokens less likely than this fraction of the likeliest one. 0 turns it off;\n"
        "0.05 cuts the long tail of unlikely words.",
        api=("min_p",), flag="--min-p", slider=Slider(0.0, 0.5, 0.01),
    )  # fmt: skip
    # llama.cpp divides positive logits by it: 0 would make them infinite and the probabilities NaN
    repeat_penalty: float = knob(
        1.1, "Repeat penalty", 0.01, 10.0,
        "Make tokens used in the recent text less likely, against loops. 1 turns it off.",
        api=("repeat_penalty", "repetition_penalty"), sent=("repeat_penalty", "repetition_penalty"),  # vLLM's name too
        flag="--repeat-penalty", slider=Slider(1.0, 2.0, 0.01), neutral=1.0,
    )  # fmt: skip
    max_tokens: int = knob(
        256, "Max tokens", 1, MAX_INT,
        "The longest reply, in tokens; a reply cut by it says so under it.",
        api=("max_completion_tokens", "max_tokens", "n_predict"), sent=("max_tokens",),
        flag="--n-predict", slider=Slider(16, 2048, 16),
    )  # fmt: skip
    repeat_last_n: int = knob(
        64, "Penalty window", 0, 65536,
        "How many of the last tokens the penalties look back at.",
        api=("repeat_last_n",), flag="--repeat-last-n",
    )  # fmt: skip
    frequency_penalty: float = knob(
        0.0, "Frequency penalty", -2.0, 2.0,
        "OpenAI's: subtracted from a token's logit once per time it came.",
        api=("frequency_penalty",), flag="--frequency-penalty", neutral=0.0,
    )  # fmt: skip
    presence_penalty: float = knob(
        0.0, "Presence penalty", -2.0, 2.0,
        "OpenAI's: subtracted once from the logit of any token that came.",
        api=("presence_penalty",), flag="--presence-penalty", neutral=0.0,
    )  # fmt: skip
    seed: int | None = None  # None: a fresh random seed per request
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


SAMPLING_FIELDS = knobs(SamplingParams)
BY_NAME = {f.name: f for f in SAMPLING_FIELDS}
SLIDER_FIELDS = tuple(f for f in SAMPLING_FIELDS if f.slider is not None)
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)
