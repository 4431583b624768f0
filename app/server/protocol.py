"""What a client sends: an OpenAI-style request body checked and turned into one engine job.

Fields other servers accept are honoured where they mean something here; unknown ones are ignored.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.engine.images import Image
from app.engine.probs import MAX_TOP
from app.engine.sampling.fields import SamplingField
from app.engine.sampling.params import SAMPLING_FIELDS, SamplingParams

from .image_input import ImageInputError, ImageUrl, content_with_pictures, picture_of
from .output_format import FieldError, grammar_of
from .tool_calls import Tools, calls_in, calls_written, generic_message, parse_tools, with_instructions
from .tool_syntax import GENERIC, Syntax

# a token is never this many characters on average: a longer text cannot fit, without tokenizing it
MAX_CHARS_PER_TOKEN = 64
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256  # a stop string is matched against the tail of the reply at every token
MAX_MESSAGES = 1024  # rendering the chat template costs time in proportion to the messages
MAX_CHOICES = 16  # n: samples of one prompt in one request
MAX_TEMPLATE_KWARGS_CHARS = 16384  # the engine's own bound on a request's template variables
# a whole (not streamed) reply keeps every token's rivals until it ends: about 150 bytes each, so
# this many make some 10 MB a request; a stream sends them as they come and keeps none
MAX_KEPT_PROBS = 65_536
DEFAULTS = SamplingParams()
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class BadRequest(Exception):
    """The request cannot be served as sent: HTTP 400 with this message (and OpenAI's code for the rule, where it has one)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


# llama-server's --reasoning-format: thoughts apart in `reasoning_content`, or left in the content
REASONING_FORMATS = {"deepseek": True, "auto": True, "deepseek-legacy": True, "none": False}


@dataclass(frozen=True)
class Thinking:
    """How a chat's reply thinks, for a model that does: its thoughts apart from its answer
    (`reasoning_format`), how many tokens it may think (`reasoning_budget_tokens`; None: no limit)
    and the chat template's variables (`chat_template_kwargs`, `reasoning_effort`). A server's
    defaults are one of these; a request's fields override them."""

    separate: bool = True
    budget: int | None = None
    template_kwargs: Mapping[str, object] = field(default_factory=dict)


DEFAULT_THINKING = Thinking()  # a server's defaults when it is given none


@dataclass(frozen=True)
class Job:
    """One request for the engine: a chat (`messages`) or a plain completion (`prompt`)."""

    params: SamplingParams
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    stream: bool = False
    include_usage: bool = False
    conversation_id: str | None = None
    n: int = 1  # choices: the prompt is read once, then sampled n ways
    post_sampling_probs: bool = False  # llama-server's: probabilities after the samplers, not log-probabilities
    tools: Tools | None = None  # the functions its reply may call (tool_calls.py)
    thinking: Thinking = DEFAULT_THINKING  # a chat's thoughts, budget and template variables
    # a last assistant message continued (llama-server's prefill; `continue_final_message`), or a
    # new turn after it; the template's generation prompt at the end (`add_generation_prompt`)
    continue_final: bool = True
    add_generation_prompt: bool = True

    def choice_params(self, index: int) -> SamplingParams:
        """Choice `index` samples with a seed of its own (the request's seed plus the index)."""
        seed = self.params.seed
        return self.params if index == 0 or seed is None else self.params.with_(seed=(seed + index) & 0xFFFFFFFF)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from None
    except RecursionError:
        raise BadRequest("the body is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def requested_model(body: dict) -> str | None:
    """The `model` field: a loaded model's name or file name; absent or empty: the default model."""
    name = get_field(body, "model", str, None)
    return check_text(name, "model") if name else None


def parse_chat(body: dict, n_ctx_seq: int, syntax: Syntax = GENERIC, thinking: Thinking = DEFAULT_THINKING) -> Job:
    """`n_ctx_seq`: the tokens one sequence may hold (its stream, with a stream per sequence), prompt
    and reply; `syntax`: the tool-call syntax the model's template writes (tool_syntax.py);
    `thinking`: the server's defaults for thinking models."""
    raw = get_field(body, "messages", list, None)
    if not raw:
        raise BadRequest("'messages' must be a non-empty list", "messages")
    if len(raw) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} messages in one request; got {len(raw)}", "messages")
    _refuse_unsupported(body, CHAT_HONOURS)
    continue_final, add_generation_prompt, raw = continuation(body, raw)
    tools, grammar = honoured(parse_tools, body, syntax), honoured(grammar_of, body)
    messages = chat_messages(raw, tools)
    conversation_id = _conversation_of(messages)  # before the tools' description: the chat's own opening
    held, messages = with_tools(tools, grammar, messages)
    check_size(prompt_chars(messages, held), n_ctx_seq, "messages")
    params = sampling(body).with_(n_probs=_chat_probs(body), **held)
    thinks = parse_thinking(body, thinking)
    job = Job(
        params,
        messages=messages,
        conversation_id=conversation_id,
        tools=tools,
        thinking=thinks,
        continue_final=continue_final,
        add_generation_prompt=add_generation_prompt,
        **_streaming(body),
        **_choices(body),
    )
    return _check_kept_probs(job, n_ctx_seq)


CONTINUE_WORDS = ("content", "reasoning_content")  # llama-server's: what of the last message goes on


def continuation(body: dict, raw: list) -> tuple[bool, bool, list]:
    """(continue_final, add_generation_prompt, messages): whether a last assistant message is the
    reply's start, as llama-server reads it (a prefill unless `continue_final_message` is false)
    and vLLM (`continue_final_message`, `add_generation_prompt: false`); "reasoning_content"
    continues its thoughts alone."""
    given = body.get("continue_final_message")
    if given is not None and not isinstance(given, bool) and given not in CONTINUE_WORDS:
        raise BadRequest(
            f'\'continue_final_message\' must be true, false, "content" or "reasoning_content"; got {shown(given)}',
            "continue_final_message",
        )
    add = get_field(body, "add_generation_prompt", bool, None)
    last = raw[-1] if isinstance(raw[-1], dict) else {}
    final = last.get("role") == "assistant" and not last.get("tool_calls")
    if given:
        if add:
            raise BadRequest("'continue_final_message' and 'add_generation_prompt' cannot both be true", "continue_final_message")
        if not final:
            raise BadRequest(
                "'continue_final_message' needs a last assistant message without tool calls to continue",
                "continue_final_message",
            )
        if given == "reasoning_content":
            raw = [*raw[:-1], {**last, "content": ""}]
    return given is not False, add is not False, raw


def parse_thinking(body: dict, defaults: Thinking, effort: str | None = None) -> Thinking:
    """A request's thinking fields as llama-server reads them: `reasoning_format` (none, deepseek,
    auto), `chat_template_kwargs` (over the server's), `reasoning_effort` ("none" switches thinking
    off; another level goes to the template), `reasoning_budget_tokens` or `thinking_budget_tokens`
    (-1: the server's). `effort`: the Responses API's `reasoning.effort`, taken as `reasoning_effort`."""
    name = get_field(body, "reasoning_format", str, None)
    if name is not None and name not in REASONING_FORMATS:
        raise BadRequest(
            f"'reasoning_format' must be one of {', '.join(REASONING_FORMATS)}; got {shown(name)}", "reasoning_format"
        )
    kwargs = dict(defaults.template_kwargs) | _template_kwargs(body)
    effort = effort if effort is not None else get_field(body, "reasoning_effort", str, None)
    if effort == "none":
        kwargs["enable_thinking"] = False
        kwargs.pop("reasoning_effort", None)
    elif effort:
        kwargs["reasoning_effort"] = effort
    budget = defaults.budget
    for key in ("reasoning_budget_tokens", "thinking_budget_tokens"):
        given = get_field(body, key, int, None)
        if given is not None and given != -1:
            budget = _check_range(key, given, 0, 2**31 - 1)
            break
    separate = defaults.separate if name is None else REASONING_FORMATS[name]
    return Thinking(separate, budget, kwargs)


def _template_kwargs(body: dict) -> dict:
    kwargs = get_field(body, "chat_template_kwargs", dict, None) or {}
    if not isinstance(kwargs.get("enable_thinking", True), bool):
        raise BadRequest("'chat_template_kwargs.enable_thinking' must be true or false", "chat_template_kwargs")
    taken = [k for k in ("messages", "tools", "add_generation_prompt") if k in kwargs]
    if taken:
        raise BadRequest(f"'chat_template_kwargs' cannot set {', '.join(taken)}: the request gives them", "chat_template_kwargs")
    if len(json.dumps(kwargs)) > MAX_TEMPLATE_KWARGS_CHARS:
        raise BadRequest(
            f"'chat_template_kwargs' holds more than {MAX_TEMPLATE_KWARGS_CHARS} characters of JSON", "chat_template_kwargs"
        )
    return kwargs


def chat_messages(raw: list, tools: Tools | None) -> tuple[dict, ...]:
    """The messages as the model's template reads them: calls and results kept as they are for a
    template with a tool syntax, else written out in the generic format."""
    if tools is not None and tools.syntax.is_native:
        syntax = tools.syntax
        return tuple(calls_written(native_message(m, i, syntax.arguments_as_text), syntax) for i, m in enumerate(raw))
    return tuple(message_of(honoured(generic_message, m, i), i) for i, m in enumerate(raw))


def with_tools(tools: Tools | None, grammar: str | None, messages: tuple[dict, ...]) -> tuple[dict, tuple[dict, ...]]:
    """The sampling fields that hold a reply to `tools` (its grammar, triggers, the template's list
    of them; with a JSON format's `grammar` beside them, calls or an answer in the format), and the
    messages with the generic format's description of them."""
    if tools is None:
        return {"grammar": grammar}, messages
    if grammar is not None:
        tools = honoured(tools.answering, grammar)
    if not tools.syntax.is_native or not tools.syntax.describes_tools:
        messages = with_instructions(messages, tools)
    held = {
        "grammar": honoured(tools.grammar),
        "grammar_triggers": tools.triggers(),
        "tools": tools.template_tools(),
        "preserved": tools.syntax.markers,
    }
    return held, messages


def prompt_chars(messages: tuple[dict, ...], held: dict) -> int:
    """The characters the prompt holds: the messages, their calls and the template's tool list."""
    return sum(
        len(m["content"]) + len(m.get("reasoning_content", "")) + len(json.dumps(m.get("tool_calls", ""))) for m in messages
    ) + len(held.get("tools") or "")


def honoured(read, *args):
    """What `read` makes of a request's field (a format, its tools), or the 400 saying why it cannot."""
    try:
        return read(*args)
    except FieldError as e:
        raise BadRequest(str(e), e.param) from None


def parse_completion(body: dict, n_ctx_seq: int) -> Job:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # a batch of one
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string (or a list holding one string)", "prompt")
    if not prompt:  # some models would read it as no tokens at all: nothing to continue
        raise BadRequest("'prompt' must not be empty", "prompt")
    _refuse_unsupported(body)
    check_text(prompt, "prompt")
    check_size(len(prompt), n_ctx_seq, "prompt")
    params = sampling(body).with_(n_probs=_completion_probs(body), grammar=honoured(grammar_of, body))
    return _check_kept_probs(Job(params, prompt=prompt, **_streaming(body), **_choices(body)), n_ctx_seq)


# fields that constrain the reply, which this server does not honour yet: asked for, they are a
# 400 naming them, never dropped (a caller would get free text it takes for valid JSON); the
# values that ask for nothing pass
UNSUPPORTED = {
    "tools": lambda v: v == [],
    "tool_choice": lambda v: v in ("none", "auto"),
    "functions": lambda v: v == [],
    "function_call": lambda v: v in ("none", "auto"),
}


CHAT_HONOURS = ("tools", "tool_choice")  # a chat calls tools (tool_calls.py); a completion cannot


def _refuse_unsupported(body: dict, allowed: tuple[str, ...] = ()) -> None:
    for name, asks_nothing in UNSUPPORTED.items():
        value = body.get(name)
        if name not in allowed and value is not None and not asks_nothing(value):
            raise BadRequest(
                f"'{name}' is not supported by this server (tools are called through chat completions' 'tools' "
                f"and 'tool_choice'): the reply would not follow it; send the request without '{name}'",
                name,
            )


def _check_kept_probs(job: Job, n_ctx_seq: int) -> Job:
    """A whole reply with token probabilities keeps them all until it ends: bound what it may keep."""
    if job.stream or job.params.n_probs is None:
        return job
    tokens = min(job.params.max_tokens, n_ctx_seq)  # a reply ends when its sequence's context is full
    kept = job.n * tokens * (job.params.n_probs + 1)
    if kept > MAX_KEPT_PROBS:
        raise BadRequest(
            f"a reply that is not streamed keeps at most {MAX_KEPT_PROBS} token probabilities; {job.n} choice(s) of up to "
            f"{tokens} tokens with {job.params.n_probs} rivals each could keep {kept}: lower max_tokens or the rivals, "
            "or stream the reply",
            "max_tokens",
        )
    return job


def sampling(body: dict) -> SamplingParams:
    """The request's sampling: each knob of sampling/params.py under the first of its API names present."""
    values = {f.name: _knob(body, f) for f in SAMPLING_FIELDS if f.api}
    return SamplingParams(seed=_seed(body), stop=_stop(body), ignore_eos=get_field(body, "ignore_eos", bool, False), **values)


def _knob(body: dict, f: SamplingField):
    name = next((name for name in f.api if body.get(name) is not None), f.api[0])
    if f.kind is tuple:  # a list (sequence breakers, the sampler order, the logit bias): the field reads it
        raw = body.get(name)
        try:
            return getattr(DEFAULTS, f.name) if raw is None else f.from_json(raw, name)
        except ValueError as e:
            raise BadRequest(str(e), name) from None
    value = get_field(body, name, f.kind, getattr(DEFAULTS, f.name))
    if f.name == "max_tokens" and value == -1:  # llama-server's "until the context is full"
        value = f.hi
    return _check_range(name, value, f.kind(f.lo), f.kind(f.hi))


# -- fields ------------------------------------------------------------------------------------


def _choices(body: dict) -> dict:
    n = _integer(body, "n", 1, 1, MAX_CHOICES)
    return {"n": n, "post_sampling_probs": get_field(body, "post_sampling_probs", bool, False)}


def _chat_probs(body: dict) -> int | None:
    """OpenAI's chat fields (`logprobs`, `top_logprobs`) or llama-server's `n_probs`: rivals per token."""
    top = _integer(body, "top_logprobs", 0, 0, MAX_TOP)
    if get_field(body, "logprobs", bool, False) or top:
        return max(top, _llama_probs(body) or 0)
    return _llama_probs(body)


def _completion_probs(body: dict) -> int | None:
    """The completions API's `logprobs` is the number of rivals (0: the drawn token's only)."""
    top = get_field(body, "logprobs", int, None)
    if top is None:
        return _llama_probs(body)
    return max(_check_range("logprobs", top, 0, MAX_TOP), _llama_probs(body) or 0)


def _llama_probs(body: dict) -> int | None:
    n = _integer(body, "n_probs", 0, 0, MAX_TOP)
    return n or None


def _streaming(body: dict) -> dict:
    options = get_field(body, "stream_options", dict, None) or {}
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise BadRequest("'stream_options.include_usage' must be a boolean", "stream_options")
    get_field(body, "cache_prompt", bool, True)  # caching is always on; only its type is checked
    return {"stream": get_field(body, "stream", bool, False), "include_usage": include}


def message_of(item, index: int) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise BadRequest(f"{where} must be an object with 'role' and 'content'", where)
    given = item.get("role")
    role = ROLES.get(given) if isinstance(given, str) else None
    if role is None:
        raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}; got {shown(given)}", f"{where}.role")
    text, pictures = _content(item.get("content"), where)
    kept = item.get("images")
    if isinstance(item.get("content"), str) and kept and all(isinstance(p, (Image, ImageUrl)) for p in kept):
        pictures = tuple(kept)  # a message read before (a stored conversation's): its pictures as read
    message = {"role": role, "content": check_text(text, f"{where}.content")}
    if pictures:
        if role != "user":
            raise BadRequest(f"{where}: only a user message may show pictures", f"{where}.content")
        message["images"] = pictures
    if role == "assistant":  # its thoughts, which a thinking model's template may show again
        reasoning = item.get("reasoning_content", item.get("reasoning"))
        if reasoning is not None and not isinstance(reasoning, str):
            raise BadRequest(f"{where}.reasoning_content must be a string", f"{where}.reasoning_content")
        if reasoning:
            message["reasoning_content"] = check_text(reasoning, f"{where}.reasoning_content")
    return message


def native_message(item, index: int, arguments_as_text: bool = False) -> dict:
    """A message as a template with a tool syntax reads it: an assistant turn's calls (arguments as
    objects, or JSON text where the template wants it) and a tool's result (`role: "tool"`, with its
    call's id) kept as they are."""
    where = f"messages[{index}]"
    if isinstance(item, dict) and item.get("role") == "tool":
        message = message_of({**item, "role": "user"}, index) | {"role": "tool"}
        call_id = item.get("tool_call_id")
        if call_id is not None:
            message["tool_call_id"] = check_text(call_id if isinstance(call_id, str) else shown(call_id), f"{where}.tool_call_id")
        return message
    message = message_of(item, index)
    if message["role"] == "assistant" and item.get("tool_calls"):
        message["tool_calls"] = honoured(calls_in, item, where, arguments_as_text)
        check_text(json.dumps(message["tool_calls"], ensure_ascii=False), f"{where}.tool_calls")
    return message


def _content(content, where: str) -> tuple[str, tuple]:
    """A string, null (an assistant turn with no text) or a list of parts: text, and pictures
    (`image_url`, or the Responses API's `input_image`), each a marker in the text where it was."""
    if content is None or isinstance(content, str):
        return content or "", ()
    if not (isinstance(content, list) and all(isinstance(p, dict) for p in content)):
        raise BadRequest(f"{where}.content must be a string or a list of text and image_url parts", where)
    parts = []
    try:
        for i, part in enumerate(content):
            parts.append(_part(part, f"{where}.content[{i}]"))
        return content_with_pictures(parts)
    except ImageInputError as e:
        raise BadRequest(str(e), e.param) from None


TEXT_PARTS = ("text", "input_text", "output_text")


def _part(part: dict, where: str) -> tuple[str, object]:
    kind = part.get("type")
    if kind in TEXT_PARTS and isinstance(part.get("text"), str):
        return part["text"], None
    if kind == "image_url":  # the chat API's: {"image_url": {"url": ..., "detail": ...}} (or the URL alone)
        url = part.get("image_url")
        return "", picture_of(url.get("url") if isinstance(url, dict) else url, f"{where}.image_url")
    if kind == "input_image":  # the Responses API's: {"image_url": ..., "detail": ...}
        if part.get("file_id") is not None and part.get("image_url") is None:
            raise BadRequest(f"{where}: pictures by file_id are not kept here: send image_url (a data: URI)", where)
        return "", picture_of(part.get("image_url"), f"{where}.image_url")
    raise BadRequest(f"{where}: only text and image_url (input_text and input_image) parts are supported", where)


def _conversation_of(messages) -> str:
    """Turns of one chat share their opening: it keeps them on the same KV slot between requests."""
    opening = []
    for m in messages:
        opening.append(m)
        if m["role"] == "user":
            break
    digest = hashlib.sha1(json.dumps(opening, sort_keys=True, default=_named).encode()).hexdigest()
    return f"api-{digest[:16]}"


def _named(value) -> str:
    """A picture in a chat's opening, by its hash (or its URL, before it is fetched)."""
    return getattr(value, "digest", None) or getattr(value, "url", None) or repr(value)


def check_text(text: str, where: str) -> str:
    """Text the tokenizer can read: it must encode as UTF-8 (JSON lets a lone surrogate through)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadRequest(
            f"{where} holds a character that is not valid Unicode ({e.reason}) at position {e.start}", where
        ) from None
    return text


def check_size(n_chars: int, n_ctx_seq: int, param: str) -> None:
    if n_chars > n_ctx_seq * MAX_CHARS_PER_TOKEN:
        raise BadRequest(f"the prompt has {n_chars} characters, far more than the context of {n_ctx_seq} tokens holds", param)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("'stop' must be a non-empty string or a list of them", "stop")
    if len(stops) > MAX_STOP_STRINGS:
        raise BadRequest(f"at most {MAX_STOP_STRINGS} stop strings", "stop")
    for i, s in enumerate(stops):
        if len(s) > MAX_STOP_CHARS:
            raise BadRequest(f"a stop string holds at most {MAX_STOP_CHARS} characters; stop[{i}] has {len(s)}", "stop")
        check_text(s, f"stop[{i}]")
    return tuple(stops)


def _seed(body: dict) -> int | None:
    seed = get_field(body, "seed", int, None)
    return None if seed is None or seed == -1 else seed & 0xFFFFFFFF


def _integer(body: dict, name: str, default: int, lo: int, hi: int) -> int:
    return _check_range(name, get_field(body, name, int, default), lo, hi)


def _check_range(name: str, value, lo, hi):
    if not lo <= value <= hi:
        raise BadRequest(f"'{name}' must be between {lo} and {hi}; got {value}", name)
    return value


def get_field(body: dict, name: str, kind: type, default):
    """body[name] as `kind` (null or absent: default); a wrong type is a BadRequest."""
    value = body.get(name)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value) if abs(value) < 2**1000 else math.inf  # beyond a float: out of every range
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadRequest(f"'{name}' must be {_TYPE_NAMES[kind]}; got {shown(value)}", name)
    if kind is float and not math.isfinite(value):
        raise BadRequest(f"'{name}' must be a finite number", name)
    return value


_TYPE_NAMES = {float: "a number", int: "an integer", bool: "a boolean", list: "a list", dict: "an object", str: "a string"}


def shown(value) -> str:
    """A short view of what was sent, for an error message (whatever its size or depth)."""
    if isinstance(value, (dict, list)):
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)} items"
    return json.dumps(value[:40] if isinstance(value, str) else value)[:40]
