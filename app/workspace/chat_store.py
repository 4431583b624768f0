"""Chats as plain data, saved one JSON file each as they change (durably: a kill or a power cut leaves
the old file or the new one, never half of one); export to Markdown or JSON."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import os
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from app.engine.image_file import mime_of
from app.engine.images import Image, with_images

NOTICE = "notice"  # a line for the user (an error, a cut-short reply); never sent to the model
CUT_BY_EXIT = "cut short: the app stopped while this reply was streaming"
CORRUPT = ".corrupt-"  # in the name of a file moved aside because it could not be read


@dataclass
class Chat:
    chat_id: str
    name: str
    # {"role": ..., "content": ...}; a reply cut short (stopped by an error or a kill) also has "cut": True,
    # a reply asked for as JSON (an output format) "json": True: it is shown formatted, not later prose;
    # a thinking model's reply its thoughts, "reasoning", and how long and how many tokens they took,
    # "reasoning_s" and "reasoning_tokens"; a user's turn its pictures, "images" (engine `Image`s,
    # shown before its text; saved in the file as base64 with their SHA-256)
    messages: list[dict] = field(default_factory=list)
    model: str = ""  # the model (file name) of the last reply
    updated: float = 0.0  # when the chat last changed, seconds since the epoch
    streaming: str | None = None  # the reply in progress, saved with the chat so a kill loses only its last seconds
    streaming_thoughts: str = ""  # its thoughts so far

    @classmethod
    def new(cls, name: str) -> Chat:
        return cls(uuid.uuid4().hex, name, updated=time.time())

    @property
    def turns(self) -> int:
        return sum(m["role"] == "user" for m in self.messages)

    def for_model(self, system_prompt: str) -> list[dict[str, str]]:
        """What the engine gets: the system prompt first if set, then the turns (no notices), a reply's
        thoughts as its `reasoning_content` (its template shows them again, or drops them)."""
        turns = [_for_model(m) for m in self.messages if m["role"] != NOTICE]
        return ([{"role": "system", "content": system_prompt}] if system_prompt.strip() else []) + turns

    def as_text(self, system_prompt: str = "") -> str:
        """The chat as one text for a model to continue (completion mode): the system prompt, then
        what was written and what the model wrote, joined as they are (no notices)."""
        return system_prompt + "".join(m["content"] for m in self.messages if m["role"] != NOTICE)

    def add(self, role: str, content: str, json: bool = False, thoughts: Thought | None = None, images=()) -> None:
        message = {"role": role, "content": content, "json": True} if json else {"role": role, "content": content}
        if images:
            message["images"] = tuple(images)
        self.messages.append(message | (thoughts.fields() if thoughts else {}))
        self.touch()

    def add_cut_reply(self, text: str, why: str, thoughts: Thought | None = None) -> None:
        """A reply that ended before its end (an error, a kill): its text, marked cut, then why."""
        self.messages.append({"role": "assistant", "content": text, "cut": True} | (thoughts.fields() if thoughts else {}))
        self.add(NOTICE, why)

    def last_user_images(self) -> tuple[Image, ...]:
        """The pictures of the last user turn (given back with its text when it was refused)."""
        users = [m for m in self.messages if m["role"] == "user"]
        return tuple(users[-1].get("images", ())) if users else ()

    def drop_last_reply(self) -> str | None:
        """Remove everything after the last user message; return that message (Regenerate)."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i]["role"] == "user":
                del self.messages[i + 1 :]
                self.touch()
                return self.messages[i]["content"]
        return None

    def clear(self) -> None:
        self.messages.clear()
        self.touch()

    def rename(self, name: str) -> None:
        self.name = name
        self.touch()

    def touch(self) -> None:
        self.updated = time.time()

    def to_json(self) -> dict:
        messages = [_saved(m) for m in self.messages]
        if self.streaming is not None:
            messages.append({"role": "assistant", "content": self.streaming, "streaming": True})
            if self.streaming_thoughts:
                messages[-1]["reasoning"] = self.streaming_thoughts
        return {"chat_id": self.chat_id, "name": self.name, "model": self.model, "updated": self.updated, "messages": messages}

    @classmethod
    def from_json(cls, data: dict) -> Chat:
        """Fields added later have defaults, so older files load; a reply saved while it streamed
        (the app was killed) comes back as a cut reply with a notice."""
        chat = cls(str(data["chat_id"]), str(data.get("name", "Chat")), model=str(data.get("model", "")))
        for m in data.get("messages", []):
            role, content, thoughts = str(m["role"]), str(m["content"]), Thought.of(m)
            if m.get("streaming"):
                chat.add_cut_reply(content, CUT_BY_EXIT, thoughts)
            elif m.get("cut"):
                chat.messages.append({"role": role, "content": content, "cut": True} | (thoughts.fields() if thoughts else {}))
            else:
                chat.add(role, content, json=m.get("json") is True, thoughts=thoughts, images=_pictures(m.get("images")))
        chat.updated = float(data.get("updated", 0.0))
        return chat


@dataclass(frozen=True)
class Thought:
    """A reply's thoughts (a thinking model's), how long it thought and for how many tokens."""

    text: str
    seconds: float = math.nan
    tokens: int = 0

    def fields(self) -> dict:
        """As a message holds them (none for a reply that did not think)."""
        if not self.text:
            return {}
        figures = {"reasoning_s": round(self.seconds, 3)} if math.isfinite(self.seconds) else {}
        return {"reasoning": self.text, **figures, "reasoning_tokens": self.tokens}

    @classmethod
    def of(cls, message: dict) -> Thought | None:
        """A saved message's thoughts; None when it has none (figures of the wrong type are dropped)."""
        text = message.get("reasoning")
        if not isinstance(text, str) or not text:
            return None
        seconds, tokens = message.get("reasoning_s"), message.get("reasoning_tokens")
        seconds = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else math.nan
        return cls(text, seconds, tokens if type(tokens) is int and tokens >= 0 else 0)


def _for_model(message: dict) -> dict:
    turn = with_images(message["content"], message.get("images", ()), message["role"])
    if message.get("reasoning"):
        turn["reasoning_content"] = message["reasoning"]
    return turn


@lru_cache(maxsize=256)  # a chat is saved every few seconds while it streams: each picture encoded once
def picture_text(image: Image) -> str:
    return base64.b64encode(image.data).decode("ascii")


def _saved(message: dict) -> dict:
    """A message as its file holds it: its pictures as base64 with their SHA-256."""
    if not message.get("images"):
        return message
    return {**message, "images": [{"sha256": image.digest, "data": picture_text(image)} for image in message["images"]]}


def _pictures(saved) -> tuple[Image, ...]:
    """A saved message's pictures; an entry that is not one (an edited file) is left out, the chat stays."""
    if not isinstance(saved, list):
        return ()
    pictures = []
    for entry in saved:
        if isinstance(entry, dict) and isinstance(entry.get("data"), str):
            try:
                pictures.append(Image.of(base64.b64decode(entry["data"], validate=True)))
            except (binascii.Error, ValueError):
                continue
    return tuple(pictures)


class UnreadableChat(Exception):
    """A chat file that could not be read; it was moved aside (never overwritten) to `kept_as`."""

    def __init__(self, chat_id: str, kept_as: Path, reason: str):
        super().__init__(f"The chat file {chat_id}.json could not be read ({reason}); it was kept as {kept_as.name}.")
        self.kept_as, self.reason = kept_as, reason


class ChatStore:
    """One `<chat_id>.json` per chat in `folder`/chats. Saves raise OSError (the window tells the user)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder) / "chats"

    def path(self, chat_id: str) -> Path:
        return self.folder / f"{chat_id}.json"

    def save(self, chat: Chat) -> bool:
        """Write a temp file, fsync it, rename it over the old one, fsync the folder (the rename itself).
        True when the text had to be repaired: lone surrogates (pasted text, a remote model) are saved as U+FFFD."""
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.path(chat.chat_id)
        tmp = final.with_name(final.name + ".tmp")
        text = json.dumps(chat.to_json(), ensure_ascii=False, indent=1)
        repaired = _repair_surrogates(text)
        data = repaired.encode("utf-8")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_folder(self.folder)
        return repaired != text

    def load(self, chat_id: str) -> Chat | None:
        """The saved chat, or None when there is none; raises UnreadableChat after moving a bad file aside."""
        path = self.path(chat_id)
        if not path.exists():
            return None
        return self._read(path)

    def chats(self) -> tuple[list[Chat], list[UnreadableChat]]:
        """Every saved chat, and the files that could not be read (moved aside)."""
        chats, unreadable = [], []
        for path in sorted(self.folder.glob("*.json")):
            if CORRUPT in path.name:
                continue
            try:
                chats.append(self._read(path))
            except UnreadableChat as e:
                unreadable.append(e)
        return chats, unreadable

    def delete(self, chat_id: str) -> None:
        self.path(chat_id).unlink(missing_ok=True)
        _fsync_folder(self.folder)

    def _read(self, path: Path) -> Chat:
        try:
            chat = Chat.from_json(json.loads(path.read_text(encoding="utf-8")))
        except OSError as e:
            raise UnreadableChat(path.stem, self._set_aside(path), e.strerror or str(e)) from e
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:  # RecursionError: nested too deeply
            raise UnreadableChat(path.stem, self._set_aside(path), _reason(e)) from e
        chat.chat_id = path.stem  # the file is the chat, whatever a copied file says inside
        chat.updated = chat.updated or path.stat().st_mtime  # older files have no date of their own
        return chat

    def _set_aside(self, path: Path) -> Path:
        """Rename `path` to `<id>.corrupt-<time>.json` (a name already taken gets a number); where it
        cannot be renamed it stays as it is. Either way the window gives the fresh chat a new id."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in itertools.count(1):
            kept = path.with_name(f"{path.stem}{CORRUPT}{stamp}{'' if n == 1 else f'-{n}'}.json")
            if not kept.exists():  # the data folder's lock keeps other writers out between check and rename
                break
        try:
            os.replace(path, kept)
        except OSError:
            return path
        return kept


class PendingSaves:
    """Saves that never raise: a chat that could not be written (disk full, a read-only folder) waits
    here and is written with the next save or `retry`. `failure` is the last error while any wait;
    `repaired`, the chats whose text the last save or retry had to repair (see `ChatStore.save`)."""

    def __init__(self, store: ChatStore):
        self.store = store
        self._waiting: dict[str, Chat] = {}
        self.failure: OSError | None = None
        self.repaired: list[Chat] = []

    def save(self, chat: Chat) -> None:
        self._waiting[chat.chat_id] = chat
        self.retry()

    def retry(self) -> None:
        self.repaired = []
        for chat_id, chat in list(self._waiting.items()):
            try:
                if self.store.save(chat):
                    self.repaired.append(chat)
            except OSError as e:
                self.failure = e
                return
            del self._waiting[chat_id]
        self.failure = None

    def forget(self, chat_id: str) -> None:
        """A deleted chat is not written again."""
        self._waiting.pop(chat_id, None)

    @property
    def is_waiting(self) -> bool:
        return bool(self._waiting)


def _reason(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON at line {error.lineno}, column {error.colno}"
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return f"not a chat file: {type(error).__name__} {error}"


def _repair_surrogates(text: str) -> str:
    """`text` as UTF-8 can hold it: split surrogate pairs joined, lone surrogates replaced by U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _fsync_folder(folder: Path) -> None:
    """A rename or a removal is durable once its folder is synced (POSIX; Windows cannot open folders)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def to_markdown(chat: Chat) -> str:
    titles = {"user": "You", "assistant": "Assistant", "system": "System", NOTICE: "Notice"}
    parts = [f"# {chat.name}\n"]
    for m in chat.messages:
        thought = f"<details><summary>Thinking</summary>\n\n{m['reasoning']}\n\n</details>\n\n" if m.get("reasoning") else ""
        shown = "".join(
            f"![picture](data:{mime_of(image.data)};base64,{picture_text(image)})\n\n" for image in m.get("images", ())
        )
        parts.append(f"**{titles.get(m['role'], m['role'])}:**\n\n{thought}{shown}{m['content']}\n")
    return "\n".join(parts)


MARKDOWN_SUFFIXES = (".md", ".markdown")
EXPORT_SUFFIXES = (*MARKDOWN_SUFFIXES, ".json")


def export_chat(chat: Chat, path: str) -> None:
    """Markdown for .md files, JSON otherwise; raises OSError when the file cannot be written."""
    if path.lower().endswith(MARKDOWN_SUFFIXES):
        text = to_markdown(chat)
    else:
        text = json.dumps(chat.to_json(), ensure_ascii=False, indent=1)
    Path(path).write_text(_repair_surrogates(text), encoding="utf-8")
