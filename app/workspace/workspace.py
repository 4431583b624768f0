"""The panes and their rules, without Qt: which pane is free, opening, renaming and deleting chats,
branches, fan-out and broadcast, and what is saved as things change.

The window observes the signals and draws; tests drive a Workspace headless against a scripted
reply source. A pane is a `PaneSession`; the list's order is the grid's.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from .chat_store import NOTICE, Chat, ChatStore, PendingSaves, UnreadableChat
from .evented import Signal
from .metrics import MetricsStore
from .pane_params import PaneParams
from .presets import Preset
from .session import Branch, PaneSession
from .source import Sources

DEFAULT_PANES = 4
MAX_PANES = 8
PANE_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#e377c2", "#8c564b")


class PaneMemory(Protocol):
    """What is remembered of the panes between runs (the window's settings file)."""

    pane_ids: list[str]

    def pane_params(self, chat_id: str) -> PaneParams: ...
    def set_pane_params(self, chat_id: str, params: PaneParams) -> None: ...
    def remove_pane_params(self, chat_id: str) -> None: ...
    def draft(self, chat_id: str) -> str: ...
    def set_draft(self, chat_id: str, text: str) -> None: ...


class Workspace:
    def __init__(self, sources: Sources, store: ChatStore, memory: PaneMemory, metrics: MetricsStore, capacity: int):
        self.sources, self.store, self.memory, self.metrics = sources, store, memory, metrics
        self.saves = PendingSaves(store)
        self.sessions: list[PaneSession] = []
        self.completion = False  # new panes continue text: the model has no chat template
        self._capacity = min(MAX_PANES, capacity)
        self.pane_added = Signal()  # PaneSession, index
        self.pane_removed = Signal()  # PaneSession
        self.chat_listed = Signal()  # Chat, is_open: its row in the chat list is new or changed
        self.chat_unlisted = Signal()  # chat id
        self.saved = Signal()  # after a save or a retry: saves.failure and saves.repaired tell how it went
        self.said = Signal()  # str: for the status bar
        self.said_in_list = Signal()  # str: for the chat list, about what was asked of it

    # -- panes ---------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """How many panes there may be: the engine's parallel sequences, at most MAX_PANES."""
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        self._capacity = min(MAX_PANES, capacity)

    def restore(self, pane_count: int | None = None) -> None:
        """The panes of the last run, with their chats (or `pane_count` panes)."""
        ids = self.memory.pane_ids
        count = min(pane_count or len(ids) or DEFAULT_PANES, self.capacity)
        for chat_id in ids[:count]:
            self.add_pane(self._restored_chat(chat_id))
        while len(self.sessions) < count:
            self.add_pane()

    def _restored_chat(self, chat_id: str) -> Chat:
        """The saved chat of a pane; a file that cannot be read is kept aside and the pane gets a new
        chat (a new id, so that file is never overwritten), with its settings and a notice."""
        try:
            return self.store.load(chat_id) or Chat(chat_id, self._free_name())
        except UnreadableChat as e:
            chat = Chat.new(self._free_name())
            chat.add(
                NOTICE,
                f"The saved chat could not be read ({e.reason}); its file was kept as {e.kept_as.name}. This is a new chat.",
            )
            self.memory.set_pane_params(chat.chat_id, self.memory.pane_params(chat_id))
            return chat

    def add_pane(self, chat: Chat | None = None, index: int | None = None) -> PaneSession | None:
        """A pane for `chat` (a new one: None) at `index` (the end: None); None when there is no room."""
        if len(self.sessions) >= self.capacity:
            return None
        if chat is None:
            chat, params = Chat.new(self._free_name()), PaneParams(completion=self.completion)
        else:
            params = self.memory.pane_params(chat.chat_id)
        colour = next(c for c in PANE_COLOURS if c not in {s.colour for s in self.sessions})
        session = PaneSession(chat, params, colour, self.sources, self.metrics)
        session.draft = self.memory.draft(chat.chat_id)
        session.chat_changed.connect(self.save)
        session.params_changed.connect(lambda p, key=chat.chat_id: self.memory.set_pane_params(key, p))
        index = len(self.sessions) if index is None else index
        self.sessions.insert(index, session)
        self._remember_panes()
        self.save(chat)
        self.pane_added.emit(session, index)
        return session

    def set_draft(self, session: PaneSession, text: str) -> None:
        session.draft = text
        self.memory.set_draft(session.key, text)  # as typed: a crash keeps it too

    async def close_pane(self, session: PaneSession) -> None:
        """Stop the pane's reply, then remove the pane; its chat stays in the chat list."""
        if session in self.sessions:
            await self._remove(session)

    async def _remove(self, session: PaneSession) -> None:
        """Remove a pane once its reply has let go. A chat with no messages has nothing to reopen, so
        its file goes; any other stays saved and listed."""
        self.sessions.remove(session)
        self._remember_panes()
        await session.shutdown()
        self.metrics.remove_pane(session.key)
        self.pane_removed.emit(session)
        if session.chat.messages:
            self.chat_listed.emit(session.chat, False)
        else:
            self._forget_chat(session.key)

    async def fresh_chats(self) -> None:
        """A new blank chat in every pane, in place; the chats they showed stay in the chat list."""
        for index, session in enumerate(list(self.sessions)):
            if not session.is_blank or session.is_busy:
                await self._remove(session)
                self.add_pane(None, index)

    def free_pane(self) -> PaneSession | None:
        """The first pane that loses nothing if it gets another chat: idle, no messages, nothing typed."""
        return next((s for s in self.sessions if not s.is_busy and s.is_blank), None)

    async def _pane_for(self, chat: Chat) -> PaneSession | None:
        """A pane for `chat`: in place of a free pane, else a new one if there is room."""
        free = self.free_pane()
        if free is None:
            return self.add_pane(chat)
        index = self.sessions.index(free)
        await self._remove(free)
        return self.add_pane(chat, index)

    def pane_of(self, chat_id: str) -> PaneSession | None:
        return next((s for s in self.sessions if s.key == chat_id), None)

    def copy_settings(self, source: PaneSession) -> None:
        for session in self.sessions:
            if session is not source:
                session.set_params(source.params)

    def apply_preset(self, preset: Preset, to: PaneSession | None = None) -> None:
        """A preset's knobs on one pane (`to`), or on every pane; their other settings stay."""
        for session in self.sessions if to is None else [to]:
            session.set_params(preset.applied_to(session.params))

    def suit_blank_panes(self, completion: bool) -> None:
        """A base model (no chat template) continues text: blank local panes go to completion mode,
        and back to chat for a model with a template; a pane with a chat keeps its mode."""
        self.completion = completion
        for s in self.sessions:
            if s.is_blank and s.params.completion != completion and s.params.endpoint() is None:
                s.set_params(s.params.with_(completion=completion))

    def _free_name(self) -> str:
        used = {s.chat.name for s in self.sessions}
        return next(f"Pane {i}" for i in range(1, MAX_PANES + 2) if f"Pane {i}" not in used)

    def _remember_panes(self) -> None:
        self.memory.pane_ids = [s.key for s in self.sessions]

    # -- sending -------------------------------------------------------------------------------

    def broadcast(self, text: str) -> int:
        """Send `text` to every idle pane at once; the number of panes that took it."""
        return sum(s.send(text) for s in self.sessions)

    def stop_all(self) -> None:
        for s in self.sessions:
            s.stop()

    @property
    def is_idle(self) -> bool:
        return not any(s.is_busy for s in self.sessions)

    async def branch(self, source: PaneSession, branch: Branch) -> PaneSession | None:
        """A new chat in a free pane that goes on from another token of `source`'s reply, on its
        settings; the cells of the reply up to that token are shared, so it starts at once."""
        chat = Chat.new(f"{source.chat.name} ⑂")
        for m in branch.messages:
            if m["role"] != NOTICE:
                chat.add(m["role"], m["content"])
        session = await self._pane_for(chat)
        if session is None:
            self.said.emit(
                f"No free pane for the branch: close or clear a pane, or raise the parallel capacity ({self.capacity})."
            )
            return None
        session.set_params(source.params)
        session.go_on_from(branch)
        return session

    def fan_out(self, prompt: str, variants: list[tuple[str, PaneParams]]) -> list[PaneSession]:
        """A pane for each (name, settings), free panes first, then new ones, all sent in one go so
        the engine reads their shared prompt once; none if there are not enough panes."""
        sessions = [s for s in self.sessions if s.is_blank and not s.is_busy][: len(variants)]
        while len(sessions) < len(variants) and (session := self.add_pane()) is not None:
            sessions.append(session)
        if len(sessions) < len(variants):
            missing = len(variants) - len(sessions)
            self.said.emit(
                f"Fan out needs {len(variants)} free panes and {missing} more cannot be had: close or clear "
                f"panes, or raise the parallel capacity ({self.capacity}) in the Engine panel."
            )
            return []
        for session, (name, params) in zip(sessions, variants):
            session.rename(name)
            session.set_params(params)
            session.measure_logprobs = True
        for session in sessions:
            session.send(prompt)
        return sessions

    # -- the chats -----------------------------------------------------------------------------

    def save(self, chat: Chat) -> None:
        self.saves.save(chat)
        self.saved.emit()
        self.chat_listed.emit(chat, self.pane_of(chat.chat_id) is not None)

    def retry_saves(self) -> None:
        """Chats a failing disk kept waiting get another try."""
        if self.saves.is_waiting:
            self.saves.retry()
            self.saved.emit()

    def listed_chats(self) -> list[tuple[Chat, bool]]:
        """Every saved chat and whether a pane shows it (the panes' chats are newer than their files);
        files that cannot be read are kept aside, and said."""
        chats, unreadable = self.store.chats()
        rows = {c.chat_id: (c, False) for c in chats}
        rows.update({s.key: (s.chat, True) for s in self.sessions})
        if unreadable:
            kept = ", ".join(e.kept_as.name for e in unreadable)
            message = f"{len(unreadable)} chat file(s) could not be read and were kept aside: {kept}"
            self.said_in_list.emit(message)
            self.said.emit(message)
        return list(rows.values())

    async def open_chat(self, chat_id: str) -> PaneSession | None:
        """Show a saved chat in a free pane, else in a new pane if there is room."""
        if (session := self.pane_of(chat_id)) is not None:
            self.said_in_list.emit(f"“{session.chat.name}” is already open.")
            return session
        chat = self.load_listed(chat_id)
        if chat is None:
            return None
        session = await self._pane_for(chat)
        if session is None:
            self.said_in_list.emit(
                f"No free pane: close a pane, clear one, or raise the parallel capacity ({self.capacity}) in the Engine panel."
            )
            return None
        self.said_in_list.emit(f"Opened “{chat.name}”.")
        return session

    def rename_chat(self, chat_id: str, name: str) -> None:
        if (session := self.pane_of(chat_id)) is not None:
            session.rename(name)  # saved as it changes
        elif (chat := self.load_listed(chat_id)) is not None:
            chat.rename(name)
            self.save(chat)

    async def delete_chat(self, chat_id: str) -> None:
        """Delete a chat (the user confirmed); a pane that showed it gets a new empty chat."""
        chat = self.chat_of(chat_id)
        if (session := self.pane_of(chat_id)) is not None:
            index = self.sessions.index(session)
            await self._remove(session)
            self.add_pane(None, index)
        if self._forget_chat(chat_id) and chat is not None:
            self.said_in_list.emit(f"Deleted “{chat.name}”.")

    def chat_of(self, chat_id: str) -> Chat | None:
        """The chat shown in a pane, or read from its file."""
        session = self.pane_of(chat_id)
        return session.chat if session is not None else self.load_listed(chat_id)

    def load_listed(self, chat_id: str) -> Chat | None:
        """A listed chat from its file; one that is gone or unreadable leaves the list, saying why."""
        try:
            chat = self.store.load(chat_id)
        except UnreadableChat as e:
            self.said_in_list.emit(str(e))
            chat = None
        else:
            if chat is None:
                self.said_in_list.emit("That chat is no longer on disk.")
        if chat is None:
            self.chat_unlisted.emit(chat_id)
        return chat

    def _forget_chat(self, chat_id: str) -> bool:
        """Remove a chat's file, its settings and its row; False (and why) if the file stays."""
        self.saves.forget(chat_id)
        try:
            self.store.delete(chat_id)
        except OSError as e:
            self.said_in_list.emit(f"The chat could not be deleted: {e.strerror or e}")
            return False
        self.memory.remove_pane_params(chat_id)
        self.chat_unlisted.emit(chat_id)
        return True

    # -- the end -------------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Cancel every reply, save what waits, close the remote connections."""
        self._remember_panes()
        await asyncio.gather(*(s.shutdown() for s in self.sessions))
        self.saves.retry()  # a chat a failing disk kept waiting gets a last chance
        await self.sources.close()
