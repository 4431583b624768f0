"""Presets, headless: saved under a name, applied to a pane or to all, the built-in ones, written to and
read from JSON; a bad file is refused whole, saying why, and changes nothing."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_workspace import make

from app.engine.sampling.params import PANE_FIELDS, SamplingParams
from app.workspace.pane_params import PaneParams
from app.workspace.presets import BUILTIN, PresetBook, PresetError, read_presets

pytestmark = pytest.mark.unit


class Memory:
    saved_presets = ""


def test_the_built_in_presets_are_whole_and_leave_the_pane_s_other_settings():
    assert [p.name for p in BUILTIN] == ["Precise", "Balanced", "Creative", "Deterministic"]
    pane = PaneParams(system_prompt="Be brief.", max_tokens=99, seed=4, temperature=1.7, dry_multiplier=2.0)
    for preset in BUILTIN:
        applied = preset.applied_to(pane)
        assert SamplingParams(**{k: getattr(applied, k) for k in preset.values}).problem() is None
        assert (applied.system_prompt, applied.max_tokens, applied.seed) == ("Be brief.", 99, 4), preset.name
        assert set(preset.values) == {f.name for f in PANE_FIELDS} - {"max_tokens"}  # each sampler: no leftovers
    assert BUILTIN[1].applied_to(pane).sampling() == PaneParams(system_prompt="Be brief.", max_tokens=99, seed=4).sampling()
    deterministic = BUILTIN[3].applied_to(pane).sampling()
    assert deterministic.is_greedy and not deterministic.greedy_needs_chain  # the fast path: one argmax
    creative = BUILTIN[2].applied_to(pane)
    assert creative.xtc_probability > 0 and creative.dry_multiplier > 0 and creative.temperature >= 1


def test_a_saved_preset_is_kept_replaced_deleted_and_read_again_from_the_memory():
    memory = Memory()
    book = PresetBook(memory)
    heard = []
    book.changed.connect(lambda: heard.append(1))
    pane = PaneParams(temperature=0.2, logit_bias=((15, -100.0), ("hi", 3.0)), samplers=("top_k", "temperature"), mirostat=2)
    book.save("  Mine ", pane)
    assert [p.name for p in book.saved] == ["Mine"] and heard == [1]
    assert book.get("Mine").applied_to(PaneParams()) == PaneParams(**{f.name: getattr(pane, f.name) for f in PANE_FIELDS})
    assert PresetBook(memory).get("Mine") == book.get("Mine")  # a new start reads it
    book.save("Mine", pane.with_(temperature=0.9))
    assert len(book.saved) == 1 and book.get("Mine").values["temperature"] == 0.9
    for bad in ("", " " * 3, "x" * 65, "Creative", "a\nb"):
        with pytest.raises(PresetError):
            book.save(bad, pane)
    with pytest.raises(PresetError, match="built in"):
        book.delete("Balanced")
    book.delete("Mine")
    assert book.saved == () and PresetBook(memory).saved == ()


def test_presets_apply_to_one_pane_or_to_all(tmp_path):
    ws, *_ = make(tmp_path)
    ws.restore(pane_count=3)
    a, b, c = ws.sessions
    for s, prompt in zip(ws.sessions, "xyz", strict=True):
        s.set_params(s.params.with_(system_prompt=prompt))
    ws.apply_preset(BUILTIN[3], a)
    assert a.params.temperature == 0.0 and b.params.temperature == c.params.temperature == 0.7
    ws.apply_preset(BUILTIN[2])
    assert all(s.params.xtc_probability == 0.5 for s in ws.sessions)
    assert [s.params.system_prompt for s in ws.sessions] == ["x", "y", "z"]


def test_an_exported_file_imports_again_and_a_bad_one_changes_nothing():
    book = PresetBook(Memory())
    book.save("Cold", PaneParams(temperature=0.1, logit_bias=((7, -math.inf),)))
    book.save("Loops", PaneParams(dry_multiplier=1.5, dry_sequence_breakers=("\n",)))
    exported = book.export_json()
    assert json.loads(exported)["format"] == "batch-playground presets"

    other = PresetBook(Memory())
    other.save("Loops", PaneParams())  # the file's Loops takes its place
    assert other.import_json(exported) == ("Cold", "Loops")
    assert other.saved == book.saved and other.get("Cold").values["logit_bias"] == ((7, -math.inf),)

    before = other.saved
    bad_files = {
        "{not json": "not JSON",
        '{"format": "something else"}': "not a presets file",
        json.dumps([{"name": "A", "values": {"temperature": 5}}]): "preset “A”: 'temperature' must be a number between 0 and 2",
        json.dumps([{"name": "A", "values": {"warp": 1}}]): "'warp' is not a knob",
        json.dumps([{"name": "A", "values": {"samplers": ["infill"]}}]): "'samplers[0]' must be one of",
        json.dumps([{"name": "Balanced", "values": {}}]): "built-in",
        json.dumps([{"name": "A", "values": {}}, {"name": "A", "values": {}}]): "two presets “A”",
        json.dumps([{"name": "B", "values": {"top_k": 5}}, {"values": {}}]): "preset 2 has no name",
    }
    for text, said in bad_files.items():
        with pytest.raises(PresetError, match=re.escape(said)):
            other.import_json(text)
        assert other.saved == before  # all or nothing: B of the last file was not kept either


@settings(max_examples=80, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda x: st.lists(x) | st.dictionaries(st.text(), x),
        max_leaves=12,
    )
)
def test_any_json_is_read_as_presets_or_refused_with_a_reason(raw):
    try:
        presets = read_presets(json.dumps(raw))
    except PresetError as e:
        assert str(e)
        return
    for preset in presets:
        assert SamplingParams(**preset.values).problem() is None
