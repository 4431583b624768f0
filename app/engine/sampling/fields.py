"""SamplingParams' numeric knobs, each declared once: its one range, its slider, its API names, llama.cpp's
flag and its help. The engine's checks, the greedy path, the pane's sliders and settings file, the
API's parsing, the remote body and the fan-out read this table (docs/architecture.md: adding one)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class Slider:
    """The span a pane's slider shows, within the field's range, and its step."""

    lo: float
    hi: float
    step: float


@dataclass(frozen=True)
class SamplingField:
    name: str  # the SamplingParams field (and PaneParams' when it has a slider)
    label: str
    kind: type  # int or float
    lo: float  # the one range of valid values: the engine, the API and the fan-out refuse others
    hi: float
    help: str  # the slider's tooltip
    api: tuple[str, ...] = ()  # the request fields that set it; the first present wins
    sent: tuple[str, ...] | None = None  # what a remote endpoint is sent it as (None: the first API name)
    flag: str = ""  # llama.cpp's command-line flag of the same meaning
    slider: Slider | None = None  # none: not on a pane
    # set for a sampler that can change which token is likeliest (a penalty): at temperature 0 the
    # greedy path must still run the chain unless the value is this one, where the sampler does nothing
    neutral: float | None = None

    @property
    def sent_as(self) -> tuple[str, ...]:
        return self.api[:1] if self.sent is None else self.sent

    @property
    def tooltip(self) -> str:
        span = f"\nRange {self.slider.lo:g} to {self.slider.hi:g}, in steps of {self.slider.step:g}." if self.slider else ""
        return f"{self.help}{span}" + (f"\nllama.cpp: {self.flag}" if self.flag else "")

    def problem(self, value) -> str | None:
        """Why `value` cannot be this field's, or None."""
        if self.kind is int:
            if not isinstance(value, int) or isinstance(value, bool) or not self.lo <= value <= self.hi:
                return f"{self.name} must be a whole number between {self.lo:g} and {self.hi:g}; got {value!r}"
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or not self.lo <= value <= self.hi:
            return f"{self.name} must be a number between {self.lo:g} and {self.hi:g}; got {value!r}"  # NaN fails too
        return None


SAMPLING_FIELDS = (
    SamplingField(
        "temperature", "Temperature", float, 0.0, 2.0,
        "How adventurous the choice of each next token is: 0 always takes the likeliest\n"
        "(the same reply every time), higher spreads the choice over less likely tokens.",
        api=("temperature",), flag="--temp", slider=Slider(0.0, 2.0, 0.05),
    ),
    SamplingField(
        "top_p", "Top-p", float, 0.0, 1.0,
        "Nucleus sampling: choose only among the likeliest tokens that together make up this\n"
        "share of the probability. 1 keeps them all; lower is more focused.",
        api=("top_p",), flag="--top-p", slider=Slider(0.05, 1.0, 0.01),
    ),
    SamplingField(
        "top_k", "Top-k", int, 0, MAX_INT,
        "Choose only among this many likeliest tokens. 0 turns the limit off.",
        api=("top_k",), flag="--top-k", slider=Slider(0, 200, 1),
    ),
    SamplingField(
        "min_p", "Min-p", float, 0.0, 1.0,
        "Drop tokens less likely than this fraction of the likeliest one. 0 turns it off;\n"
        "0.05 cuts the long tail of unlikely words.",
        api=("min_p",), flag="--min-p", slider=Slider(0.0, 0.5, 0.01),
    ),
    # llama.cpp divides positive logits by it: 0 would make them infinite and the probabilities NaN
    SamplingField(
        "repeat_penalty", "Repeat penalty", float, 0.01, 10.0,
        "Make tokens used in the recent text less likely, against loops. 1 turns it off.",
        api=("repeat_penalty", "repetition_penalty"), sent=("repeat_penalty", "repetition_penalty"),  # vLLM's name too
        flag="--repeat-penalty", slider=Slider(1.0, 2.0, 0.01), neutral=1.0,
    ),
    SamplingField(
        "repeat_last_n", "Penalty window", int, 0, 65536,
        "How many of the last tokens the penalties look back at.",
        api=("repeat_last_n",), flag="--repeat-last-n",
    ),
    SamplingField(
        "frequency_penalty", "Frequency penalty", float, -2.0, 2.0,
        "OpenAI's: subtracted from a token's logit once per time it came.",
        api=("frequency_penalty",), flag="--frequency-penalty", neutral=0.0,
    ),
    SamplingField(
        "presence_penalty", "Presence penalty", float, -2.0, 2.0,
        "OpenAI's: subtracted once from the logit of any token that came.",
        api=("presence_penalty",), flag="--presence-penalty", neutral=0.0,
    ),
    SamplingField(
        "max_tokens", "Max tokens", int, 1, MAX_INT,
        "The longest reply, in tokens; a reply cut by it says so under it.",
        api=("max_completion_tokens", "max_tokens", "n_predict"), sent=("max_tokens",),
        flag="--n-predict", slider=Slider(16, 2048, 16),
    ),
)  # fmt: skip

BY_NAME = {f.name: f for f in SAMPLING_FIELDS}
SLIDER_FIELDS = tuple(f for f in SAMPLING_FIELDS if f.slider is not None)
