"""A pane's settings: its sliders, system prompt, mode and where it chats (the local engine or a URL)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.engine.params import Priority, SamplingParams
from app.engine.sampling_fields import SLIDER_FIELDS
from app.remote import Endpoint

PROBS_SHOWN = 5  # rivals a token shows on hover


@dataclass(frozen=True)
class PaneParams:
    """A pane's sliders, its system prompt (engine defaults) and where it chats (the local engine or a URL).
    Its slider fields are sampling_fields.py's fields with a slider, by name."""

    temperature: float = SamplingParams.temperature
    top_p: float = SamplingParams.top_p
    top_k: int = SamplingParams.top_k
    min_p: float = SamplingParams.min_p
    repeat_penalty: float = SamplingParams.repeat_penalty
    max_tokens: int = SamplingParams.max_tokens
    seed: int | None = SamplingParams.seed
    system_prompt: str = ""
    high_priority: bool = False  # served first under the priority policy
    show_probs: bool = False  # the transcript tints each token of a reply by its probability
    completion: bool = False  # the chat is one text the model continues (a base model), not turns
    builtin_template: bool = False  # the chat rendered with the built-in ChatML template, not the model's
    model: str = ""  # the loaded model it talks to, by name ("": the first loaded)
    remote_url: str = ""  # empty: the local engine
    remote_model: str = ""
    remote_api_key: str = ""
    remote_api: str = "chat"  # "chat": /chat/completions; "responses": /responses (continues by previous_response_id)

    @property
    def priority(self) -> Priority:
        return Priority.HIGH if self.high_priority else Priority.NORMAL

    def endpoint(self) -> Endpoint | None:
        """The remote endpoint this pane chats with; None for the local engine."""
        if not self.remote_url.strip():
            return None
        return Endpoint(self.remote_url.strip(), self.remote_model.strip(), self.remote_api_key.strip(), self.remote_api)

    def sampling(self) -> SamplingParams:
        sliders = {f.name: getattr(self, f.name) for f in SLIDER_FIELDS}
        return SamplingParams(n_probs=PROBS_SHOWN if self.show_probs else None, seed=self.seed, **sliders)

    def with_(self, **changes) -> PaneParams:
        return replace(self, **changes)
