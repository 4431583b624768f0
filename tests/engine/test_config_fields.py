"""The engine's settings described once (app/engine/config_fields.py): every EngineConfig field is in
the table, each flag parses to its field, and the settings file keeps every field, older files too."""

from __future__ import annotations

from dataclasses import fields

import pytest
from PySide6.QtCore import QSettings

import app.bench
from app.cli import build_parser, engine_overrides, main
from app.engine.config_fields import CONFIG_FIELDS
from app.engine.config_fields import FIELDS as FLAGS_BY_NAME
from app.engine.params import (
    GPU_LAYERS_ALL,
    CacheType,
    EngineConfig,
    FlashAttn,
    OverflowPolicy,
    Policy,
    ServingMode,
    SpecType,
    default_threads,
)
from app.ui.settings import AppSettings
from app.workspace.workspace import MAX_PANES

DEFAULT = EngineConfig("default.gguf", capacity=MAX_PANES)  # what the window starts from
# every field away from its default
CHANGED = EngineConfig(
    model_path="/models/a, b.gguf",  # a comma, which QSettings would split a list at
    n_ctx=3072,
    n_batch=64,
    n_ubatch=256,
    capacity=3,
    n_threads=default_threads() + 1,
    mode=ServingMode.SEQUENTIAL,
    static_window_ms=20.0,
    kv_reuse=False,
    kv_unified=True,
    overflow=OverflowPolicy.TRUNCATE,
    policy=Policy.SHORTEST_FIRST,
    itl_target_ms=87.5,
    gpu_layers=12,
    main_gpu=1,
    flash_attn=FlashAttn.ON,
    cache_type_k=CacheType.Q8_0,
    cache_type_v=CacheType.Q4_0,
    use_mlock=True,
    use_mmap=False,
    n_threads_batch=2,
    cache_ram_mib=512,
    backend_sampling=True,
    spec_type=SpecType.NGRAM,
    spec_draft_n_max=8,
    spec_draft_n_min=2,
    spec_draft_model="/models/small, draft.gguf",
    spec_draft_p_min=0.25,
    mmproj="/models/mmproj, vision.gguf",
    chat_template_file="/templates/mine, 2.jinja",
)
# what a flag given alone sets beside its own field (-md alone drafts with that model)
IMPLIED = {"spec_draft_model": {"spec_type": SpecType.DRAFT}}


@pytest.mark.unit
def test_every_engine_config_field_is_described_once():
    names = [field.name for field in CONFIG_FIELDS]
    assert sorted(names) == sorted(f.name for f in fields(EngineConfig)) and len(set(names)) == len(names)
    assert all(field.label and field.help for field in CONFIG_FIELDS)
    flags = [flag for field in CONFIG_FIELDS for flag in field.flags]
    assert len(set(flags)) == len(flags)


@pytest.mark.unit
def test_the_changed_config_changes_every_field():
    assert [f.name for f in fields(EngineConfig) if getattr(CHANGED, f.name) == getattr(DEFAULT, f.name)] == []
    assert CHANGED.problem() is None


# -- the settings file -----------------------------------------------------------------------------


def _settings(tmp_path) -> AppSettings:
    return AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))


@pytest.mark.model
@pytest.mark.parametrize(
    "config",
    [
        CHANGED,
        DEFAULT,
        CHANGED.with_(gpu_layers=GPU_LAYERS_ALL, kv_unified=False, n_threads_batch=None, itl_target_ms=None),
        CHANGED.with_(gpu_layers=0, kv_unified=None, cache_ram_mib=0, itl_target_ms=150.0),
    ],
    ids=["every field changed", "defaults", "all layers, streams, unset", "no layers, auto layout, no RAM cache"],
)
def test_a_config_comes_back_from_the_settings_file_as_it_went(tmp_path, config):
    settings = _settings(tmp_path)
    settings.set_engine_config(config)
    settings.sync()
    assert _settings(tmp_path).engine_config("default.gguf") == config


@pytest.mark.unit
def test_nothing_saved_gives_the_defaults(tmp_path):
    assert _settings(tmp_path).engine_config("default.gguf") == DEFAULT


OLDER = {  # as the settings file was written before the table: typed values, 0 for unset
    "model_path": "old.gguf",
    "n_ctx": 2048,
    "n_threads": 2,
    "itl_target_ms": 150.0,
    "n_threads_batch": 0,
    "gpu_layers": "all",
    "use_mlock": True,
    "use_mmap": False,
    "kv_unified": "off",
    "mode": "sequential",
}


@pytest.mark.unit
def test_an_older_settings_file_still_reads(tmp_path):
    q = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    q.beginGroup("engine")
    for key, value in {**OLDER, "itl_target_ms": 0.0}.items():
        q.setValue(key, value)
    q.endGroup()
    q.sync()
    config = _settings(tmp_path).engine_config("default.gguf")
    assert config == DEFAULT.with_(
        model_path="old.gguf",
        n_ctx=2048,
        n_threads=2,
        gpu_layers=GPU_LAYERS_ALL,
        use_mlock=True,
        use_mmap=False,
        kv_unified=False,
        mode=ServingMode.SEQUENTIAL,
    )
    q.setValue("engine/itl_target_ms", 150.0)
    q.sync()
    assert _settings(tmp_path).engine_config("default.gguf").itl_target_ms == 150.0


@pytest.mark.unit
def test_an_unreadable_value_keeps_its_default_and_the_rest_still_read(tmp_path):
    q = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    bad = {"n_ctx": "lots", "gpu_layers": "-3", "flash_attn": "maybe", "mode": "parallel", "main_gpu": "-1", "model_path": ""}
    for key, value in {**bad, "n_batch": "64", "kv_reuse": "false"}.items():
        q.setValue(f"engine/{key}", value)
    q.sync()
    assert _settings(tmp_path).engine_config("default.gguf") == DEFAULT.with_(n_batch=64, kv_reuse=False)


# -- the command line ------------------------------------------------------------------------------

FLAGGED = [field for field in CONFIG_FIELDS if field.flags]


def _argument(field) -> list[str]:
    """The words after a flag that set CHANGED's value: none for a switch, else a choice or the text."""
    value = getattr(CHANGED, field.name)
    if field.switch is not None:
        assert field.switch == value
        return []
    words = [w for w in field.text.choices if field.text.parse(w) == value] or [field.text.format(value)]
    return words[:1]


@pytest.mark.unit
@pytest.mark.parametrize("command", [[], ["serve"], ["bench"]], ids=["window", "serve", "bench"])
@pytest.mark.parametrize(("field", "flag"), [pytest.param(f, flag, id=flag) for f in FLAGGED for flag in f.flags])
def test_each_flag_parses_to_its_field(command, field, flag):
    args = build_parser().parse_args([*command, flag, *_argument(field)])
    assert engine_overrides(args) == {field.name: getattr(CHANGED, field.name), **IMPLIED.get(field.name, {})}


@pytest.mark.unit
def test_every_flag_and_its_help_are_in_every_commands_help(capsys):
    for command in ([], ["serve"], ["bench"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        for field in FLAGGED:
            assert all(flag in shown for flag in field.flags)
            assert " ".join(field.described().split()) in shown or field.name == "n_ctx"  # bench says what its default is


@pytest.mark.unit
def test_help_says_each_default_from_its_value_never_by_hand(capsys, monkeypatch):
    for field in CONFIG_FIELDS:
        assert "default" not in field.help, f"{field.name}'s help says a default by hand"
    monkeypatch.setattr(EngineConfig, "spec_draft_n_max", 11)  # the field's default, changed
    monkeypatch.setattr(EngineConfig, "n_batch", 96)
    monkeypatch.setattr(EngineConfig.__dataclass_fields__["spec_draft_n_max"], "default", 11)
    for command in (["serve"], ["bench"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert "the most tokens drafted at once (default: 11)" in shown
        assert "--batch BATCH token budget of a decode step while replies are generating (default: 96)" in shown
    assert f"(default: all cores, {default_threads()} here)" in FLAGS_BY_NAME["n_threads"].described()
    assert FLAGS_BY_NAME["kv_unified"].described().endswith("(default: auto)")
    assert FLAGS_BY_NAME["use_mlock"].described() == FLAGS_BY_NAME["use_mlock"].help  # a switch: its flag says it


@pytest.mark.unit
def test_unset_words_on_the_command_line():
    args = build_parser().parse_args(["-tb", "auto", "-ngl", "auto", "--mmproj", "auto"])
    assert engine_overrides(args) == {"n_threads_batch": None, "gpu_layers": None, "mmproj": None}
    assert engine_overrides(build_parser().parse_args(["serve", "-mm", "none"])) == {"mmproj": "none"}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-t", "0"], "argument -t/--threads: must be 1 or more"),
        (["-c", "lots"], "argument -c/--ctx: expected a whole number, got 'lots'"),
        (["--backend-sampling", "true"], "argument --backend-sampling: invalid choice: 'true'"),
    ],
)
def test_bad_flag_values_say_why(flags, message, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(flags)
    assert message in capsys.readouterr().err


class Captured(Exception):
    pass


@pytest.mark.unit
def test_bench_takes_kv_reuse_threads_and_ctx_from_the_engine_flags(monkeypatch):
    """bench's --no-kv-reuse, -t and -c are the engine flags, and reach its own settings (the label, the
    pool sized for the conversations unless -c says otherwise)."""
    seen = []

    async def capture(settings, progress=None, trace=None):
        seen.append(settings)
        raise Captured

    monkeypatch.setattr(app.bench, "run_bench", capture)
    with pytest.raises(Captured):
        main(["bench", "--parallel", "2", "--no-kv-reuse", "-t", "1", "-c", "0", "-ctk", "q8_0"])
    (settings,) = seen
    assert (settings.kv_reuse, settings.n_threads, settings.n_ctx) == (False, 1, 0)
    assert settings.label == "continuous, no KV reuse" and settings.engine_settings == (("cache_type_k", CacheType.Q8_0),)
    seen.clear()
    with pytest.raises(Captured):
        main(["bench", "--parallel", "2"])
    assert (seen[0].kv_reuse, seen[0].n_threads, seen[0].n_ctx, seen[0].engine_settings) == (True, None, None, ())
