"""Chats as plain data, saved one JSON file each as they change; export to Markdown or JSON."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

NOTICE = "notice"  # a line for the user (an error, a cut-short reply); never sent to the model


@dataclass
class Chat:
    chat_id: str
    name: str
    messages: list[dict[str, str]] = field(default_factory=list)  # {"role": ..., "content": ...}

    @classmethod
    def new(cls, name: str) -> "Chat":
        return cls(uuid.uuid4().hex, name)

    def for_model(self, system_prompt: str) -> list[dict[str, str]]:
        """What the engine gets: the system prompt first if set, then the turns (no notices)."""
        turns = [{"role": m["role"], "content": m["content"]} for m in self.messages if m["role"] != NOTICE]
        return ([{"role": "system", "content": system_prompt}] if system_prompt.strip() else []) + turns

    def add(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})

    def drop_last_reply(self) -> str | None:
        """Remove everything after the last user message; return that message (Regenerate)."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i]["role"] == "user":
                del self.messages[i + 1 :]
                return self.messages[i]["content"]
        return None

    def to_json(self) -> dict:
        return {"chat_id": self.chat_id, "name": self.name, "messages": self.messages}

    @classmethod
    def from_json(cls, data: dict) -> "Chat":
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in data.get("messages", [])]
        return cls(str(data["chat_id"]), str(data.get("name", "Chat")), messages)


class ChatStore:
    """One `<chat_id>.json` per chat in `folder`; writes go through a temp file so a kill leaves no half file."""

    def __init__(self, folder: Path):
        self.folder = Path(folder) / "chats"

    def path(self, chat_id: str) -> Path:
        return self.folder / f"{chat_id}.json"

    def save(self, chat: Chat) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path(chat.chat_id).with_suffix(".tmp")
        tmp.write_text(json.dumps(chat.to_json(), ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, self.path(chat.chat_id))

    def load(self, chat_id: str) -> Chat | None:
        """The saved chat, or None when it is missing or unreadable (a fresh chat replaces it)."""
        try:
            return Chat.from_json(json.loads(self.path(chat_id).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def to_markdown(chat: Chat) -> str:
    titles = {"user": "You", "assistant": "Assistant", "system": "System", NOTICE: "Notice"}
    parts = [f"# {chat.name}\n"]
    for m in chat.messages:
        parts.append(f"**{titles.get(m['role'], m['role'])}:**\n\n{m['content']}\n")
    return "\n".join(parts)


def export_chat(chat: Chat, path: str) -> None:
    """Markdown for .md files, JSON otherwise."""
    if path.lower().endswith((".md", ".markdown")):
        text = to_markdown(chat)
    else:
        text = json.dumps(chat.to_json(), ensure_ascii=False, indent=1)
    Path(path).write_text(text, encoding="utf-8")
