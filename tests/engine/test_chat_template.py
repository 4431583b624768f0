"""Rendering a conversation with the model's chat template."""

import pytest

from app.engine.prompt.chat_template import CHATML, ChatTemplate


@pytest.mark.unit
def test_chat_template_that_cannot_be_parsed_falls_back_to_chatml():
    template = ChatTemplate("{% for m in messages %}{{ m.content ")  # unterminated
    assert template.render([{"role": "user", "content": "hi"}]) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert template.source == CHATML and template.stop_strings == ("<|im_end|>", "<|im_start|>")


@pytest.mark.model
def test_the_default_models_own_template_renders_its_default_system_prompt(model_path):
    from app.engine.llama.context import LlamaBackend
    from app.engine.params import EngineConfig

    backend = LlamaBackend(EngineConfig(model_path, n_ctx=512, capacity=1, n_threads=1))
    try:
        template = ChatTemplate(backend.chat_template, backend.vocab.bos_text, backend.vocab.eos_text)
    finally:
        backend.close()
    text = template.render([{"role": "user", "content": "hi"}])
    assert template.source != CHATML
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.unit
def test_the_chatml_fallback_ends_a_reply_at_its_markers_written_as_text():
    from app.engine.params import OverflowPolicy
    from app.engine.prompt.builder import PromptBuilder
    from app.engine.sampling.params import SamplingParams
    from app.engine.sequence import Request, Sequence
    from app.engine.stats import RequestStats

    def tokenize(text: str, add_special: bool = True) -> list[int]:
        return list(text.encode())

    chat = Request("r", SamplingParams(stop=("END",)), messages=({"role": "user", "content": "hi"},))
    for source, stops in ((None, ("<|im_end|>", "<|im_start|>")), ("{{ messages[0]['content'] }}", ())):
        builder = PromptBuilder(ChatTemplate(source), tokenize, 4096, OverflowPolicy.STOP)
        assert builder.prepare(chat).stop == stops
        assert builder.prepare(Request("p", SamplingParams(), prompt="hi")).stop == ()  # plain text: no chat markers
    seq = Sequence(chat, [1], RequestStats("r"), 1, ChatTemplate(None).stop_strings)
    assert seq.stream.feed(b"Sure.<|im_") == "Sure." and seq.stream.feed(b"end|>\n<|im_start|>user") == ""
    assert seq.stream.stopped and seq.stream.text == "Sure."
