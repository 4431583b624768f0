"""A request -> prompt tokens: chat template, tokenizer, and the policy for a conversation too long."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .chat_template import ChatTemplate, Message
from .errors import RequestError
from .params import OverflowPolicy
from .sequence import Request


@dataclass(frozen=True)
class Prompt:
    """A request's prompt, built before it reaches the engine thread: tokens, or why there are none."""

    tokens: list[int]
    notice: str | None = None  # e.g. old turns were dropped to fit
    error: str | None = None  # set: the request cannot be served


class PromptBuilder:
    def __init__(
        self,
        template: ChatTemplate,
        tokenize: Callable[[str], list[int]],
        n_ctx: int,
        policy: OverflowPolicy,
    ):
        self._template = template
        self._tokenize = tokenize
        self.n_ctx = n_ctx
        self.policy = policy

    def prepare(self, request: Request) -> Prompt:
        """build() that never raises: a request it cannot read gets a Prompt with the reason."""
        try:
            tokens, notice = self.build(request)
        except RequestError as e:
            return Prompt([], error=str(e))
        except Exception as e:  # a request must never take an engine thread down with it
            return Prompt([], error=f"internal error while reading the request: {e!r}")
        return Prompt(tokens, notice)

    def build(self, request: Request) -> tuple[list[int], str | None]:
        """Return the prompt's tokens and, if turns were dropped to fit, a notice saying so."""
        if request.messages is None:
            tokens = self._encode(request.prompt or "")
            self._check_fits(len(tokens))
            return tokens, None
        messages = list(request.messages)
        tokens = self._render(messages)
        if self.policy is OverflowPolicy.STOP or self._fits(len(tokens), request):
            self._check_fits(len(tokens))
            return tokens, None
        return self._drop_oldest_turns(messages, request)

    def _render(self, messages: list[Message]) -> list[int]:
        if not messages:
            raise RequestError("the conversation is empty")
        return self._encode(self._template.render(messages))

    def _encode(self, text: str) -> list[int]:
        try:
            return self._tokenize(text)
        except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 for it, so no tokens either
            raise RequestError(f"the text holds a character UTF-8 cannot encode ({e.reason}) at position {e.start}") from None

    def _fits(self, n_prompt: int, request: Request) -> bool:
        # leave room for a reply of a sensible size, not only for the first token
        reserve = min(request.params.max_tokens, self.n_ctx // 4)
        return n_prompt + reserve <= self.n_ctx

    def _check_fits(self, n_prompt: int) -> None:
        if n_prompt >= self.n_ctx:
            raise RequestError(
                f"the prompt is {n_prompt} tokens but the context holds {self.n_ctx}: "
                "shorten it, clear the chat or load the engine with a larger context"
            )

    def _drop_oldest_turns(self, messages: list[Message], request: Request):
        head = [m for m in messages[:1] if m.get("role") == "system"]
        body = messages[len(head) :]
        dropped = 0
        while len(body) > 1:
            body.pop(0)
            dropped += 1
            while len(body) > 1 and body[0].get("role") != "user":
                body.pop(0)  # a turn starts with the user
                dropped += 1
            tokens = self._render(head + body)
            if self._fits(len(tokens), request):
                return tokens, f"dropped the {dropped} oldest messages to fit the context of {self.n_ctx} tokens"
        tokens = self._render(head + body)
        self._check_fits(len(tokens))
        return tokens, f"dropped the {dropped} oldest messages; the last message alone nearly fills the context"
