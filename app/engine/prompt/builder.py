"""A request -> prompt tokens: chat template, tokenizer, and the policy for a conversation too long."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import RequestError
from ..events import Fault
from ..images import IMAGE_MARKER, image_key, images_of
from ..kv.history import TokenHistory, kept_prefix
from ..params import OverflowPolicy
from ..positions import PictureLayout
from ..sequence import Request
from ..thinking import ProbeFailed, ThinkingFormat, detect_thinking
from ..thoughts import Thoughts
from .caps import TemplateCaps
from .chat_template import ChatTemplate, ChatTemplateError, Message
from .encoded_images import EncodedImage, EncodedImages


@dataclass(frozen=True)
class Prompt:
    """A request's prompt, built before it reaches the engine thread: tokens, or why there are none."""

    tokens: list[int]
    notice: str | None = None  # e.g. old turns were dropped to fit
    error: str | None = None  # set: the request cannot be served
    fault: Fault = Fault.REQUEST  # whose fault the error is
    stop: tuple[str, ...] = ()  # texts that end the reply besides the request's own stop strings
    grammar: object | None = None  # the request's constraint (llama/constraint.py's Constraint), compiled here
    thinking: ThinkingFormat | None = None  # how the reply marks its thoughts (a chat whose template thinks)
    opened: bool = False  # the prompt leaves the reply inside its thoughts
    closed: bool = False  # the prompt closed them before they began: the answer comes
    marker_tokens: frozenset[int] = frozenset()  # control tokens that spell a marker: the reply's split reads them
    close_tokens: tuple[int, ...] = ()  # what a reasoning budget puts in to end the thoughts
    logit_bias: tuple[tuple[int, float], ...] = ()  # the request's logit bias by token id, its texts made tokens here
    # the pictures whose placeholder ids the tokens hold: their embeddings by key (images.py)
    images: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    # where their tokens sit, by key, for a model that places them in 2D (positions.py; M-RoPE)
    layouts: dict[int, PictureLayout] = dataclasses.field(default_factory=dict)
    encode_s: float = 0.0  # what encoding its pictures took now (none: each was encoded before)
    # the reply's start, given (a last assistant message continued), as the model would have written it
    # (with the markers of its thoughts): the split reads it first, and the reply tells only what follows
    prefill: str = ""


# llama.cpp finds control-token texts in a prompt in time that grows with the square of their
# count (measured: 8,000 in 0.6 s, 40,000 in 15 s): a request's texts may hold this many in all,
# which no chat needs (counted per request: 1,024 messages of a few each would be seconds again)
MAX_MARKERS_IN_REQUEST = 256
CHARS_PER_CELL = 64  # more than any token of any vocabulary spells


class PromptBuilder:
    def __init__(
        self,
        template: ChatTemplate,
        tokenize: Callable[..., list[int]],
        n_ctx_seq: int,
        policy: OverflowPolicy,
        special_texts: tuple[str, ...] = (),
        history: TokenHistory | None = None,
        spell: Callable[[int], bytes] | None = None,
        images: EncodedImages | None = None,
    ):
        """`tokenize(text, add_special=True)`; `n_ctx_seq`: the tokens one sequence may hold, prompt and
        reply (its stream, with a stream per sequence; not the whole pool); `history` and `spell` (a
        token's bytes, control tokens written out) let a later turn keep its conversation's exact tokens;
        `images`: the model's pictures, encoded (None: the model sees none)."""
        self._template = template
        self._builtin = ChatTemplate(None)  # ChatML, for requests that ask
        self._tokenize = tokenize
        self.n_ctx_seq = n_ctx_seq
        self.policy = policy
        self._special_texts = special_texts
        self._history = history
        self._spell = spell
        self._images = images
        self._encoded: dict[int, EncodedImage] = {}  # the pictures of the request being built
        self._encode_s = 0.0
        self._lead = tokenize("") if spell else []  # what the tokenizer puts before any text (a BOS)
        self._interrupted = False  # the request being prepared was cancelled: render no more for it
        self._tail = ""  # the end of the last prompt rendered: does it open the reply's thoughts?
        self._prefill = ""  # the last prompt's prefill (its continued last message), after its end
        self._thinking: dict[int, ThinkingFormat | None] = {}  # by template, found at its first chat
        self._marker_tokens: dict[ThinkingFormat, tuple[frozenset[int], tuple[int, ...]]] = {}

    def interrupt(self) -> None:
        """The request being prepared was cancelled (from any thread): a render of the model's chat
        template in progress stops, and no other starts for it; the template's process, idle while
        the prompt is tokenized, is left alone."""
        self._interrupted = True
        self._template.interrupt()

    def close(self) -> None:
        """Stop the model's chat template for good: a render in progress fails now, and so do later ones."""
        self._template.close()

    def prepare(self, request: Request) -> Prompt:
        """build() that never raises: a request it cannot read gets a Prompt with the reason."""
        self._interrupted = False  # a cancel of the request before this one, come late
        self._encoded, self._encode_s = {}, 0.0
        self._prefill = ""
        try:
            tokens, notice = self.build(request)
        except ChatTemplateError as e:
            return Prompt([], error=str(e), fault=Fault.TEMPLATE)
        except RequestError as e:
            return Prompt([], error=str(e))
        except Exception as e:  # a request must never take an engine thread down with it
            return Prompt([], error=f"internal error while reading the request: {e!r}", fault=Fault.INTERNAL)
        if request.messages is None:
            return Prompt(tokens, notice)
        template = self.template_for(request)
        shown = [self._encoded[key] for key in {image_key(t)[0] for t in tokens if t < 0}]
        images = {e.key: e.embd for e in shown}
        layouts = {e.key: e.layout for e in shown if e.layout is not None}
        prompt = Prompt(
            tokens,
            notice,
            stop=template.stop_strings,
            images=images,
            layouts=layouts,
            encode_s=self._encode_s,
            prefill=self._prefill,
        )
        return self._with_thinking(prompt, request, template)

    def thinking_of(self, template: ChatTemplate) -> ThinkingFormat | None:
        """How replies under `template` mark their thoughts: found by its first chat (a few renders)."""
        key = id(template)
        if key not in self._thinking:
            source = None if template.is_fallback else template.source
            found = detect_thinking(source, self._probe_render(template))
            if self._interrupted:  # a probe was cut short: ask again at the next chat
                raise ChatTemplateError(template.interrupted_message)
            self._thinking[key] = None if template.is_fallback else found  # a template Jinja could not read: ChatML
        return self._thinking[key]

    def _probe_render(self, template: ChatTemplate):
        def render(messages: list[Message], add_generation_prompt: bool, kwargs: dict, tools: list | None) -> str:
            try:
                return template.render(messages, add_generation_prompt, max_chars=1 << 16, tools=tools, kwargs=kwargs)
            except ChatTemplateError as e:
                if e.refused:
                    raise
                raise ProbeFailed(str(e)) from e  # it looped or crashed: the chat's own render says so

        return render

    def _with_thinking(self, prompt: Prompt, request: Request, template: ChatTemplate) -> Prompt:
        """The prompt with its reply's thinking format; a budget of 0, or a grammar, closes thoughts the prompt opened."""
        fmt = self.thinking_of(template)
        if fmt is None:
            return prompt
        if fmt not in self._marker_tokens:
            self._marker_tokens[fmt] = (self._markers_of(fmt), tuple(self._tokenize(fmt.closing, add_special=False)))
        markers, close = self._marker_tokens[fmt]
        opened, closed = fmt.opened_by(self._tail), fmt.closed_by(self._tail)
        tokens, prefill = prompt.tokens, prompt.prefill
        # no thought at all: a budget of 0, or a grammar that holds the reply from its first token
        # (it would hold the thoughts instead of the answer)
        held = request.params.grammar is not None and not request.params.grammar_triggers
        if (request.reasoning_budget == 0 or held) and not request.reply_prefix and _thinks_after(fmt, opened, closed, prefill):
            tokens = tokens + list(close)
            if prefill:  # the split reads the marker after the prefill's thoughts
                prefill += fmt.closing
            else:
                opened, closed = False, True
            self._check_fits(len(tokens))
        return dataclasses.replace(
            prompt,
            tokens=tokens,
            thinking=fmt,
            opened=opened,
            closed=closed,
            marker_tokens=markers,
            close_tokens=close,
            prefill=prefill,
        )

    def _markers_of(self, fmt: ThinkingFormat) -> frozenset[int]:
        """The tokens of the format's markers that may be control tokens (a marker that is one token,
        or a special text in a marker of several): a reply's split must read them written out."""
        special = set(self._special_texts)
        found = set()
        for marker in fmt.markers:
            tokens = self._tokenize(marker, add_special=False)
            spelt = (self._spell(t).decode("utf-8", "replace") in special for t in tokens) if self._spell else ()
            found.update(t for t, is_special in zip(tokens, spelt, strict=False) if is_special or len(tokens) == 1)
            if len(tokens) == 1:
                found.add(tokens[0])
        return frozenset(found)

    def template_for(self, request: Request) -> ChatTemplate:
        return self._builtin if request.builtin_template else self._template

    def build(self, request: Request) -> tuple[list[int], str | None]:
        """Return the prompt's tokens and, if turns were dropped to fit, a notice saying so."""
        tokens, notice = self._build(request)
        if request.reply_prefix:  # the reply goes on from these, in its own turn
            tokens = tokens + list(request.reply_prefix)
            self._check_fits(len(tokens))
        if not tokens:  # an empty text with a model that adds no BOS: nothing to reply to
            raise RequestError("the prompt is empty: there is nothing to reply to")
        if tokens[-1] < 0:  # a reply is drawn from a text token's logits
            raise RequestError("the prompt ends with a picture: a text must follow it (the chat template's reply opening)")
        return tokens, notice

    def _build(self, request: Request) -> tuple[list[int], str | None]:
        self._check_markers(request)
        if request.messages is not None and any(images_of(m) for m in request.messages) and self._images is None:
            raise RequestError(
                "this model does not see images: load it with its vision projector (--mmproj FILE, "
                "or an mmproj-*.gguf beside the model)"
            )
        if request.messages is None:
            tokens = self._encode(request.prompt or "")
            self._check_fits(len(tokens))
            return tokens, None
        messages = list(request.messages)
        tokens = self._render(self.template_for(request), messages, request, self._history_of(request))
        if self.policy is OverflowPolicy.STOP or self._fits(len(tokens), request):
            self._check_fits(len(tokens))
            return tokens, None
        return self._drop_oldest_turns(messages, request, len(tokens))

    def _check_markers(self, request: Request) -> None:
        texts = [request.prompt or ""] if request.messages is None else [_texts_of(m) for m in request.messages]
        texts.append(request.params.tools or "")
        counts = {marker: sum(text.count(marker) for text in texts) for marker in self._special_texts}
        total = sum(counts.values())
        if total > MAX_MARKERS_IN_REQUEST:
            where = "the prompt holds" if request.messages is None else "the messages hold"
            most = max(counts, key=counts.get)
            raise RequestError(f"{where} {total} chat-format markers (such as {most}); at most {MAX_MARKERS_IN_REQUEST}")

    def _history_of(self, request: Request):
        return self._history.get(request.conversation_id) if self._history is not None else None

    def template_facts(self) -> tuple[str, TemplateCaps]:
        """The model's chat template (its source) and what it renders (llama-server's /props), read
        on the prompt thread: the capabilities take a few renders the first time."""
        return self._template.source, self._template.caps()

    def text_of(self, request: Request) -> str:
        """A chat's prompt as text (llama-server's /apply-template): the template's render and a
        continued last message's start, not tokenized; ChatTemplateError or RequestError where it fails."""
        self._interrupted = False
        self._check_markers(request)
        return self._text(self.template_for(request), list(request.messages or ()), request)

    def _render(self, template: ChatTemplate, messages: list[Message], request: Request, history=None) -> list[int]:
        text = self._text(template, messages, request)
        images = [image for m in messages for image in images_of(m)]
        if images:
            return self._encode_with_images(text, images, history)
        if history:
            return self._encode_after(history, text)
        return self._encode(text)

    def _text(self, template: ChatTemplate, messages: list[Message], request: Request) -> str:
        if not messages:
            raise RequestError("the conversation is empty")
        if self._interrupted:  # cancelled between two renders (dropping turns to fit)
            raise ChatTemplateError(template.interrupted_message)
        tools = json.loads(request.params.tools) if request.params.tools else None
        kwargs = dict(request.template_kwargs or {})
        budget = self._render_budget(messages) + 2 * len(request.params.tools or "") + 2 * len(json.dumps(kwargs))
        fmt = self.thinking_of(template) if any(m.get("reasoning_content") for m in messages) else None
        shown = [_without_images(m) for m in messages]  # each picture a marker in its place
        shown = [fmt.for_template(m) for m in shown] if fmt is not None else shown
        continued = continues(messages, request)
        if continued:  # the chat before it, its reply's opening, then the reply's start as given
            text = self._reopened(
                template, template.render(shown[:-1], True, max_chars=budget, tools=tools, kwargs=kwargs), messages[-1]
            )
        else:
            text = template.render(shown, request.add_generation_prompt, max_chars=budget, tools=tools, kwargs=kwargs)
        self._tail = text[-256:]
        self._prefill = self._prefill_text(template, messages[-1]) if continued else ""
        return text + self._prefill

    def _reopened(self, template: ChatTemplate, text: str, message: Message) -> str:
        """`text` without the empty thought its reply's opening closed (thinking off: Qwen3's switch,
        Hy3's default), where the continued message's thoughts go on: llama.cpp cuts the generation
        prompt at the opening marker there."""
        fmt = self.thinking_of(template) if _text(message.get("reasoning_content")) else None
        if fmt is None or fmt.harmony or not fmt.start or not fmt.closed_by(text):
            return text
        at = text.rfind(fmt.start, max(0, len(text) - 256))
        return text[:at] if at >= 0 else text

    def _prefill_text(self, template: ChatTemplate, message: Message) -> str:
        """A continued assistant message as the model would have written it after the prompt's end
        (as llama.cpp composes it): its thoughts opened where the prompt did not open them, closed
        where an answer follows, and the answer; where the template thinks, else its content."""
        content, reasoning = _text(message.get("content")), _text(message.get("reasoning_content"))
        fmt = self.thinking_of(template) if content or reasoning else None
        if fmt is None:
            return content
        opened = fmt.opened_by(self._tail)
        if fmt.harmony and not reasoning and not opened:
            return "<|channel|>final<|message|>" + content if content else ""
        if reasoning:
            text = ("" if opened else fmt.start) + reasoning
            return text + fmt.closing + content if content else text
        if opened and content.lstrip().startswith(fmt.start) and fmt.start:  # the thoughts, opened twice
            return content.lstrip()[len(fmt.start) :]
        return fmt.closing + content if opened and content else content

    def _encode_with_images(self, text: str, images: list, history) -> list[int]:
        """The rendered chat's texts tokenized and each picture's tokens in its marker's place; a text
        the conversation's last request held where it holds it keeps that request's own tokens, as a
        chat without pictures does."""
        parts = text.split(IMAGE_MARKER)
        if len(parts) - 1 != len(images):
            why = (
                "a message's text holds the marker itself" if len(parts) - 1 > len(images) else "the chat template left some out"
            )
            raise RequestError(
                f"the chat shows {len(images)} pictures but its prompt has {len(parts) - 1} places for them: {why}"
            )
        tokens = self._encode_after(history, parts[0]) if history else self._encode(parts[0])
        for image, part in zip(images, parts[1:], strict=True):
            tokens += self._picture(image).tokens
            if not part:
                continue
            if history is not None and len(history) > len(tokens) and history[: len(tokens)].tolist() == tokens:
                tokens += self._encode_after(history[len(tokens) :], part, add_special=False)
            else:
                tokens += self._tokenize(part, add_special=False)
        return tokens

    def _picture(self, image) -> EncodedImage:
        if self._interrupted:
            raise ChatTemplateError("the request was cancelled while its pictures were read")
        encoded, now = self._images.get(image)
        self._encoded[encoded.key] = encoded
        if now:
            self._encode_s += encoded.encode_s
        return encoded

    def _render_budget(self, messages: list[Message]) -> int:
        """The characters a render may write: the messages twice over and more than the context could
        hold, so a real template never meets it and one that writes gigabytes stops early."""
        given = sum(len(str(value)) for m in messages for key, value in m.items() if key != "images")
        return 2 * given + CHARS_PER_CELL * self.n_ctx_seq + 65536

    def _encode_after(self, history, text: str, add_special: bool = True) -> list[int]:
        """The conversation's own tokens for as much of `text` as they spell, then the rest tokenized;
        without `add_special`, `text` goes on a prompt begun before it (after a picture)."""
        data = self._utf8(text)
        n, pos = kept_prefix(history, data, self._lead if add_special else (), self._spell)
        if n == 0:
            return self._encode(text) if add_special else self._tokenize(text, add_special=False)
        rest = data[pos:].decode("utf-8")
        return history[:n].tolist() + (self._tokenize(rest, add_special=False) if rest else [])

    @staticmethod
    def _utf8(text: str) -> bytes:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _unencodable(e) from None

    def _encode(self, text: str) -> list[int]:
        try:
            return self._tokenize(text)
        except UnicodeEncodeError as e:
            raise _unencodable(e) from None

    def _fits(self, n_prompt: int, request: Request) -> bool:
        # leave room for a reply of a sensible size, not only for the first token
        reserve = min(request.params.max_tokens, self.n_ctx_seq // 4)
        return n_prompt + reserve <= self.n_ctx_seq

    def _check_fits(self, n_prompt: int) -> None:
        if n_prompt >= self.n_ctx_seq:
            raise RequestError(
                f"the prompt is {n_prompt} tokens but the context holds {self.n_ctx_seq}: "
                "shorten it, clear the chat or load the engine with a larger context"
            )

    def _drop_oldest_turns(self, messages: list[Message], request: Request, n_whole: int):
        """Keep the system prompt and the longest run of latest turns that fits.

        Each try renders the whole chat, so tries are few: the first guess comes from the
        messages' own token counts, then a galloping search over turn boundaries confirms it.
        """
        template = self.template_for(request)
        head = [m for m in messages[:1] if m.get("role") == "system"]
        body = messages[len(head) :]
        # where a kept run may start: at a user message (a turn), or the last message alone (with
        # the one before it, where it is a reply's start to continue)
        last = max(0, len(body) - (2 if continues(messages, request) else 1))
        cuts = sorted({i for i, m in enumerate(body) if 0 < i < last and m.get("role") == "user"} | {last})
        tried: dict[int, list[int]] = {}

        def fits(k: int) -> bool:
            tried[k] = self._render(template, head + body[cuts[k] :], request)
            return self._fits(len(tried[k]), request)

        k = _first_fitting(len(cuts), fits, self._guess(head, body, cuts, request, n_whole))
        if k < len(cuts):  # fits(k) was tried and held
            return tried[k], f"dropped the {cuts[k]} oldest messages to fit the context of {self.n_ctx_seq} tokens"
        tokens = tried[len(cuts) - 1]  # the search tried the last cut before giving up
        self._check_fits(len(tokens))
        return tokens, f"dropped the {cuts[-1]} oldest messages; the last message alone nearly fills the context"

    def _guess(self, head: list[Message], body: list[Message], cuts: list[int], request: Request, whole: int) -> int:
        """The first cut whose estimated prompt fits: content tokens plus an even share of the template's."""
        sizes = [len(self._encode(m.get("content", ""))) for m in head + body]
        glue = max(0.0, (whole - sum(sizes)) / len(sizes))  # template tokens per message
        kept = float(whole)
        start = 0
        for k, cut in enumerate(cuts):
            kept -= sum(sizes[len(head) + start : len(head) + cut]) + glue * (cut - start)
            start = cut
            if self._fits(int(kept), request):
                return k
        return len(cuts) - 1


def continues(messages, request: Request) -> bool:
    """Whether the last message is the reply's start, which the reply continues: an assistant's,
    without tool calls (llama-server's prefill), unless the request says a new turn follows it."""
    last = messages[-1] if messages else {}
    return request.continue_final and last.get("role") == "assistant" and not last.get("tool_calls")


def _thinks_after(fmt: ThinkingFormat, opened: bool, closed: bool, prefill: str) -> bool:
    """Whether the reply starts inside its thoughts: the prompt opened them, and its prefill (read
    as the reply's own start) leaves them open."""
    if not prefill:
        return opened
    thoughts = Thoughts(fmt, opened, closed=closed)
    thoughts.feed(prefill)
    return thoughts.in_thought


def _text(value: object) -> str:
    """A message's content (or thoughts) as text: its text parts joined, where it holds parts."""
    if isinstance(value, list):
        return "".join(p.get("text", "") for p in value if isinstance(p, dict) and isinstance(p.get("text"), str))
    return value if isinstance(value, str) else ""


def _texts_of(message: Message) -> str:
    """A message's texts: its content, or all of it where it holds more (an assistant turn's tool calls)."""
    message = _without_images(message)
    if len(message) <= 2:
        return message.get("content", "")
    return json.dumps(message, ensure_ascii=False)


def _without_images(message: Message) -> Message:
    """The message as its chat template reads it: its pictures are markers in its text."""
    return {k: v for k, v in message.items() if k != "images"} if "images" in message else message


def _unencodable(e: UnicodeEncodeError) -> RequestError:
    # a lone surrogate: no UTF-8 for it, so no tokens either
    return RequestError(f"the text holds a character UTF-8 cannot encode ({e.reason}) at position {e.start}")


def _first_fitting(n: int, fits: Callable[[int], bool], guess: int) -> int:
    """The smallest k < n with fits(k), fits being monotone (True from some k on); n if none.

    Gallops from `guess` to bracket the answer, then bisects: a few calls when the guess is near.
    """
    step = 1
    if fits(guess):
        hi, lo = guess, guess - 1  # fits(hi); lo does not fit or is -1
        while lo >= 0 and fits(lo):
            hi, lo, step = lo, lo - step, step * 2
        lo = max(lo, -1)
    else:
        lo, hi = guess, guess + 1  # fits(lo) is False
        while hi < n and not fits(hi):
            lo, hi, step = hi, hi + step, step * 2
        hi = min(hi, n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi
