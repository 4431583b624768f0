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
            output = self.output_of(final) if final is not None else []
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
            "reasoning": self.asked.reasoning,
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

    def output_of(self, final: FinishEvent) -> list[dict]:
        """A whole reply's output items: its thoughts (a thinking model's), then its message, or (with
        tools) its text if any and a function_call per call."""
        status, tools = status_of(final), self.asked.job.tools
        thoughts = [reasoning_item(new_item_id("rs"), final.reasoning, status)] if final.reasoning else []
        if tools is None:
            return thoughts + [self.item(final.text, status)]
        content, calls = reply_of(final.text, tools)
        message = [self.item(content, status)] if content is not None else []
        return (
            thoughts
            + message
            + [
                function_call(new_item_id("fc"), c["id"], c["function"]["name"], c["function"]["arguments"], status)
                for c in calls
            ]
        )

    def item(self, text: str | None, status: str, item_id: str | None = None) -> dict:
        content = [] if text is None else [part(text)]
        return {"id": item_id or self.item_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence_number, **fields}
        self.sequence_number += 1
        return event

    def opening_events(self) -> list[dict]:
        """The response begun; its items open as the reply's text shows what they are (streamed.py)."""
        return [
            self.event("response.created", response=self.response()),
            self.event("response.in_progress", response=self.response()),
        ]

    def message_opened(self, item_id: str, index: int) -> list[dict]:
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self.event("response.output_item.added", output_index=index, item=self.item(None, "in_progress", item_id)),
            self.event("response.content_part.added", **where, part=part("")),
        ]

    def thoughts_opened(self, item_id: str, index: int) -> list[dict]:
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        return [
            self.event("response.output_item.added", output_index=index, item=reasoning_item(item_id, None, "in_progress")),
            self.event("response.content_part.added", **where, part=reasoning_part("")),
        ]

    def delta(self, text: str, item_id: str | None = None, index: int = 0) -> dict:
        where = {"item_id": item_id or self.item_id, "output_index": index, "content_index": 0}
        return self.event("response.output_text.delta", **where, delta=text, logprobs=[])

    def thought_delta(self, text: str, item_id: str, index: int) -> dict:
        return self.event("response.reasoning_text.delta", item_id=item_id, output_index=index, content_index=0, delta=text)

    def closing_events(self, whole: dict) -> list[dict]:
        """The response ended (its items closed as they came)."""
        return [self.ended(whole)]

    def message_closed(self, item: dict, index: int) -> list[dict]:
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text = item["content"][0]["text"]
        return [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=part(text)),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def thoughts_closed(self, item: dict, index: int) -> list[dict]:
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text = item["content"][0]["text"]
        return [
            self.event("response.reasoning_text.done", **where, text=text),
            self.event("response.content_part.done", **where, part=reasoning_part(text)),
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


def reasoning_part(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    """A thinking model's thoughts as an output item: its text whole (no summary is made)."""
    content = [] if text is None else [reasoning_part(text)]
    return {"id": item_id, "type": "reasoning", "summary": [], "content": content, "status": status}


def usage(final: FinishEvent) -> dict:
    st = final.stats
    return {
        "input_tokens": st.prompt_tokens,
        "input_tokens_details": {"cached_tokens": st.cached_tokens},
        "output_tokens": st.gen_tokens,
        "output_tokens_details": {"reasoning_tokens": st.reasoning_tokens},
        "total_tokens": st.prompt_tokens + st.gen_tokens,
    }


def kept_of(asked: ResponseRequest, whole: dict) -> Kept:
    """What a stored response keeps: its object, and its conversation with the reply (its text and
    calls, in the chat API's form) for the next turn."""
    output = whole["output"]
    text = "".join(p["text"] for item in output if item["type"] == "message" for p in item["content"])
    thoughts = "".join(p["text"] for item in output if item["type"] == "reasoning" for p in item["content"])
    calls = [
        {"id": c["call_id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in output
        if c["type"] == "function_call"
    ]
    reply = {"role": "assistant", "content": text} | ({"tool_calls": calls} if calls else {})
    if thoughts:  # given back to a thinking model's template as its own (llama.cpp's reasoning_content)
        reply["reasoning_content"] = thoughts
    return Kept(whole, asked.job.conversation_id, asked.turns + (reply,))
