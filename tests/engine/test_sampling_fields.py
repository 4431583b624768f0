"""Each sampling knob is declared once (on its field of app/engine/sampling/params.py), and every surface reads it: the
engine's checks and greedy path, the pane's sliders and settings file, the API, the remote body."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.engine.sampling.fields import SamplingField
from app.engine.sampling.params import (
    ADVANCED_FIELDS,
    BY_NAME,
    GREEDY,
    PANE_FIELDS,
    SAMPLER_ORDER,
    SAMPLING_FIELDS,
    SLIDER_FIELDS,
    SamplingParams,
)
from app.remote import Endpoint, RemoteClient
from app.server.protocol import BadRequest, sampling
from app.workspace.pane_params import PaneParams

pytestmark = pytest.mark.unit


def test_every_field_is_a_sampling_param_of_its_kind_with_a_default_in_its_range():
    params = {f.name: f for f in dataclasses.fields(SamplingParams)}
    for f in SAMPLING_FIELDS:
        assert f.name in params, f"{f.name} is declared but SamplingParams has no such field"
        default = getattr(SamplingParams(), f.name)
        assert type(default) is f.kind and f.problem(default) is None, f.name
        assert f.kind is not tuple or f.items in ("text", "name", "bias"), f.name
        if f.slider is not None:
            assert f.lo <= f.slider.lo < f.slider.hi <= f.hi, f.name  # the slider spans part of the one range
            assert f.slider.lo <= getattr(PaneParams(), f.name) <= f.slider.hi


def test_every_pane_field_is_a_pane_param_with_the_engine_s_default():
    assert {f.name for f in PANE_FIELDS} == {f.name for f in SLIDER_FIELDS + ADVANCED_FIELDS}
    for f in PANE_FIELDS:
        assert getattr(PaneParams(), f.name) == getattr(SamplingParams(), f.name), f.name
    advanced = dict(
        dry_multiplier=0.8, xtc_probability=0.5, mirostat=2, logit_bias=((5, -100.0), ("hi", 2.0)), samplers=("top_k",)
    )
    pane = PaneParams(temperature=0.3, top_k=7, top_p=0.5, min_p=0.2, repeat_penalty=1.4, max_tokens=99, seed=5, **advanced)
    assert pane.sampling() == SamplingParams(
        temperature=0.3, top_k=7, top_p=0.5, min_p=0.2, repeat_penalty=1.4, max_tokens=99, seed=5, **advanced
    )


def test_a_sampler_that_can_move_the_likeliest_token_keeps_the_chain_at_temperature_0():
    assert not GREEDY.greedy_needs_chain and GREEDY.is_greedy
    for f in SAMPLING_FIELDS:
        if f.kind is tuple and f.neutral is not None:  # a bias: any entry moves tokens
            assert GREEDY.with_(**{f.name: ((5, -1.0),)}).greedy_needs_chain, f.name
        elif f.neutral is not None:  # a penalty, DRY, XTC, typical-p: moved off its neutral value, greedy must run the chain
            moved = f.neutral + (0.5 if f.neutral + 0.5 <= f.hi else -0.5)
            assert GREEDY.with_(**{f.name: moved}).greedy_needs_chain, f.name
        else:  # a cut (top-k/p, min-p) never changes which token is likeliest
            assert not GREEDY.with_(**{f.name: getattr(SamplingParams(), f.name)}).greedy_needs_chain, f.name


def test_temperature_0_is_greedy_unless_something_still_draws_at_random():
    assert GREEDY.with_(mirostat=2, xtc_probability=1.0).is_greedy  # XTC always: it removes the top, then greedy
    for drawn in (dict(xtc_probability=0.5), dict(dynatemp_range=0.3), dict(samplers=("top_k", "min_p"))):
        assert not GREEDY.with_(**drawn).is_greedy, drawn  # llama.cpp draws at 1 without its temperature sampler
    assert GREEDY.with_(xtc_probability=0.5, xtc_threshold=0.6).is_greedy  # a threshold above 0.5 removes nothing


NUMBERS = tuple(f for f in SAMPLING_FIELDS if f.kind is not tuple)
LISTS = tuple(f for f in SAMPLING_FIELDS if f.kind is tuple)


@pytest.mark.parametrize("f", NUMBERS, ids=lambda f: f.name)
def test_the_engine_and_the_api_refuse_the_same_values(f: SamplingField):
    for value in (f.lo, f.hi, f.kind(f.lo + (f.hi - f.lo) / 2)):
        assert SamplingParams(**{f.name: value}).problem() is None
        assert getattr(sampling({f.api[0]: value}), f.name) == value
    for value in (f.lo - 1, f.hi + 1):
        assert f.name in SamplingParams(**{f.name: value}).problem()
        with pytest.raises(BadRequest, match=f"'{f.api[0]}' must be between"):
            sampling({f.api[0]: value})


def test_an_api_alias_sets_the_field_and_a_remote_endpoint_gets_every_slider():
    assert sampling({"repetition_penalty": 1.3}).repeat_penalty == 1.3  # vLLM's name
    assert sampling({"n_predict": 7}).max_tokens == 7 and sampling({"max_tokens": -1}).max_tokens == 2**31 - 1
    body = RemoteClient(Endpoint("http://127.0.0.1:1/v1"))._body([], GREEDY.with_(presence_penalty=0.5))
    for f in SLIDER_FIELDS:
        assert all(body[name] == getattr(GREEDY, f.name) for name in f.sent_as), f.name
    assert body["repeat_penalty"] == body["repetition_penalty"] == 1.0 and body["presence_penalty"] == 0.5
    assert "frequency_penalty" not in body and "repeat_last_n" not in body  # ours by default: the endpoint's own stand
    assert not any(name in body for f in ADVANCED_FIELDS if f.name != "presence_penalty" for name in f.sent_as)
    body = RemoteClient(Endpoint("http://127.0.0.1:1/v1"))._body(
        [], GREEDY.with_(logit_bias=((15, -100.0),), samplers=("top_k",))
    )
    assert body["logit_bias"] == {"15": -100.0} and body["samplers"] == ["top_k"]


LIST_VALUES = {  # (accepted as sent, what it reads as), then refused
    "dry_sequence_breakers": ([(["\n", "."], ("\n", "."))], [[], [""], ["x" * 41], "abc", [1], {"a": 1}]),
    "samplers": (
        [(["top_k", "temperature"], ("top_k", "temperature")), ("kt", ("top_k", "temperature")), ([], ()),
         (["nucleus", "typical", "temp"], ("top_p", "typ_p", "temperature"))],
        [["infill"], "kz", [3], {"top_k": 1}, ["top_k"] * 33],
    ),
    "logit_bias": (
        [({"15": -100, "7": 5.5}, ((15, -100.0), (7, 5.5))), ([[15, False], ["hi", 1]], ((15, -math.inf), ("hi", 1.0))),
         ({}, ())],
        [{"15": 101}, {"15": True}, {"-1": 1}, [[15]], "15", [["", 1]], {"15": "x"}],
    ),
}  # fmt: skip


@pytest.mark.parametrize("f", LISTS, ids=lambda f: f.name)
def test_a_list_is_read_from_the_api_s_forms_and_refused_naming_its_field(f: SamplingField):
    accepted, refused = LIST_VALUES[f.name]
    for sent, value in accepted:
        assert getattr(sampling({f.api[0]: sent}), f.name) == value
        assert SamplingParams(**{f.name: value}).problem() is None
        assert f.from_json(f.to_json(value)) == value  # presets and the settings file write it so
    for sent in refused:
        with pytest.raises(BadRequest, match=f"^'{f.api[0]}") as refusal:
            sampling({f.api[0]: sent})
        assert refusal.value.param == f.api[0]


def test_the_sampler_order_s_default_is_llama_cpp_s():
    assert SamplingParams().samplers == SAMPLER_ORDER == BY_NAME["samplers"].from_json("edskypmxt")


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(NUMBERS), value=st.one_of(st.floats(allow_nan=True), st.integers(-(2**40), 2**40)))
def test_for_any_value_the_engine_accepts_exactly_what_the_api_accepts(field, value):
    assume(not (field.name == "max_tokens" and value == -1))  # the API's "until the context is full"
    if field.kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON's 3.0 is an integer to the API
    try:
        sampling({field.api[0]: value})
        api_ok = True
    except BadRequest:
        api_ok = False
    assert (SamplingParams(**{field.name: value}).problem() is None) == api_ok


def test_a_settings_file_s_knob_out_of_its_range_reads_as_the_default(tmp_path):
    from PySide6.QtCore import QSettings

    from app.ui.settings import AppSettings

    stored = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    advanced = dict(
        dry_multiplier=0.8, dry_sequence_breakers=("\n", "="), xtc_probability=0.5, mirostat=2, mirostat_tau=3.0,
        logit_bias=((15, -100.0), ("hi", 2.5)), samplers=("top_k", "temperature"), top_n_sigma=1.5,
    )  # fmt: skip
    pane = PaneParams(temperature=0.4, top_k=12, repeat_penalty=1.5, max_tokens=64, builtin_template=True, **advanced)
    stored.set_pane_params("c1", pane)
    stored.sync()
    again = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    assert again.pane_params("c1") == pane
    bad = (("temperature", 99.0), ("top_k", -3), ("repeat_penalty", 0.0), ("max_tokens", 0), ("mirostat", 3))
    bad += (("samplers", '["top_k", "nope"]'), ("logit_bias", "{not json"), ("dry_sequence_breakers", "[]"))
    for key, value in bad:
        stored.q.setValue(f"pane-c1/{key}", value)
    loaded = stored.pane_params("c1")
    assert (loaded.temperature, loaded.top_k, loaded.repeat_penalty, loaded.max_tokens) == (0.7, 40, 1.1, 256)
    assert (loaded.mirostat, loaded.samplers, loaded.logit_bias) == (0, SAMPLER_ORDER, ())
    assert loaded.dry_sequence_breakers == SamplingParams().dry_sequence_breakers
    assert loaded.builtin_template and loaded.dry_multiplier == 0.8  # the rest as stored
