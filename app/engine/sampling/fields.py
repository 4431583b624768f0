"""What a numeric knob of SamplingParams is to its users: its one range, its slider, its API names,
llama.cpp's flag and its help (`SamplingField`), declared on the field itself with `knob()`
(params.py). The engine's checks, the greedy path, the pane's sliders and settings file, the API's
parsing, the remote body and the fan-out read the table params.py derives from the fields
(docs/architecture.md: adding one)."""

from __future__ import annotations

import dataclasses
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
    kind: type  # int or float: its default's
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


KNOB = "knob"  # the key of a SamplingParams field's metadata that holds its SamplingField


def knob(default: float, label: str, lo: float, hi: float, help: str, **details) -> dataclasses.Field:
    """A SamplingParams field declared with what its users see of it (SamplingField's `details`)."""
    declared = SamplingField("", label, type(default), lo, hi, help, **details)
    return dataclasses.field(default=default, metadata={KNOB: declared})


def knobs(cls: type) -> tuple[SamplingField, ...]:
    """The knobs declared on `cls`'s fields, in their order, each named after its field."""
    return tuple(dataclasses.replace(f.metadata[KNOB], name=f.name) for f in dataclasses.fields(cls) if KNOB in f.metadata)
