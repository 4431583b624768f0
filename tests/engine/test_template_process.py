"""The chat template's process over its life: cancels interrupt only a render in progress, every
process killed is reaped with its pipes closed, and it sees none of the app's secrets."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import time

import pytest
from helpers import Started, collect, run, user

from app.engine.events import FinishEvent
from app.engine.params import OverflowPolicy
from app.engine.prompt import intake, sandbox
from app.engine.prompt.builder import PromptBuilder
from app.engine.prompt.chat_template import ChatTemplate, ChatTemplateError
from app.engine.sampling.params import GREEDY, SamplingParams
from app.engine.sequence import Request

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts what /proc shows")

# ChatML, but a message that says "slow" takes ~0.15 s to render (3 million empty loops)
SLOW_ON_REQUEST = (
    "{% for m in messages %}{% if m['content'] == 'slow' %}{% for i in range(3000) %}{% for j in range(1000) %}"
    "{% endfor %}{% endfor %}{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HI = [{"role": "user", "content": "hi"}]


def _open_fds() -> int:
    gc.collect()  # what other tests left unreferenced closes its pipes now, not during a count
    return len(os.listdir("/proc/self/fd"))


def _children() -> dict[int, str]:
    """This process's children, pid -> state: "Z" is a zombie, killed and never waited for."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found[int(entry)] = fields[0]
    return found


def _counting_starts(monkeypatch) -> list[subprocess.Popen]:
    """The template processes started from now on (other tests may leave processes of their own)."""
    started: list[subprocess.Popen] = []
    popen = sandbox.subprocess.Popen

    def counted(*args, **kwargs):
        process = popen(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(sandbox.subprocess, "Popen", counted)
    return started


def _running(started: list[subprocess.Popen]) -> list[int]:
    """The pids of those of `started` that run now (a zombie does not)."""
    children = _children()
    return [process.pid for process in started if children.get(process.pid, "Z") != "Z"]


def _ended_for_good(process: subprocess.Popen) -> bool:
    """Killed, waited for (no zombie left) and its pipes closed."""
    return process.returncode is not None and process.stdin.closed and process.stdout.closed and process.pid not in _children()


@pytest.mark.tiny
@linux_only
def test_fifty_cancels_at_any_moment_leave_descriptors_and_processes_where_they_were(tiny_config, monkeypatch):
    monkeypatch.setattr(intake, "ChatTemplate", lambda source, *args: ChatTemplate(SLOW_ON_REQUEST, *args))
    started = _counting_starts(monkeypatch)
    quick = GREEDY.with_(max_tokens=4)
    long_text = " ".join(["word"] * 6000)  # tokenized after its render (idle template), then too long for 4,096
    # (message, seconds before the client leaves): queued, rendering, tokenizing, decoding, finished
    rounds = [
        ("slow", 0.0),
        ("slow", 0.05),
        ("slow", 0.1),
        (long_text, 0.02),
        (long_text, 0.06),
        ("hi", 0.03),
        ("hi", 0.15),
        ("slow", 0.25),
        ("hi", 0.0),
        (long_text, 0.0),
    ]

    async def main():
        async with Started(tiny_config.with_(overflow=OverflowPolicy.STOP)) as client:
            assert (await client.complete(user("hi"), quick)).ok
            before = _open_fds(), _running(started), len(_children())
            finals: list[FinishEvent] = []
            client.add_listener(lambda events: finals.extend(e for e in events if isinstance(e, FinishEvent)))
            for i in range(50):
                text, delay = rounds[i % len(rounds)]
                task = asyncio.ensure_future(collect(client.generate(user(text), quick, request_id=f"c{i}")))
                await asyncio.sleep(delay + 0.003 * (i // len(rounds)))
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            after_request = await client.complete(user("hi"), quick)
            while len({f.request_id for f in finals if f.request_id.startswith("c")}) < 50:
                await asyncio.sleep(0.05)  # every cancelled request gets its final event
            return before, (_open_fds(), _running(started), len(_children())), after_request

    before, after, after_request = run(main())
    print(f"\nopen descriptors, template processes, children: {before} -> {after}; {len(started)} processes started")
    assert after_request.ok
    assert after[0] == before[0]  # open descriptors
    assert len(after[1]) == len(before[1]) == 1 and after[2] == before[2]
    assert len(started) > 2  # renders were interrupted, so fresh processes were started
    assert all(_ended_for_good(process) for process in started if process.pid not in after[1])


@pytest.mark.unit
@linux_only
def test_a_cancel_while_the_prompt_is_tokenized_keeps_the_idle_process_and_renders_no_more(monkeypatch):

    started = _counting_starts(monkeypatch)
    template = ChatTemplate(SLOW_ON_REQUEST, model="Slow")
    tokenizing, cancelled = threading.Event(), threading.Event()
    renders = []

    def tokenize(text: str, add_special: bool = True) -> list[int]:
        if text.startswith("<|im_start|>"):  # a render's text, not a message's own
            renders.append(text)
            if len(renders) == 1:
                tokenizing.set()
                cancelled.wait(10)
        return list(text.encode())

    # three turns, too long together: the builder drops the oldest, rendering again after each tokenizing
    builder = PromptBuilder(template, tokenize, 200, OverflowPolicy.TRUNCATE)
    chat = tuple({"role": role, "content": "x" * 60} for role in ("user", "assistant") * 3)
    try:
        template.render(HI)
        threading.Thread(target=lambda: (tokenizing.wait(10), builder.interrupt(), cancelled.set())).start()
        prompt = builder.prepare(Request("r", SamplingParams(max_tokens=8), messages=chat))
        assert prompt.error == "the chat template of Slow was interrupted: the request was cancelled"
        assert len(renders) == 1  # the cancel came while the first render's text was tokenized
        assert _running(started) == [started[0].pid]  # idle: not killed
        assert builder.prepare(Request("next", SamplingParams(max_tokens=8), messages=chat[-1:])).error is None
        assert len(started) == 1 and _running(started) == [started[0].pid]  # the same process renders the next
    finally:
        cancelled.set()
        template.close()


def _keep_interrupting(template: ChatTemplate, done: threading.Event) -> None:
    while not done.wait(0.005):
        template.interrupt()


@pytest.mark.unit
@linux_only
def test_renders_interrupted_or_over_time_leave_no_descriptor_nor_zombie(monkeypatch):
    started = _counting_starts(monkeypatch)
    template = ChatTemplate(SLOW_ON_REQUEST, seconds=0.05)
    try:
        template.render(HI)
        fds = _open_fds()
        for i in range(4):
            done = threading.Event()
            if i % 2:  # cancels keep coming (the other half run over their time): only the render is killed
                threading.Thread(target=_keep_interrupting, args=(template, done)).start()
            with pytest.raises(ChatTemplateError, match="interrupted" if i % 2 else "did not finish"):
                template.render([{"role": "user", "content": "slow"}])
            done.set()
            assert template.render(HI).endswith("<|im_start|>assistant\n")
        assert _open_fds() == fds
        assert len(started) == 5 and all(_ended_for_good(process) for process in started[:-1])
        assert _running(started) == [started[-1].pid]
    finally:
        template.close()


@pytest.mark.unit
@linux_only
@pytest.mark.parametrize("rendering", [False, True])
def test_close_waits_for_the_process_it_kills(rendering, monkeypatch):

    started = _counting_starts(monkeypatch)
    fds = _open_fds()
    template = ChatTemplate(SLOW_ON_REQUEST)
    template.render(HI)
    failed: list[Exception] = []

    def render_slowly():
        try:
            template.render([{"role": "user", "content": "slow"}])
        except ChatTemplateError as e:
            failed.append(e)

    render = threading.Thread(target=render_slowly)
    if rendering:
        render.start()
        time.sleep(0.05)
    template.close()
    assert started[0].pid not in _children()  # reaped before close() returned: no zombie
    if rendering:
        render.join(5)
        assert "is being closed" in str(failed[0])
    assert _open_fds() == fds and _ended_for_good(started[0])  # the pipes closed too


@pytest.mark.unit
@linux_only
def test_the_template_process_sees_no_secret_of_the_app(monkeypatch):
    secrets = {
        "HF_TOKEN": "hf_secret",
        "BATCH_PLAYGROUND_API_KEY": "sk-secret",
        "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "HTTPS_PROXY": "http://user:password@proxy.example:3128",
        "GITHUB_TOKEN": "ghp_secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    started = _counting_starts(monkeypatch)
    template = ChatTemplate("{{ messages[0]['content'] }}")
    try:
        assert template.render(HI) == "hi"  # it started and renders
        with open(f"/proc/{started[0].pid}/environ", "rb") as f:
            names = {entry.split(b"=", 1)[0].decode() for entry in f.read().split(b"\0") if entry}
    finally:
        template.close()
    assert not names & set(secrets)
    assert {"PATH", "PYTHONPATH", "LC_ALL"} <= names
    assert names <= sandbox.ENV_NAMES | {"PYTHONPATH"} | {n for n in names if n.startswith("LC_")}


@pytest.mark.tiny
def test_serve_answers_a_template_s_long_words_with_a_400_of_one_kib_of_them(tiny_config, monkeypatch):
    import openai
    from serving import Serving

    from app.engine.prompt.worker import CUT_MARK

    wordy = "{{ raise_exception('roles must alternate' + '!' * 100000) }}"
    monkeypatch.setattr(intake, "ChatTemplate", lambda source, *args: ChatTemplate(wordy, *args))

    async def main():
        async with Serving(tiny_config) as (_client, _server, url):
            api = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model="m", messages=HI, max_tokens=4)
            return info.value.body["message"]

    message = run(main())
    words = message.split("rejected this conversation: ", 1)[1]
    assert words.startswith("roles must alternate!!!") and words.endswith("!" + CUT_MARK)
    assert len(words.encode()) <= 1024


@pytest.mark.unit
def test_the_template_process_environment_is_built_from_an_allow_list():
    parent = {"PATH": "/bin", "LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONPATH": "extra", "HF_TOKEN": "hf_secret"}
    parent |= {"OPENAI_API_KEY": "sk", "AWS_ACCESS_KEY_ID": "a", "HTTP_PROXY": "http://u:p@proxy:1", "MY_SECRET": "s"}
    env = sandbox.worker_environment(parent)
    assert set(env) == {"PATH", "LC_ALL", "TZ", "PYTHONPATH"}
    assert env["PYTHONPATH"].endswith(os.pathsep + "extra")  # the app's folder first, so the worker imports
