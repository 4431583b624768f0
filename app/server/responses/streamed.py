"""A reply on the Responses API, streamed: its thoughts, text and calls as output items and their events."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tool_parse import ToolStream
from .items import function_call, new_item_id

if TYPE_CHECKING:
    from .shape import ResponseShape


class StreamedItems:
    """A reply, streamed: its output items opened as it shows what they are (a reasoning item for a
    thinking model's thoughts, a message for text, a function_call for each call, as ToolStream's
    deltas say where there are tools), each closed before the next opens, as OpenAI's are."""

    def __init__(self, shape: ResponseShape):
        self.shape = shape
        tools = shape.asked.job.tools
        self.stream = ToolStream(tools.syntax, tools.new_id) if tools is not None else None
        self.text = ""  # the answer so far
        self.items: list[dict] = []  # the output so far; the last may still be open
        self.is_open = False

    def think(self, text: str) -> list[dict]:
        """The events for more of the reply's thoughts."""
        events = []
        if not (self.is_open and self.items[-1]["type"] == "reasoning"):
            events = self._open(
                {"id": new_item_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
            )
        last, index = self.items[-1], len(self.items) - 1
        last["content"] = [{"type": "reasoning_text", "text": (last["content"] or [{"text": ""}])[0]["text"] + text}]
        return events + [self.shape.thought_delta(text, last["id"], index)]

    def feed(self, text: str, final: bool = False) -> list[dict]:
        """The events for more of the reply's answer."""
        self.text += text
        if self.stream is None:
            return self._text(text) if text else []
        events = []
        for delta in self.stream.feed(self.text, final):
            if "content" in delta:
                events += self._text(delta["content"])
                continue
            (call,) = delta["tool_calls"]
            if "id" in call:  # a call's name is whole: its item opens
                events += self._open(function_call(new_item_id("fc"), call["id"], call["function"]["name"], "", "in_progress"))
            else:  # more of the last call's arguments
                events += self._arguments(call["function"]["arguments"])
        return events

    def finish(self, status: str) -> list[dict]:
        """The events for the rest of the reply, then its last item closed with the reply's status; a
        reply of no text nor calls has one empty message, as when it is not streamed."""
        events = self.feed("", final=True) if self.stream is not None else []
        if not any(item["type"] != "reasoning" for item in self.items):
            events += self._open(self.shape.item("", "in_progress", new_item_id("msg")))
        return events + self._close(status)

    def _close(self, status: str) -> list[dict]:
        if not self.is_open:
            return []
        self.is_open = False
        item, index = {**self.items[-1], "status": status}, len(self.items) - 1
        self.items[-1] = item
        if item["type"] == "message":
            return self.shape.message_closed(item, index)
        if item["type"] == "reasoning":
            return self.shape.thoughts_closed(item, index)
        where = {"item_id": item["id"], "output_index": index}
        return [
            self.shape.event("response.function_call_arguments.done", **where, arguments=item["arguments"]),
            self.shape.event("response.output_item.done", output_index=index, item=item),
        ]

    def _open(self, item: dict) -> list[dict]:
        events = self._close("completed")
        self.items.append(item)
        self.is_open = True
        index = len(self.items) - 1
        if item["type"] == "message":
            return events + self.shape.message_opened(item["id"], index)
        if item["type"] == "reasoning":
            return events + self.shape.thoughts_opened(item["id"], index)
        # a copy: the event may go out after more of the item's arguments came
        added = self.shape.event("response.output_item.added", output_index=index, item=dict(item))
        return events + [added]

    def _text(self, text: str) -> list[dict]:
        events = []
        if not (self.is_open and self.items[-1]["type"] == "message"):
            item_id = self.shape.item_id if not self.items else new_item_id("msg")  # as the whole response names it
            events = self._open(self.shape.item("", "in_progress", item_id))
        last = self.items[-1]
        last["content"] = [{**last["content"][0], "text": last["content"][0]["text"] + text}]
        return events + [self.shape.delta(text, last["id"], len(self.items) - 1)]

    def _arguments(self, fragment: str) -> list[dict]:
        last, index = self.items[-1], len(self.items) - 1
        last["arguments"] += fragment
        return [
            self.shape.event("response.function_call_arguments.delta", item_id=last["id"], output_index=index, delta=fragment)
        ]
