"""Which thinking format a chat template teaches (as llama.cpp's common/chat.cpp tells them: a few
families by their source, the others by rendering the template with and without thoughts), whether
a prompt opens or closes the reply's thoughts, and how earlier turns' thoughts go back to it."""

import pytest
import think_templates

from app.engine.prompt.chat_template import ChatTemplate
from app.engine.thinking import (
    APRIEL,
    GRANITE_3_3,
    HARMONY,
    MAGISTRAL,
    SEED,
    THINK_TAGS,
    History,
    detect_thinking,
)

pytestmark = pytest.mark.unit

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def templates():
    made = {family: ChatTemplate(source, model=family) for family, source in think_templates.FAMILIES.items()}
    yield made
    for template in made.values():
        template.close()


def _render(template: ChatTemplate):
    def render(messages, add_generation_prompt, kwargs, tools):
        return template.render(messages, add_generation_prompt, tools=tools, kwargs=kwargs)

    return render


def _detect(template: ChatTemplate):
    return detect_thinking(template.source, _render(template))


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("r1", THINK_TAGS),
        ("qwen3", THINK_TAGS),
        ("magistral", MAGISTRAL),
        ("seed", SEED),
        ("harmony", HARMONY),
        ("granite", GRANITE_3_3),
        ("apriel", APRIEL),
    ],
)
def test_each_familys_template_tells_its_thinking_format(templates, family, expected):
    assert _detect(templates[family]) == expected


def test_a_template_that_never_thinks_has_no_format(templates):
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    template = ChatTemplate(chatml)
    try:
        assert _detect(template) is None
    finally:
        template.close()
    assert detect_thinking(None, _render(templates["r1"])) is None  # no template at all: the built-in ChatML


def test_markers_found_by_rendering_a_template_nobody_listed():
    # a family of its own markers: found where an assistant turn's thoughts sit, and by the switch
    source = (
        "{% for m in messages %}[{{ m.role }}]{% if m.reasoning_content %}<reflect>{{ m.reasoning_content }}</reflect>"
        "{% endif %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    template = ChatTemplate(source)
    try:
        found = _detect(template)
    finally:
        template.close()
    assert (found.start, found.end, found.closing) == ("<reflect>", "</reflect>", "\n</reflect>\n\n")


def test_the_generation_prompt_opens_closes_or_leaves_the_thoughts(templates):
    r1, qwen3 = templates["r1"], templates["qwen3"]
    on = r1.render(HI)
    off = r1.render(HI, kwargs={"enable_thinking": False})
    assert THINK_TAGS.opened_by(on) and not THINK_TAGS.closed_by(on)
    assert THINK_TAGS.closed_by(off) and not THINK_TAGS.opened_by(off)
    on, off = qwen3.render(HI), qwen3.render(HI, kwargs={"enable_thinking": False})
    assert not THINK_TAGS.opened_by(on) and not THINK_TAGS.closed_by(on)  # the model opens them itself
    assert THINK_TAGS.closed_by(off)
    assert HARMONY.opened_by(templates["harmony"].render(HI))
    assert APRIEL.opened_by(templates["apriel"].render(HI))  # thoughts open the reply, unmarked


def test_earlier_thoughts_go_back_as_each_template_reads_them(templates):
    turn = {"role": "assistant", "content": "Four.", "reasoning_content": "Two and two make four."}
    chat = [*HI, turn, {"role": "user", "content": "and 3+3?"}]
    for family, fmt in (("qwen3", THINK_TAGS), ("harmony", HARMONY), ("magistral", MAGISTRAL), ("seed", SEED)):
        shown = [fmt.for_template(m) for m in chat]
        text = templates[family].render(shown)
        assert "Two and two make four." in text and "Four." in text, family
    assert HARMONY.for_template(turn)["thinking"] == turn["reasoning_content"]
    assert MAGISTRAL.history is History.BLOCKS
    assert MAGISTRAL.for_template(turn)["content"] == [
        {"type": "thinking", "thinking": "Two and two make four."},
        {"type": "text", "text": "Four."},
    ]
    assert THINK_TAGS.for_template(HI[0]) is HI[0]  # a user turn as it is


def test_template_variables_reach_the_template(templates):
    assert "Reasoning: high" in templates["harmony"].render(HI, kwargs={"reasoning_effort": "high"})
    assert "Reasoning: medium" in templates["harmony"].render(HI)
    assert "<think></think>" in templates["granite"].render(HI, kwargs={"thinking": True})


def test_the_prompt_builder_gives_earlier_thoughts_back_and_tells_the_reply_how_it_thinks(templates):
    from app.engine.params import OverflowPolicy
    from app.engine.prompt.builder import PromptBuilder
    from app.engine.sampling.params import GREEDY
    from app.engine.sequence import Request

    def tokenize(text, add_special=True):
        return [ord(c) for c in text]

    chat = (
        *HI,
        {"role": "assistant", "content": "Four.", "reasoning_content": "Two and two make four."},
        {"role": "user", "content": "and 3+3?"},
    )
    builder = PromptBuilder(templates["harmony"], tokenize, 4096, OverflowPolicy.STOP)
    prompt = builder.prepare(Request("r", GREEDY, messages=chat))
    text = "".join(map(chr, prompt.tokens))
    assert "<|channel|>analysis<|message|>Two and two make four.<|end|>" in text  # as gpt-oss's `thinking`
    assert prompt.thinking == HARMONY and prompt.opened and not prompt.closed
    assert "".join(map(chr, prompt.close_tokens)) == HARMONY.closing
    # a budget of nothing: the closing marker ends the prompt, and the answer comes
    closed = builder.prepare(Request("r", GREEDY, messages=chat, reasoning_budget=0))
    assert closed.tokens == prompt.tokens + list(prompt.close_tokens) and closed.closed and not closed.opened
    plain = PromptBuilder(ChatTemplate(None), tokenize, 4096, OverflowPolicy.STOP).prepare(Request("r", GREEDY, messages=chat))
    assert plain.thinking is None and "Two and two" not in "".join(map(chr, plain.tokens))


def test_a_probe_stopped_for_its_time_stops_the_probing():
    from app.engine.thinking import ProbeFailed

    calls = []

    def looping(messages, add_generation_prompt, kwargs, tools):
        calls.append(messages)
        raise ProbeFailed("did not finish within 2 s")

    assert detect_thinking("{{ messages }}", looping) is None and len(calls) == 1
    assert detect_thinking("<think>{{ m }}</think>", looping) == THINK_TAGS  # then its source alone tells
