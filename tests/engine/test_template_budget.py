"""A model's chat template is untrusted code: it renders in a sandbox process with a budget of time,
characters and memory, fails one request with a message naming it, and the next render works."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine.params import OverflowPolicy
from app.engine.prompt.builder import PromptBuilder
from app.engine.prompt.chat_template import CHATML, RENDER_SECONDS, ChatTemplate, ChatTemplateError
from app.engine.sampling.params import SamplingParams
from app.engine.sequence import Request

pytestmark = pytest.mark.unit


HI = [{"role": "user", "content": "hi"}]
# loops 10^10 times when the first message says so, else writes the message: one template, both ways
LOOPS_ON_REQUEST = (
    "{% if messages[0]['content'] == 'loop' %}{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}{% endif %}{{ messages[0]['content'] }}"
)
WRITES_GIGABYTES = "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}"  # 10^10 characters
SLACK_S = 3.0  # the kill, and a fresh process's start on a busy machine
BUDGET_S = 0.5  # a render's time here (the app gives 2 s): the mechanics, sooner


def _timed(fn):
    start = time.monotonic()
    try:
        return fn(), time.monotonic() - start
    except ChatTemplateError as e:
        return e, time.monotonic() - start


@pytest.fixture
def looping():
    template = ChatTemplate(LOOPS_ON_REQUEST, model="Looper", seconds=BUDGET_S)
    yield template
    template.close()


def test_a_template_that_loops_fails_its_request_in_seconds_and_the_next_render_works(looping):
    error, took = _timed(lambda: looping.render([{"role": "user", "content": "loop"}]))
    assert isinstance(error, ChatTemplateError)
    assert "the chat template of Looper did not finish within 0.5 s" in str(error) and "built-in template" in str(error)
    assert BUDGET_S <= took < BUDGET_S + SLACK_S
    text, took = _timed(lambda: looping.render(HI))  # a fresh process, the template compiled again
    assert text == "hi" and took < SLACK_S


def test_a_template_that_writes_gigabytes_stops_at_its_character_budget():
    template = ChatTemplate(WRITES_GIGABYTES, model="Writer")
    try:
        error, took = _timed(lambda: template.render(HI, max_chars=1_000_000))
    finally:
        template.close()
    assert isinstance(error, ChatTemplateError) and took < RENDER_SECONDS  # stopped by its size, not its time
    assert str(error).startswith("the chat template of Writer was stopped: it wrote more than 1,000,000 characters")


def test_a_template_that_takes_all_memory_hits_the_sandbox_s_limit_not_the_app_s():
    template = ChatTemplate("{{ messages[0]['content'] * (10 ** 11) }}", model="Hog")
    try:
        error, took = _timed(lambda: template.render(HI, max_chars=10**12))
    finally:
        template.close()
    assert isinstance(error, ChatTemplateError) and took < RENDER_SECONDS
    assert "took more memory than a chat template may" in str(error)


def test_a_template_that_raises_rejects_the_conversation_with_its_words():
    template = ChatTemplate("{{ raise_exception('roles must alternate') }}", model="Strict")
    try:
        with pytest.raises(
            ChatTemplateError, match="the chat template of Strict rejected this conversation: roles must alternate"
        ):
            template.render(HI)
    finally:
        template.close()


def test_a_template_s_words_reach_the_client_cut_to_one_kib():
    from app.engine.prompt.worker import CUT_MARK, MAX_ERROR_BYTES

    template = ChatTemplate("{{ raise_exception('no ' + 'é' * 100000) }}", model="Wordy")
    builder = PromptBuilder(template, lambda text, add_special=True: list(text.encode()), 4096, OverflowPolicy.STOP)
    try:
        error = builder.prepare(Request("r", SamplingParams(), messages=tuple(HI))).error  # a pane's message, a 400's
    finally:
        template.close()
    head = "the chat template of Wordy rejected this conversation: "
    assert error.startswith(head + "no éé") and error.endswith("é" + CUT_MARK)
    assert MAX_ERROR_BYTES - 2 < len(error[len(head) :].encode()) <= MAX_ERROR_BYTES  # a whole é at the cut


def test_a_closed_template_fails_a_render_in_progress_at_once():
    import threading

    template = ChatTemplate(LOOPS_ON_REQUEST, model="Looper")  # the app's budget: the close comes first
    threading.Timer(0.3, template.close).start()
    error, took = _timed(lambda: template.render([{"role": "user", "content": "loop"}]))
    assert isinstance(error, ChatTemplateError) and "is being closed" in str(error)
    assert took < RENDER_SECONDS


def test_a_failed_render_is_the_template_s_fault_and_the_built_in_template_serves_the_chat(looping):
    from app.engine.events import Fault

    builder = PromptBuilder(looping, lambda text, add_special=True: list(text.encode()), 4096, OverflowPolicy.STOP)
    chat = ({"role": "user", "content": "loop"},)
    prompt = builder.prepare(Request("r", SamplingParams(), messages=chat))
    assert prompt.fault is Fault.TEMPLATE and "Looper" in prompt.error and prompt.tokens == []
    fallback = builder.prepare(Request("r", SamplingParams(), messages=chat, builtin_template=True))
    assert bytes(fallback.tokens).decode() == "<|im_start|>user\nloop<|im_end|>\n<|im_start|>assistant\n"
    assert fallback.stop == ("<|im_end|>", "<|im_start|>")  # ChatML's markers end the reply
    assert bytes(builder.prepare(Request("p", SamplingParams(), prompt="loop")).tokens) == b"loop"  # no template


# pieces of Jinja, whole statements and expressions, put together in any order: loops (some long),
# string arithmetic, recursion, filters, raising, reading the messages
_PIECES = st.sampled_from(
    [
        "{{ messages[0]['content'] }}",
        "{% for m in messages %}{{ m['role'] }}{% endfor %}",
        "{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
        "{{ 'ab' * 50000 }}",
        "{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{{ raise_exception('no') }}",
        "{{ messages | tojson }}",
        "{{ messages[5]['content'] }}",
        "{{ bos_token ~ eos_token }}",
        "{{ (10 ** 100) | string | length }}",
        "{{ messages.__class__ }}",
        "{{ ''.join(['y'] * 1000000) }}",
        "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "{% set ns = namespace(n=0) %}{% for i in range(50000) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
        "{{ 1 / 0 }}",
        "{% for",  # unreadable: falls back to ChatML
    ]
)


_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", ""]), "content": st.text(max_size=80)}
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_PIECES, min_size=1, max_size=4), messages=_MESSAGES, policy=st.sampled_from(OverflowPolicy))
def test_any_template_and_chat_give_a_prompt_or_a_reason_within_the_budget(pieces, messages, policy):
    from app.engine.events import Fault

    template = ChatTemplate("".join(pieces), model="Any", seconds=BUDGET_S)
    builder = PromptBuilder(template, lambda text, add_special=True: list(text.encode()), 2048, policy)
    try:
        prompt, took = _timed(lambda: builder.prepare(Request("r", SamplingParams(max_tokens=16), messages=tuple(messages))))
    finally:
        template.close()
    assert took < 2 * (BUDGET_S + SLACK_S)
    if prompt.error is None:
        assert 0 < len(prompt.tokens) < 2048
        # the reply's opening; a last assistant message is the reply's start, continued (a prefill)
        last = messages[-1]
        opening = b"<|im_start|>assistant\n" + (last["content"].encode() if last["role"] == "assistant" else b"")
        assert template.source is not CHATML or bytes(prompt.tokens).endswith(opening)
    elif prompt.fault is Fault.TEMPLATE:
        assert prompt.error.startswith("the chat template of Any ")
    else:
        assert prompt.fault is Fault.REQUEST and prompt.tokens == []  # too long for the context, say
