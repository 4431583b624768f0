"""What the server answers: OpenAI-shaped completions, stream chunks, usage, llama-server timings, errors."""

from __future__ import annotations

import math
import time
import uuid

from app.engine.events import FinishEvent, FinishReason
from app.engine.stats import RequestStats

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.CONTEXT: "length"}


class Shape:
    """One response's identity and the objects of its kind (chat or plain text completion)."""

    def __init__(self, is_chat: bool, model: str):
        self.is_chat = is_chat
        self.model = model
        self.id = f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def _object(self, kind: str, choices: list, **extra) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices, **extra}

    def completion(self, final: FinishEvent) -> dict:
        reason = FINISH_REASONS.get(final.reason, "stop")
        if self.is_chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": final.text}}
        else:
            choice = {"index": 0, "text": final.text}
        choice.update(logprobs=None, finish_reason=reason)
        kind = "chat.completion" if self.is_chat else "text_completion"
        return self._object(kind, [choice], usage=usage(final.stats), timings=timings(final.stats))

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False, **extra) -> dict:
        if self.is_chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text or ""}
        choice.update(logprobs=None, finish_reason=finish)
        return self._object("chat.completion.chunk" if self.is_chat else "text_completion", [choice], **extra)

    def last_chunk(self, final: FinishEvent, include_usage: bool) -> dict:
        extra = {"timings": timings(final.stats)}
        if include_usage:
            extra["usage"] = None  # with include_usage every chunk but the usage one carries null
        return self.chunk(None, FINISH_REASONS.get(final.reason, "stop"), **extra)

    def usage_chunk(self, final: FinishEvent) -> dict:
        kind = "chat.completion.chunk" if self.is_chat else "text_completion"
        return self._object(kind, [], usage=usage(final.stats), timings=timings(final.stats))


def usage(st: RequestStats) -> dict:
    return {
        "prompt_tokens": st.prompt_tokens,
        "completion_tokens": st.gen_tokens,
        "total_tokens": st.prompt_tokens + st.gen_tokens,
        "prompt_tokens_details": {"cached_tokens": st.cached_tokens},
    }


def timings(st: RequestStats) -> dict:
    """llama-server's timings: prompt_n counts the prompt tokens computed, cache_n those reused."""
    prompt_ms = _ms(st.t_first_token - st.t_admit)
    predicted_ms = _ms(st.t_last_token - st.t_first_token)
    intervals = max(st.gen_tokens - 1, 0)  # the first token's time belongs to the prompt
    return {
        "cache_n": st.cached_tokens,
        "prompt_n": st.evaluated_tokens,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": _ratio(prompt_ms, st.evaluated_tokens),
        "prompt_per_second": _ratio(1000 * st.evaluated_tokens, prompt_ms),
        "predicted_n": st.gen_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": _ratio(predicted_ms, intervals),
        "predicted_per_second": _ratio(1000 * intervals, predicted_ms),
        "queued_ms": _ms(st.t_admit - st.t_submit),
    }


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None, code=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _ms(seconds: float) -> float:
    return 0.0 if math.isnan(seconds) else round(1000 * seconds, 3)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0
