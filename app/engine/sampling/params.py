"""How one request samples (SamplingParams); each knob declared once, on its field: its range,
help, API names, llama.cpp's flag and slider (fields.py's `knob`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..probs import MAX_TOP
from .fields import MAX_INT, Slider, knob, knobs

PENALTIES = ("repeat_penalty", "frequency_penalty", "presence_penalty")
# llama.cpp's samplers by the names of its sampler order (`samplers`), in its default order
# (common/common.h); the logit bias runs before them, the draw (or Mirostat) after
SAMPLER_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
SAMPLER_ALIASES = (  # llama-server's other names and its letters (common/sampling.cpp)
    ("top-k", "top_k"), ("top-p", "top_p"), ("top-n-sigma", "top_n_sigma"), ("nucleus", "top_p"),
    ("typical-p", "typ_p"), ("typical", "typ_p"), ("typ-p", "typ_p"), ("typ", "typ_p"), ("min-p", "min_p"),
    ("temp", "temperature"),
    ("e", "penalties"), ("d", "dry"), ("s", "top_n_sigma"), ("k", "top_k"), ("y", "typ_p"), ("p", "top_p"),
    ("m", "min_p"), ("x", "xtc"), ("t", "temperature"),
)  # fmt: skip
# samplers of the order that can change which token is likeliest (the others cut the tail, or scale)
MOVES_TOP = frozenset({"penalties", "dry", "typ_p", "xtc"})
MAX_BIASES = 1024  # logit bias entries a request may give


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
        "How many of the last tokens the penalties look back at (the prompt's too). 0 turns them off.",
        api=("repeat_last_n",), flag="--repeat-last-n", slider=Slider(0, 1024, 16), advanced=True,
    )  # fmt: skip
    frequency_penalty: float = knob(
        0.0, "Frequency penalty", -2.0, 2.0,
        "OpenAI's: subtracted from a token's logit once per time it came.",
        api=("frequency_penalty",), flag="--frequency-penalty", slider=Slider(-2.0, 2.0, 0.05), advanced=True,
        neutral=0.0,
    )  # fmt: skip
    presence_penalty: float = knob(
        0.0, "Presence penalty", -2.0, 2.0,
        "OpenAI's: subtracted once from the logit of any token that came.",
        api=("presence_penalty",), flag="--presence-penalty", slider=Slider(-2.0, 2.0, 0.05), advanced=True,
        neutral=0.0,
    )  # fmt: skip
    dry_multiplier: float = knob(
        0.0, "DRY multiplier", 0.0, 5.0,
        "DRY (Don't Repeat Yourself): a token that would extend a sequence already seen in the\n"
        "text loses multiplier x base^(length - allowed length) of its logit. 0 turns it off;\n"
        "0.8 is the usual start.",
        api=("dry_multiplier",), flag="--dry-multiplier", slider=Slider(0.0, 2.0, 0.05), advanced=True, neutral=0.0,
    )  # fmt: skip
    dry_base: float = knob(
        1.75, "DRY base", 1.0, 10.0,
        "How fast DRY's penalty grows with the length of the repeated sequence.",
        api=("dry_base",), flag="--dry-base", slider=Slider(1.0, 4.0, 0.05), advanced=True,
    )  # fmt: skip
    dry_allowed_length: int = knob(
        2, "DRY allowed length", 0, 1024,
        "A repeated sequence up to this many tokens long goes unpenalized.",
        api=("dry_allowed_length",), flag="--dry-allowed-length", slider=Slider(0, 16, 1), advanced=True,
    )  # fmt: skip
    dry_penalty_last_n: int = knob(
        64, "DRY window", 0, 65536,
        "How many of the last tokens DRY scans for repeats (the prompt's too). 0 turns it off.",
        api=("dry_penalty_last_n",), flag="--dry-penalty-last-n", slider=Slider(0, 1024, 16), advanced=True,
    )  # fmt: skip
    dry_sequence_breakers: tuple = knob(
        ("\n", ":", '"', "*"), "DRY sequence breakers", 1, 32,
        "Texts that end a sequence for DRY: a repeat is never counted across one.\n"
        'A JSON list of strings, e.g. ["\\n", ":", "\\"", "*"] (llama.cpp\'s default).',
        api=("dry_sequence_breakers",), flag="--dry-sequence-breaker", advanced=True, items="text",
    )  # fmt: skip
    xtc_probability: float = knob(
        0.0, "XTC probability", 0.0, 1.0,
        "XTC (Exclude Top Choices): how often the likeliest tokens above the threshold are removed,\n"
        "all but the least likely of them, for less predictable text. 0 turns it off.",
        api=("xtc_probability",), flag="--xtc-probability", slider=Slider(0.0, 1.0, 0.01), advanced=True, neutral=0.0,
    )  # fmt: skip
    xtc_threshold: float = knob(
        0.1, "XTC threshold", 0.0, 1.0,
        "XTC removes only tokens at least this likely. Above 0.5 it removes none.",
        api=("xtc_threshold",), flag="--xtc-threshold", slider=Slider(0.0, 0.5, 0.01), advanced=True,
    )  # fmt: skip
    top_n_sigma: float = knob(
        0.0, "Top-nσ", -1.0, 10.0,
        "Keep only tokens whose logit is within n standard deviations of the top one.\n"
        "0 (or llama-server's -1) turns it off.",
        api=("top_n_sigma",), flag="--top-nsigma", slider=Slider(0.0, 5.0, 0.05), advanced=True,
    )  # fmt: skip
    typical_p: float = knob(
        1.0, "Typical-p", 0.0, 1.0,
        "Locally typical sampling: keep the tokens whose surprise is closest to the expected one,\n"
        "up to this share of the probability. 1 turns it off.",
        api=("typical_p",), flag="--typical", slider=Slider(0.0, 1.0, 0.01), advanced=True, neutral=1.0,
    )  # fmt: skip
    mirostat: int = knob(
        0, "Mirostat", 0, 2,
        "Mirostat keeps the text's surprise near τ: 1 or 2 (Mirostat 2.0); 0 turns it off. On, it\n"
        "replaces the other samplers as llama.cpp does: only the logit bias, the temperature and\n"
        "Mirostat draw, and the penalties, DRY and the cuts are not used.",
        api=("mirostat",), flag="--mirostat", slider=Slider(0, 2, 1), advanced=True,
    )  # fmt: skip
    mirostat_tau: float = knob(
        5.0, "Mirostat τ", 0.0, 20.0,
        "Mirostat's target surprise (entropy): lower is more focused text.",
        api=("mirostat_tau",), flag="--mirostat-ent", slider=Slider(0.0, 10.0, 0.1), advanced=True,
    )  # fmt: skip
    mirostat_eta: float = knob(
        0.1, "Mirostat η", 0.0, 1.0,
        "Mirostat's learning rate: how fast it follows the target.",
        api=("mirostat_eta",), flag="--mirostat-lr", slider=Slider(0.0, 1.0, 0.01), advanced=True,
    )  # fmt: skip
    dynatemp_range: float = knob(
        0.0, "Dynatemp range", 0.0, 5.0,
        "Dynamic temperature: each token's temperature goes from temperature - range (a sure\n"
        "next token) to temperature + range (an open one). 0 turns it off.",
        api=("dynatemp_range",), flag="--dynatemp-range", slider=Slider(0.0, 2.0, 0.05), advanced=True, neutral=0.0,
    )  # fmt: skip
    dynatemp_exponent: float = knob(
        1.0, "Dynatemp exponent", 0.0, 10.0,
        "How the next token's uncertainty maps onto the dynamic temperature's range.",
        api=("dynatemp_exponent",), flag="--dynatemp-exp", slider=Slider(0.0, 5.0, 0.05), advanced=True,
    )  # fmt: skip
    logit_bias: tuple = knob(
        (), "Logit bias", 0, MAX_BIASES,
        "Added to a token's logit before any sampler: -100 bans it, +5 favours it. By token id, or\n"
        "by a text: each of its tokens gets the bias.",
        api=("logit_bias",), flag="--logit-bias", advanced=True, items="bias", neutral=(),
    )  # fmt: skip
    samplers: tuple = knob(
        SAMPLER_ORDER, "Sampler order", 0, 32,
        "The samplers in the order they run; one left out does not run. A list of names, or\n"
        "llama.cpp's letters (edskypmxt). The logit bias runs first, the draw last.",
        api=("samplers",), flag="--samplers", advanced=True, items="name", choices=SAMPLER_ORDER,
        aliases=SAMPLER_ALIASES,
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
    # texts the reply writes out where the model's vocabulary holds them as control tokens (a tool
    # syntax's markers, which its parser reads: llama.cpp's preserved tokens)
    preserved: tuple[str, ...] = ()

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

    @property
    def is_greedy(self) -> bool:
        """Whether each token is the likeliest the samplers leave, with nothing drawn at random: at
        temperature 0, unless the temperature is left out of the order (llama.cpp then draws as at 1),
        dynamic temperature gives it a range, or XTC removes the top choices only sometimes."""
        if self.temperature > 0:
            return False
        if self.mirostat:  # llama.cpp's temperature, then Mirostat: of a single token left
            return True
        xtc_at_random = 0 < self.xtc_probability < 1 and self.xtc_threshold <= 0.5
        return "temperature" in self.samplers and self.dynatemp_range <= 0 and not xtc_at_random

    @property
    def drys(self) -> bool:
        """Whether the DRY sampler has anything to do."""
        return self.dry_multiplier > 0 and self.dry_penalty_last_n > 0 and "dry" in self.samplers and not self.mirostat

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
        if not all(isinstance(t, str) and t for t in self.preserved):
            return "every preserved text must be a non-empty string"
        if self.grammar_triggers and self.grammar is None:
            return "grammar triggers need a grammar to start"
        if self.grammar is not None and self.ignore_eos:
            return "ignore_eos cannot go with a format to follow: the reply ends where its format does"
        return None


SAMPLING_FIELDS = knobs(SamplingParams)
BY_NAME = {f.name: f for f in SAMPLING_FIELDS}
PANE_FIELDS = tuple(f for f in SAMPLING_FIELDS if f.on_pane)  # a PaneParams field each
SLIDER_FIELDS = tuple(f for f in PANE_FIELDS if not f.advanced)  # a pane's main sliders
ADVANCED_FIELDS = tuple(f for f in PANE_FIELDS if f.advanced)  # its Advanced group
NUMERIC_FIELDS = tuple(f for f in PANE_FIELDS if f.kind is not tuple)  # what a fan-out may sweep
GREEDY = SamplingParams(temperature=0.0, repeat_penalty=1.0)
