"""A response of the Responses API: its object at each stage, its stream events, and what a stored one keeps."""

from __future__ import annotations

import time
import uuid

from app.engine.events import FinishEvent, FinishReason

from ..tool_calls import reply_of
from .items import function_call, new_item_id
from .request import ResponseRequest
from .store import Kept


class ResponseShape:
    """One response's identity, its object at each stage and its stream events, numbered in order."""

    def __init__(self, asked: ResponseRequest, model: str):
        self.asked = asked
        self.model = model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.created_at = int(time.time())
        self.sequence_number = 0

    def response(
        self, status: str = "in_progress", final: FinishEvent | None = None, error: dict | None = None, output: list | None = None
    ) -> dict:
        params = self.asked.job.params
        cut = final is not None and status_of(final) == "incomplete"
        if output is None:
            output = self.output_of(final.text, status_of(final)) if final is not None else []
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "instructions": self.asked.instructions,
            "max_output_tokens": self.asked.max_output_tokens,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.asked.tooling["parallel_tool_calls"],
            "previous_response_id": self.asked.previous_response_id,
            "store": self.asked.store,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "text": self.asked.text,
            "tool_choice": self.asked.tooling["tool_choice"],
            "tools": self.asked.tooling["tools"],
            "truncation": "disabled",
            "metadata": self.asked.metadata,
            "user": self.asked.user,
            "usage": usage(final) if final is not None else None,
        }

    def finished(self, final: FinishEvent, output: list | None = None) -> dict:
        return self.response(status_of(final), final, output=output)

    def output_of(self, text: str, status: str) -> list[dict]:
        """A whole reply's output items: its message, or (with tools) its text if any and a function_call per call."""
        tools = self.asked.job.tools
        if tools is None:
            return [self.item(text, status)]
        content, calls = reply_of(text, tools)
        message = [self.item(content, status)] if content is not None else []
        return message + [
            function_call(new_item_id("fc"), c["id"], c["function"]["name"], c["function"]["arguments"], status) for c in calls
        ]

    def item(self, text: str | None, status: str, item_id: str | None = None) -> dict:
        content = [] if text is None else [part(text)]
        return {"id": item_id or self.item_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[dict]:
        """The response begun and, without tools, its one message item opened (with tools, the reply's
        items open as its text shows what they are)."""
        begun = [
            self.event("response.created", response=self.response()),
            self.event("response.in_progress", response=self.response()),
        ]
        return begun if self.asked.job.tools is not None else begun + self.message_opened(self.item_id, 0)

    def message_opened(self, item_id: str, index: int) -> list[dict]:
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self.event("response.output_item.added", output_index=index, item=self.item(None, "in_progress", item_id)),
            self.event("response.content_part.added", **where, part=part("")),
        ]

    def delta(self, text: str, item_id: str | None = None, index: int = 0) -> dict:
        where = {"item_id": item_id or self.item_id, "output_index": index, "content_index": 0}
        return self.event("response.output_text.delta", **where, delta=text, logprobs=[])

    def closing_events(self, whole: dict) -> list[dict]:
        """The message item closed (without tools: they close as they come), then the response."""
        items = self.message_closed(whole["output"][0], 0) if self.asked.job.tools is None else []
        return items + [self.ended(whole)]

    def message_closed(self, item: dict, index: int) -> list[dict]:
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text = item["content"][0]["text"]
        return [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=part(text)),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def ended(self, whole: dict) -> dict:
        return self.event("response.completed" if whole["status"] == "completed" else "response.incomplete", response=whole)

    def failure_events(self, error: dict) -> list[dict]:
        """A fault after the status line: an `error` event, then the response failed."""
        code = error.get("code") or error.get("type")
        failed = self.response("failed", error={"code": code, "message": error["message"]})
        return [
            self.event("error", code=code, message=error["message"], param=error.get("param")),
            self.event("response.failed", response=failed),
        ]


def status_of(final: FinishEvent) -> str:
    return "incomplete" if final.reason in (FinishReason.LENGTH, FinishReason.CONTEXT) else "completed"


def part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def usage(final: FinishEvent) -> dict:
    st = final.stats
    return {
        "input_tokens": st.prompt_tokens,
        "input_tokens_details": {"cached_tokens": st.cached_tokens},
        "output_tokens": st.gen_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": st.prompt_tokens + st.gen_tokens,
    }


def kept_of(asked: ResponseRequest, whole: dict) -> Kept:
    """What a stored response keeps: its object, and its conversation with the reply (its text and
    calls, in the chat API's form) for the next turn."""
    output = whole["output"]
    text = "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])
    calls = [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in output
        if c["type"] == "function_call"
    ]
    reply = {"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {})
    return Kept(whole, asked.job.conversation_id, asked.turns + (reply,))
