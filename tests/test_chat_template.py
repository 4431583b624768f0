"""Rendering a conversation with the model's chat template."""

from app.engine.chat_template import CHATML, ChatTemplate


def test_chat_template_that_cannot_be_parsed_falls_back_to_chatml():
    template = ChatTemplate("{% for m in messages %}{{ m.content ")  # unterminated
    assert template.source == CHATML
    assert template.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_default_models_own_template_renders_its_default_system_prompt(model_path):
    from app.engine.backend import LlamaBackend
    from app.engine.params import EngineConfig

    backend = LlamaBackend(EngineConfig(model_path, n_ctx=512, capacity=1, n_threads=1))
    try:
        template = ChatTemplate(backend.chat_template, backend.bos_text, backend.eos_text)
    finally:
        backend.close()
    text = template.render([{"role": "user", "content": "hi"}])
    assert template.source != CHATML
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
