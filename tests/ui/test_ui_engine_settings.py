"""The engine panel's llama.cpp settings, typed and clicked into the real widgets: what the build runs
on, where the model went and the pool's memory are shown; a change reaches llama.cpp on Apply; what
the build cannot honour falls back with a notice, and what no build can is refused; every setting is
labelled from the table, and KV reuse, its RAM cache and backend sampling are applied and saved."""

from __future__ import annotations

import pytest
from helpers import user
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QCheckBox, QLabel
from ui_fixtures import until

from app.client import EngineClient
from app.engine.config_fields import CONFIG_FIELDS, FIELDS
from app.engine.params import GPU_LAYERS_ALL, CacheType, EngineConfig, FlashAttn
from app.engine.sampling.params import SamplingParams
from app.ui.docks.engine_panel import EnginePanel
from app.ui.settings import AppSettings

pytestmark = pytest.mark.gui


@pytest.fixture
def panel(loop, qtbot, model_path):
    # one thread, as open_window's: two spin at llama.cpp's barriers, tens of times slower on busy cores
    client = EngineClient(EngineConfig(model_path=model_path, n_ctx=2048, n_batch=128, capacity=2, n_threads=1))
    loop.run_until_complete(client.start())
    panel = EnginePanel(client)
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    if panel.error_box:
        panel.error_box.close()
    loop.run_until_complete(client.close())


def choose(qtbot, combo, text: str) -> None:
    """Pick an item of a combo box by typing its name, as a keyboard user does."""
    combo.setFocus()
    qtbot.keyClicks(combo, text)
    assert combo.currentText() == text


def type_number(qtbot, spin, text: str) -> None:
    qtbot.mouseClick(spin.lineEdit(), Qt.MouseButton.LeftButton)
    qtbot.keyClick(spin, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(spin, text)
    qtbot.keyClick(spin, Qt.Key.Key_Tab)


async def click_apply(qtbot, panel) -> None:
    panel.status.setText("")
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    await until(lambda: panel.status.text() and panel.status.text() != "loading…", what="the reload")


def test_the_panel_shows_the_build_the_placement_and_the_pool(panel):
    facts = panel.model_facts.text()
    assert "Build: CPU only · CPU features:" in facts
    assert "KV pool: 2048 cells, 45.0 MiB (as set)" in facts  # 2048 × 23,040 bytes
    assert "0/31 layers on a GPU · weights: CPU_Mapped" in facts
    assert "K f16, V f16, flash attention on" in facts  # auto: llama.cpp turned it on for the CPU
    assert panel.gpu_layers.placeholderText() == "automatic: 0 (CPU-only build)"
    assert panel.n_ctx.value() == 2048 and panel.flash_attn.currentText() == "auto"
    assert panel.kv_unified.currentText() == "automatic"
    # streams of 1,024 cells, until a chat outgrows one
    assert "KV layout: a stream per sequence, 2 × 1024 cells (automatic: one pool when a chat outgrows its stream)" in facts


def test_q8_0_cache_flash_attention_and_threads_reach_llama_cpp(loop, qtbot, panel):
    async def scenario():
        choose(qtbot, panel.flash_attn, "on")
        choose(qtbot, panel.cache_type_k, "q8_0")
        choose(qtbot, panel.cache_type_v, "q8_0")
        type_number(qtbot, panel.n_threads_batch, "2")
        qtbot.mouseClick(panel.use_mmap, Qt.MouseButton.LeftButton)  # off: read into memory
        await click_apply(qtbot, panel)
        assert panel.status.text() == "reloaded" and panel.last_error == ""
        config, info = panel.client.config, panel.client.model_info
        assert (config.flash_attn, config.cache_type_k, config.cache_type_v) == (FlashAttn.ON, CacheType.Q8_0, CacheType.Q8_0)
        assert config.n_threads_batch == 2 and config.use_mmap is False
        assert (info.cache_type_k, info.cache_type_v, info.flash_attn) == ("q8_0", "q8_0", "on")
        assert info.weights[0][0] == "CPU"  # not mapped
        assert "KV pool: 2048 cells, 23.9 MiB" in panel.model_facts.text()  # 34/64 of f16's 45.0 MiB

    loop.run_until_complete(scenario())


def test_gpu_layers_on_a_cpu_only_build_fall_back_with_a_notice_in_the_panel(loop, qtbot, panel):
    async def scenario():
        qtbot.keyClicks(panel.gpu_layers, "all")
        await click_apply(qtbot, panel)
        assert panel.status.text() == "reloaded"
        assert panel.client.config.gpu_layers == GPU_LAYERS_ALL and panel.client.model_info.gpu_layers == 0
        assert "GPU layers all ignored: this llama.cpp build is CPU only" in panel.model_facts.text()

    loop.run_until_complete(scenario())


def test_a_quantized_v_cache_without_flash_attention_is_refused(loop, qtbot, panel):
    async def scenario():
        choose(qtbot, panel.flash_attn, "off")
        choose(qtbot, panel.cache_type_v, "q4_0")
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
        await until(lambda: panel.last_error, what="the refusal")
        assert panel.last_error.startswith("a quantized V cache (q4_0) needs flash attention")
        assert panel.error_box.isVisible() and panel.error_box.windowTitle() == "These settings cannot be used"
        assert panel.client.config.cache_type_v is CacheType.F16  # the engine was not touched

    loop.run_until_complete(scenario())


def test_bad_gpu_layers_text_is_refused(loop, qtbot, panel):
    async def scenario():
        qtbot.keyClicks(panel.gpu_layers, "lots")
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
        await until(lambda: panel.last_error, what="the refusal")
        assert panel.last_error == "GPU layers: expected a number of layers or 'all', got 'lots'"

    loop.run_until_complete(scenario())


def test_the_context_field_takes_a_size_or_automatic(loop, qtbot, panel):
    async def scenario():
        type_number(qtbot, panel.n_ctx, "1024")
        await click_apply(qtbot, panel)
        assert panel.client.model_info.n_ctx == 1024 and "(as set)" in panel.model_facts.text()
        type_number(qtbot, panel.n_ctx, "0")
        assert panel.n_ctx.text() == "automatic"
        await click_apply(qtbot, panel)
        info = panel.client.model_info
        assert info.n_ctx == 16384 and info.pool_reason == "automatic: 2 × the training context 8192"
        assert "KV pool: 16384 cells, 360.0 MiB (automatic: 2 × the training context 8192)" in panel.model_facts.text()
        # a stream each, which decodes faster, until a chat outgrows its stream
        layout = "a stream per sequence, 2 × 8192 cells (automatic: one pool when a chat outgrows its stream)"
        assert f"KV layout: {layout}" in panel.model_facts.text()
        choose(qtbot, panel.kv_unified, "one pool (-kvu)")
        await click_apply(qtbot, panel)
        assert panel.client.config.kv_unified is True
        assert "KV layout: one pool (as set)" in panel.model_facts.text()

    loop.run_until_complete(scenario())


def test_every_setting_is_in_the_panel_with_the_tables_label_and_help(panel):
    shown = {label.text() for label in panel.findChildren(QLabel)} | {box.text() for box in panel.findChildren(QCheckBox)}
    assert [field.label for field in CONFIG_FIELDS if field.label not in shown] == []
    assert panel.cache_ram_mib.toolTip() == FIELDS["cache_ram_mib"].tooltip
    assert panel.cache_ram_mib.toolTip().startswith("-cram, --cache-ram: host memory for KV cells evicted")
    assert panel.kv_reuse.toolTip().startswith("--no-kv-reuse: ")
    assert panel.backend_sampling.toolTip().startswith("--backend-sampling: ")


def test_kv_reuse_its_ram_cache_and_backend_sampling_are_applied_and_saved(loop, qtbot, panel, tmp_path):
    settings = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    panel.sigConfigApplied.connect(settings.set_engine_config)  # as the window keeps what was applied
    greedy = SamplingParams(temperature=0.0, max_tokens=2)

    async def scenario():
        assert panel.kv_reuse.isChecked() and panel.cache_ram_mib.text() == "8192 MiB"
        assert not panel.backend_sampling.isChecked()
        type_number(qtbot, panel.cache_ram_mib, "512")
        qtbot.mouseClick(panel.backend_sampling, Qt.MouseButton.LeftButton)
        await click_apply(qtbot, panel)
        assert panel.status.text() == "reloaded"
        config = panel.client.config
        assert (config.kv_reuse, config.cache_ram_mib, config.backend_sampling) == (True, 512, True)

        type_number(qtbot, panel.cache_ram_mib, "0")
        assert panel.cache_ram_mib.text() == "none"
        qtbot.mouseClick(panel.kv_reuse, Qt.MouseButton.LeftButton)
        assert not panel.cache_ram_mib.isEnabled()  # only reused cells are kept in RAM
        await click_apply(qtbot, panel)
        config = panel.client.config
        assert (config.kv_reuse, config.cache_ram_mib, config.backend_sampling) == (False, 0, True)
        # the same prompt twice, drawn in llama.cpp's graph: nothing kept for the second
        first, again = [(await panel.client.complete(user("Hi"), greedy)).stats for _ in range(2)]
        assert first.gen_tokens == again.gen_tokens == 2 and again.cached_tokens == 0
        saved = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
        assert saved.engine_config("other.gguf") == config

    loop.run_until_complete(scenario())
