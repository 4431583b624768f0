"""What the server answers: OpenAI-shaped completions, stream chunks, usage, llama-server timings, errors, JSON."""

from __future__ import annotations

import json
import math
import time
import uuid
from itertools import accumulate

from app.engine.events import FinishEvent, FinishReason
from app.engine.probs import TokenChoice, TokenProbs
from app.engine.stats import RequestStats

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length", FinishReason.CONTEXT: "length"}


class Shape:
    """One response's identity and the objects of its kind (chat or plain text completion)."""

    def __init__(self, is_chat: bool, model: str, post_sampling_probs: bool = False):
        self.is_chat = is_chat
        self.model = model
        self.post = post_sampling_probs
        self.id = f"{'chatcmpl' if is_chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def _object(self, kind: str, choices: list, **extra) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices, **extra}

    def completion(self, finals: list[FinishEvent], probs: list[list[TokenProbs] | None]) -> dict:
        """The whole answer: one choice per final event, with its tokens' probabilities when asked."""
        choices = [self._choice(i, final, probs[i]) for i, final in enumerate(finals)]
        kind = "chat.completion" if self.is_chat else "text_completion"
        return self._object(kind, choices, usage=usage(*(f.stats for f in finals)), timings=timings(finals[0].stats))

    def _choice(self, index: int, final: FinishEvent, probs: list[TokenProbs] | None) -> dict:
        if self.is_chat:
            choice = {"index": index, "message": {"role": "assistant", "content": final.text}}
            if final.reasoning:  # a thinking model's thoughts, as llama-server and vLLM send them
                choice["message"]["reasoning_content"] = final.reasoning
        else:
            choice = {"index": index, "text": final.text}
        choice.update(logprobs=self.logprobs(probs), finish_reason=FINISH_REASONS.get(final.reason, "stop"))
        if index:  # each choice read the prompt on its own terms: a shared prefix is computed once
            choice["timings"] = timings(final.stats)
        return choice

    def chunk(
        self,
        text: str | None,
        finish: str | None = None,
        first: bool = False,
        index: int = 0,
        probs=None,
        reasoning: str = "",
        **extra,
    ) -> dict:
        """A stream's chunk: `text` the answer's, `reasoning` the thoughts' (chat only: llama-server's
        `reasoning_content` delta)."""
        if self.is_chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            if reasoning:
                delta["reasoning_content"] = reasoning
            choice = {"index": index, "delta": delta}
        else:
            choice = {"index": index, "text": text or ""}
        choice.update(logprobs=self.logprobs(probs), finish_reason=finish)
        return self._object("chat.completion.chunk" if self.is_chat else "text_completion", [choice], **extra)

    def last_chunk(self, final: FinishEvent, include_usage: bool, index: int = 0, probs=None) -> dict:
        extra = {"timings": timings(final.stats)}
        if include_usage:
            extra["usage"] = None  # with include_usage every chunk but the usage one carries null
        return self.chunk(None, FINISH_REASONS.get(final.reason, "stop"), index=index, probs=probs, **extra)

    def usage_chunk(self, finals: list[FinishEvent]) -> dict:
        kind = "chat.completion.chunk" if self.is_chat else "text_completion"
        return self._object(kind, [], usage=usage(*(f.stats for f in finals)), timings=timings(finals[0].stats))

    def logprobs(self, probs: list[TokenProbs] | None) -> dict | None:
        """OpenAI's logprobs object for these tokens (chat or completions form); None when not asked."""
        if not probs:
            return None
        if self.is_chat:
            key, top_key = ("prob", "top_probs") if self.post else ("logprob", "top_logprobs")
            return {"content": [{**self._token(p.chosen), top_key: [self._token(c) for c in p.top]} for p in probs]}
        return {
            "tokens": [p.chosen.text for p in probs],
            "token_logprobs": [p.chosen.logprob for p in probs],
            "top_logprobs": [{c.text: c.logprob for c in p.top} for p in probs],
            "text_offset": list(accumulate((len(p.chosen.text) for p in probs[:-1]), initial=0)),
        }

    def _token(self, c: TokenChoice) -> dict:
        value = {"prob": c.sampled_p} if self.post else {"logprob": c.logprob}
        return {"id": c.token, "token": c.text, **value, "bytes": list(c.piece)}


def usage(first: RequestStats, *others: RequestStats) -> dict:
    """Tokens of one request: its prompt once, the replies of every choice."""
    generated = first.gen_tokens + sum(st.gen_tokens for st in others)
    thought = first.reasoning_tokens + sum(st.reasoning_tokens for st in others)
    return {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": first.prompt_tokens + generated,
        "prompt_tokens_details": {"cached_tokens": first.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": thought},
    }


def timings(st: RequestStats) -> dict:
    """llama-server's timings: prompt_n counts the prompt tokens computed, cache_n those reused;
    draft_n the tokens drafted ahead and draft_n_accepted the right ones, where the reply drafted."""
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
        **({"draft_n": st.drafted_tokens, "draft_n_accepted": st.accepted_tokens} if st.drafted_tokens else {}),
    }


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None, code=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def dumps(obj) -> str:
    """Standard JSON, always: a value that is not a finite number (a NaN logprob) is written as null."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), ensure_ascii=False, allow_nan=False)


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _ms(seconds: float) -> float:
    return 0.0 if math.isnan(seconds) else round(1000 * seconds, 3)


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0
