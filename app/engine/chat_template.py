"""Render a conversation into prompt text with the model's own Jinja chat template (GGUF metadata)."""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import RequestError

# used only when a GGUF carries no template, as llama-server does
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# a model that never learnt ChatML may write its markers as text: they end its turn, so a reply
# never runs on into a turn it made up
CHATML_STOPS = ("<|im_end|>", "<|im_start|>")

Message = dict[str, str]


def _raise(message: str):
    raise TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = ""):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self.source = source or CHATML
        try:
            self._template = env.from_string(self.source)
        except TemplateError:  # a template this Jinja cannot read: ChatML, as llama-server falls back
            self.source = CHATML
            self._template = env.from_string(CHATML)
        self._bos = bos_token
        self._eos = eos_token

    @property
    def is_fallback(self) -> bool:
        """The model carries no chat template (a base model) or one this Jinja cannot read."""
        return self.source is CHATML

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return CHATML_STOPS if self.is_fallback else ()

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                bos_token=self._bos,
                eos_token=self._eos,
            )
        except TemplateError as e:
            raise RequestError(f"the model's chat template rejected this conversation: {e}") from e
