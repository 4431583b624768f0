"""Render a conversation into prompt text with the model's own Jinja chat template (GGUF metadata).

A model's template is a program from an untrusted file: it runs in a sandbox process (sandbox.py)
with a budget of time and of characters, and a template over budget fails its request, naming the
template, while the model goes on serving. The built-in ChatML template is ours and runs here.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import RequestError
from .caps import ALL, TemplateCaps, polyfill
from .sandbox import SandboxFault, TemplateSandbox
from .worker import cut

# used when a GGUF carries no template, as llama-server does, and when a user picks the built-in one
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# a model that never learnt ChatML may write its markers as text: they end its turn, so a reply
# never runs on into a turn it made up
CHATML_STOPS = ("<|im_end|>", "<|im_start|>")
# a render of a real template takes milliseconds: seconds more is a loop
RENDER_SECONDS = 2.0
FALLBACK_ADVICE = "chat with the built-in template (ChatML) instead"

Message = dict[str, object]  # role and content; an assistant turn may hold tool_calls, a tool result its call's id


class ChatTemplateError(RequestError):
    """The model's chat template failed on a conversation: it raised (`refused`: another conversation
    may pass), or overran its budget or was stopped (any other render may do the same)."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


def _raise(message: str):
    raise TemplateError(message)


class ChatTemplate:
    def __init__(
        self,
        source: str | None,
        bos_token: str = "",
        eos_token: str = "",
        model: str = "the model",
        seconds: float = RENDER_SECONDS,
    ):
        """`model`: the model's name, which a failure names; `seconds`: a render's time budget."""
        self.seconds = seconds
        self.source = source or CHATML
        self.model = model
        self._bos = bos_token
        self._eos = eos_token
        # the model's is compiled by its first render (the sandbox imports Jinja while the model loads)
        self._sandbox = TemplateSandbox() if self.source is not CHATML else None
        self._caps: TemplateCaps | None = None  # found by the first render
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._chatml = env.from_string(CHATML)

    @property
    def is_fallback(self) -> bool:
        """The model carries no chat template (a base model) or one this Jinja could not read (known
        once a render tried)."""
        return self.source is CHATML

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return CHATML_STOPS if self.is_fallback else ()

    def render(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = True,
        max_chars: int = 1 << 24,
        tools: list | None = None,
        kwargs: Mapping[str, object] | None = None,
    ) -> str:
        """The prompt text; ChatTemplateError if the template raises, runs over its seconds or
        writes more than `max_chars`. `tools`: OpenAI's list of functions, for a template that renders
        them; `kwargs`: more variables for the template (`chat_template_kwargs`: `enable_thinking`,
        `reasoning_effort`, ...), which llama.cpp lets override the others. `enable_thinking` is true
        unless they say otherwise, as llama.cpp renders it. The conversation is first made fit for
        what the template renders (caps.py: a system message folded where it refuses one, ...)."""
        shown, extra = polyfill(self.caps(), list(messages), tools)
        variables = {**self._variables(), "messages": shown, "add_generation_prompt": add_generation_prompt, **extra}
        variables.update(kwargs or {})
        if tools:  # else undefined, as with Hugging Face's renderer: templates test `if tools`
            variables["tools"] = tools
        if self._sandbox is not None:
            job = {"source": self.source, "variables": variables, "max_chars": max_chars}
            answer = self._run(job, self.seconds)
            if "text" in answer:
                return answer["text"]
            self._fall_back()
        try:
            return self._chatml.render(**variables)
        except TemplateError as e:
            raise ChatTemplateError(f"the built-in chat template rejected this conversation: {e}", refused=True) from e

    def caps(self) -> TemplateCaps:
        """What the template renders, found by a few renders in its process the first time (the
        built-in template, and one that cannot be read, render everything)."""
        if self._caps is not None:
            return self._caps
        if self._sandbox is None:
            return ALL
        job = {"source": self.source, "caps": True, "variables": self._variables(), "max_chars": 1 << 16}
        try:  # a dozen renders of a real template take milliseconds: a request waits for them no longer than for one
            answer = self._sandbox.run(job, self.seconds)
        except SandboxFault as e:
            if e.kind in ("interrupted", "closed"):  # the request went: the next one asks again
                raise ChatTemplateError(self._fault_message(e.kind, self.seconds)) from None
            answer = {}  # it looped or crashed: the chat's own render says so
        if answer.get("kind") == "syntax":
            self._fall_back()
            return ALL
        self._caps = TemplateCaps.from_json(answer.get("caps"))
        return self._caps

    def _variables(self) -> dict:
        """What every render gets beside the chat: the model's tokens, thinking on (as llama.cpp
        renders), and llama.cpp's dates (`datetime`, `date_string`), which some templates print."""
        now = datetime.datetime.now()
        return {
            "bos_token": self._bos,
            "eos_token": self._eos,
            "enable_thinking": True,
            "datetime": now.strftime("%b %d %Y"),
            "date_string": now.strftime("%d %b %Y"),
        }

    @property
    def interrupted_message(self) -> str:
        return f"the chat template of {self.model} was interrupted: the request was cancelled"

    def interrupt(self) -> None:
        """Stop a render in progress at once (its request was cancelled); the next render works. An idle
        template process is kept."""
        if self._sandbox is not None:
            self._sandbox.interrupt()

    def close(self) -> None:
        """End the sandbox; a render in progress fails at once (the engine is going)."""
        if self._sandbox is not None:
            self._sandbox.close()

    def _run(self, job: dict, seconds: float) -> dict:
        try:
            answer = self._sandbox.run(job, seconds)
        except SandboxFault as e:
            raise ChatTemplateError(self._fault_message(e.kind, seconds)) from None
        if "error" not in answer or answer.get("kind") == "syntax":
            return answer
        words = cut(str(answer["error"]))  # the template's own, of any length: 1 KiB reaches the client
        if answer.get("kind") == "template":  # it raised: often a conversation it does not allow
            raise ChatTemplateError(f"the chat template of {self.model} rejected this conversation: {words}", refused=True)
        raise ChatTemplateError(f"the chat template of {self.model} was stopped: {words}; {FALLBACK_ADVICE}")

    def _fall_back(self) -> None:
        """The model's template cannot be read: ChatML from now on, as llama-server falls back."""
        self._sandbox.close()
        self._sandbox = None
        self.source = CHATML

    def _fault_message(self, kind: str, seconds: float) -> str:
        if kind == "time":
            return (
                f"the chat template of {self.model} did not finish within {seconds:g} s (it may loop forever), "
                f"so the request was stopped; {FALLBACK_ADVICE}"
            )
        if kind == "interrupted":
            return self.interrupted_message
        if kind == "closed":
            return f"the chat template of {self.model} was stopped: the model is being closed"
        return f"the chat template of {self.model} stopped its renderer (it crashed); {FALLBACK_ADVICE}"
