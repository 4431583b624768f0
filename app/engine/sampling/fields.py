"""What a knob of SamplingParams is to its users: its one range, its slider, its API names,
llama.cpp's flag and its help (`SamplingField`), declared on the field itself with `knob()`
(params.py). A knob is a number, or a list (DRY's sequence breakers, the sampler order, the logit
bias) that it reads from JSON and writes back. The engine's checks, the greedy path, the pane's
sliders and settings file, the API's parsing, the remote body, the presets and the fan-out read the
table params.py derives from the fields (docs/architecture.md: adding one)."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

MAX_INT = 2**31 - 1
MAX_BIAS = 100.0  # OpenAI's bound on a logit bias; -inf (llama-server's `false`) bans a token outright
MAX_TEXT = 40  # characters of a text item: llama.cpp cuts a DRY sequence breaker there
MAX_BIAS_TEXT = 256  # characters of a text whose tokens get a bias


@dataclass(frozen=True)
class Slider:
    """The span a pane's slider shows, within the field's range, and its step."""

    lo: float
    hi: float
    step: float


@dataclass(frozen=True)
class SamplingField:
    name: str  # the SamplingParams field (and PaneParams' when it is on a pane)
    label: str
    kind: type  # int, float or tuple (a list of `items`): its default's
    lo: float  # the one range of valid values (of a list: its length): the engine, the API and the fan-out refuse others
    hi: float
    help: str  # the slider's tooltip
    api: tuple[str, ...] = ()  # the request fields that set it; the first present wins
    sent: tuple[str, ...] | None = None  # what a remote endpoint is sent it as (None: the first API name)
    flag: str = ""  # llama.cpp's command-line flag of the same meaning
    slider: Slider | None = None  # a number's span on a pane; none: not on a pane's main sliders
    advanced: bool = False  # on a pane, in its Advanced group (folded), with a slider (a number) or a field (a list)
    # set for a sampler that can change which token is likeliest (a penalty, a bias): at temperature 0 the
    # greedy path must still run the chain unless the value is this one, where the sampler does nothing
    neutral: float | tuple | None = None
    # a list's items: "text" (strings of 1 to MAX_TEXT characters), "name" (of `choices`, or an alias of
    # one in `aliases`; a string of one-letter aliases stands for a list) or "bias" ((token id or text,
    # bias) pairs)
    items: str = ""
    choices: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, choice) pairs

    @property
    def sent_as(self) -> tuple[str, ...]:
        return self.api[:1] if self.sent is None else self.sent

    @property
    def on_pane(self) -> bool:
        return self.slider is not None or self.advanced

    @property
    def tooltip(self) -> str:
        span = f"\nRange {self.slider.lo:g} to {self.slider.hi:g}, in steps of {self.slider.step:g}." if self.slider else ""
        return f"{self.help}{span}" + (f"\nllama.cpp: {self.flag}" if self.flag else "")

    def problem(self, value, quoted: str | None = None) -> str | None:
        """Why `value` cannot be this field's, or None; said of `quoted` (a request's field, written
        in quotes) when given, else of the field."""
        where = (lambda index="": f"'{quoted}{index}'") if quoted else (lambda index="": f"{self.name}{index}")
        if self.kind is tuple:
            return self._list_problem(value, where)
        if self.kind is int:
            if not isinstance(value, int) or isinstance(value, bool) or not self.lo <= value <= self.hi:
                return f"{where()} must be a whole number between {self.lo:g} and {self.hi:g}; got {_shown(value)}"
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or not self.lo <= value <= self.hi:
            return f"{where()} must be a number between {self.lo:g} and {self.hi:g}; got {_shown(value)}"  # NaN fails too
        return None

    # -- a list's value ----------------------------------------------------------------------

    def _list_problem(self, value, where) -> str | None:
        if not isinstance(value, tuple) or not self.lo <= len(value) <= self.hi:
            got = f"{len(value)} items" if isinstance(value, tuple) else _shown(value)
            return f"{where()} must be a list of {self.lo:g} to {self.hi:g} items; got {got}"
        for i, item in enumerate(value):
            why = _ITEM_PROBLEMS[self.items](self, item)
            if why is not None:
                return f"{where(f'[{i}]')} {why}"
        return None

    def from_json(self, raw, name: str | None = None):
        """The value JSON `raw` stands for (as a request, a preset or the settings file writes it), in
        range; a ValueError naming `name` (the field's own by default) says why not."""
        name, aliases = name or self.name, dict(self.aliases)
        if self.kind is not tuple:
            value = _number(raw, self.kind)
        elif self.items == "bias":
            value = _biases(raw, name)
        elif self.items == "name" and isinstance(raw, str):  # llama-server's string of one-letter names
            value = tuple(aliases.get(c, c) for c in raw)
        elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
            value = tuple(aliases.get(item, item) for item in raw) if self.items == "name" else tuple(raw)
        else:
            raise ValueError(f"'{name}' must be a list of strings; got {_shown(raw)}")
        problem = self.problem(value, quoted=name)
        if problem is not None:
            raise ValueError(problem)
        return value

    def to_json(self, value):
        """`value` as JSON writes it, which `from_json` reads back (a bias list as OpenAI's map of
        token id to bias, a text's key its text; a ban as llama-server's `false`)."""
        if self.items == "bias":
            return {str(key): (False if bias == -math.inf else bias) for key, bias in value}
        return list(value) if self.kind is tuple else value

    def to_text(self, value) -> str:
        """`value` as one line of JSON (a settings file's value, a pane's field)."""
        return json.dumps(self.to_json(value), ensure_ascii=False)

    def from_text(self, text: str):
        """A value written by `to_text`; a ValueError says what is wrong with it."""
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise ValueError(f"'{self.name}' is not valid JSON: {e}") from None
        return self.from_json(raw)


def _text_problem(f: SamplingField, item) -> str | None:
    if not isinstance(item, str) or not 1 <= len(item) <= MAX_TEXT:
        return f"must be a text of 1 to {MAX_TEXT} characters; got {_shown(item)}"
    return None


def _name_problem(f: SamplingField, item) -> str | None:
    if item not in f.choices:
        return f"must be one of {', '.join(f.choices)}; got {_shown(item)}"
    return None


def _bias_problem(f: SamplingField, item) -> str | None:
    if not isinstance(item, tuple) or len(item) != 2:
        return f"must be a (token, bias) pair; got {_shown(item)}"
    key, bias = item
    if isinstance(key, bool) or not (
        (isinstance(key, int) and 0 <= key <= MAX_INT) or (isinstance(key, str) and 1 <= len(key) <= MAX_BIAS_TEXT)
    ):
        return f"must name a token by its id (a whole number of at least 0) or by a text of 1 to {MAX_BIAS_TEXT} characters; got {_shown(key)}"
    if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not (-MAX_BIAS <= bias <= MAX_BIAS or bias == -math.inf):
        return f"must have a bias between {-MAX_BIAS:g} and {MAX_BIAS:g} (or false, a ban); got {_shown(bias)}"
    return None


_ITEM_PROBLEMS = {"text": _text_problem, "name": _name_problem, "bias": _bias_problem}


def _number(raw, kind: type):
    """A number of JSON as the knob's kind (3.0 is a whole number); anything else is left for the range check to refuse."""
    if kind is int and isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw) if abs(raw) < 2**1000 else math.inf
    return raw


def _biases(raw, name: str) -> tuple:
    """OpenAI's map of token id to bias, or llama-server's list of [token id or text, bias] pairs; a
    key of digits is a token id, any other a text whose tokens each get the bias; `false` bans."""
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(isinstance(p, list) and len(p) == 2 for p in raw):
        pairs = [tuple(p) for p in raw]
    else:
        raise ValueError(f"'{name}' must be an object of token id to bias, or a list of [token, bias] pairs; got {_shown(raw)}")
    return tuple((_bias_key(key), _bias_value(bias)) for key, bias in pairs)


def _bias_key(key):
    """A key of digits (OpenAI's token ids are the map's keys) is an id; any other a text."""
    if isinstance(key, str) and key.isascii() and key.removeprefix("-").isdigit():
        return int(key)
    return key


def _bias_value(bias):
    if bias is False:
        return -math.inf
    return float(bias) if isinstance(bias, int) and not isinstance(bias, bool) and abs(bias) < 2**1000 else bias


def _shown(value) -> str:
    if isinstance(value, (dict, list, tuple)):
        return f"{type(value).__name__} of {len(value)} items"
    return json.dumps(value[:40] if isinstance(value, str) else value, default=repr)[:40]


KNOB = "knob"  # the key of a SamplingParams field's metadata that holds its SamplingField


def knob(default, label: str, lo: float, hi: float, help: str, **details) -> dataclasses.Field:
    """A SamplingParams field declared with what its users see of it (SamplingField's `details`)."""
    declared = SamplingField("", label, type(default), lo, hi, help, **details)
    return dataclasses.field(default=default, metadata={KNOB: declared})


def knobs(cls: type) -> tuple[SamplingField, ...]:
    """The knobs declared on `cls`'s fields, in their order, each named after its field."""
    return tuple(dataclasses.replace(f.metadata[KNOB], name=f.name) for f in dataclasses.fields(cls) if KNOB in f.metadata)
