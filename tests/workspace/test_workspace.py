"""The workspace's rules, headless: panes, chats and replies against a scripted reply source (no model,
no window, milliseconds each). What only a window can show stays in the test_ui_* files."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.client import EngineClient
from app.engine.events import FinishEvent, FinishReason, TokenEvent
from app.engine.params import EngineConfig, Priority
from app.engine.probs import TokenChoice, TokenProbs
from app.engine.sequence import Request
from app.engine.stats import RequestStats
from app.remote import Endpoint, RemoteClient
from app.workspace import session as session_module
from app.workspace.chat_store import NOTICE, Chat, ChatStore
from app.workspace.metrics import MetricsStore
from app.workspace.pane_params import PaneParams
from app.workspace.session import Branch
from app.workspace.source import Sources
from app.workspace.workspace import DEFAULT_PANES, MAX_PANES, Workspace

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Thought:
    """A piece of a scripted reply that is thought, not answer."""

    text: str


class ScriptedSource:
    """A ReplySource that answers each request with `script(request)`: pieces of text, then a final
    (reason, error, notice). A reply whose script says "hold" waits until it is cancelled."""

    def __init__(self, script=None):
        self.script = script or (lambda request: (["Hello", " there"], FinishReason.STOP))
        self.requests = []
        self._cancelled: dict[str, asyncio.Event] = {}
        self._listeners = []

    async def reply(self, request):
        self.requests.append(request)
        stop = self._cancelled.setdefault(request.request_id, asyncio.Event())
        pieces, reason, *rest = self.script(request)
        text, thoughts, stats = "", "", RequestStats(request.request_id)
        for i, piece in enumerate(pieces):
            await asyncio.sleep(0)
            if stop.is_set():
                break
            if isinstance(piece, Thought):  # a thinking model's thought
                thoughts += piece.text
                stats.reasoning_tokens += 1
                yield self._told(TokenEvent(request.request_id, "", 1, float(i), reasoning=piece.text, thought=True))
                continue
            text += piece
            yield self._told(TokenEvent(request.request_id, piece, 1, float(i)))
        if reason == "hold":
            await stop.wait()
        if stop.is_set():
            reason = FinishReason.CANCELLED
        error, notice = (rest + [None, None])[:2]
        yield self._told(FinishEvent(request.request_id, reason, text, stats, error, notice, reasoning=thoughts))

    def _told(self, event):
        for listener in self._listeners:
            listener([event])
        return event

    def cancel(self, request_id):  # before the reply has started, too
        self._cancelled.setdefault(request_id, asyncio.Event()).set()

    def model_label(self, model):
        return model or "scripted.gguf"

    def add_listener(self, listener):
        self._listeners.append(listener)

    def remove_listener(self, listener):
        self._listeners.remove(listener)


class Memory:
    """What the settings file remembers of the panes, in a dict."""

    def __init__(self):
        self.pane_ids: list[str] = []
        self.params: dict[str, PaneParams] = {}
        self.drafts: dict[str, str] = {}

    def pane_params(self, chat_id):
        return self.params.get(chat_id, PaneParams())

    def set_pane_params(self, chat_id, params):
        self.params[chat_id] = params

    def remove_pane_params(self, chat_id):
        self.params.pop(chat_id, None)
        self.drafts.pop(chat_id, None)

    def draft(self, chat_id):
        return self.drafts.get(chat_id, "")

    def set_draft(self, chat_id, text):
        self.drafts[chat_id] = text


def make(tmp_path, script=None, capacity=MAX_PANES, memory=None):
    source = ScriptedSource(script)
    metrics = MetricsStore()
    ws = Workspace(Sources(source, metrics.on_events), ChatStore(tmp_path), memory or Memory(), metrics, capacity)
    said, listed = [], []
    ws.said.connect(said.append)
    ws.said_in_list.connect(listed.append)
    return ws, source, said, listed


def run(coro):
    return asyncio.run(coro)


async def settle(ws):
    while not ws.is_idle:
        await asyncio.sleep(0)


# -- panes -------------------------------------------------------------------------------------


def test_a_first_start_makes_the_default_panes_within_the_capacity(tmp_path):
    ws, *_ = make(tmp_path)
    ws.restore()
    assert [s.chat.name for s in ws.sessions] == [f"Pane {i}" for i in range(1, DEFAULT_PANES + 1)]
    assert len({s.colour for s in ws.sessions}) == DEFAULT_PANES
    small, *_ = make(tmp_path / "small", capacity=2)
    small.restore(pane_count=6)
    assert len(small.sessions) == 2 and small.add_pane() is None


def test_a_restart_brings_back_the_panes_their_chats_drafts_and_settings(tmp_path):
    memory = Memory()
    ws, *_ = make(tmp_path, memory=memory)
    ws.restore(pane_count=2)
    first = ws.sessions[0]

    async def chat():
        first.send("Hi")
        await settle(ws)

    run(chat())
    ws.set_draft(ws.sessions[1], "half typed")
    first.set_params(first.params.with_(temperature=0.1))
    again, *_ = make(tmp_path, memory=memory)
    again.restore()
    assert [s.key for s in again.sessions] == [s.key for s in ws.sessions]
    assert again.sessions[0].chat.messages == first.chat.messages
    assert again.sessions[0].params.temperature == 0.1 and again.sessions[1].draft == "half typed"


def test_an_unreadable_chat_file_is_kept_aside_and_its_pane_gets_a_new_chat_with_its_settings(tmp_path):
    memory = Memory()
    memory.pane_ids = ["broken"]
    memory.params["broken"] = PaneParams(temperature=0.3)
    ws, *_ = make(tmp_path, memory=memory)
    ws.store.folder.mkdir(parents=True)
    ws.store.path("broken").write_text("{not json")
    ws.restore()
    session = ws.sessions[0]
    assert session.key != "broken" and session.params.temperature == 0.3
    assert session.chat.messages[0]["role"] == NOTICE and "could not be read" in session.chat.messages[0]["content"]
    assert not ws.store.path("broken").exists() and list(ws.store.folder.glob("broken.corrupt-*"))  # set aside, not lost


def test_closing_a_pane_forgets_an_empty_chat_and_keeps_a_chat_with_messages(tmp_path):
    ws, *_ = make(tmp_path)
    ws.restore(pane_count=2)
    empty, used = ws.sessions
    listed = {}
    ws.chat_listed.connect(lambda chat, is_open: listed.__setitem__(chat.chat_id, is_open))
    gone = []
    ws.chat_unlisted.connect(gone.append)

    async def scenario():
        used.send("Hi")
        await settle(ws)
        await ws.close_pane(empty)
        await ws.close_pane(used)

    run(scenario())
    assert gone == [empty.key] and not ws.store.path(empty.key).exists()
    assert listed[used.key] is False and ws.store.load(used.key).messages == used.chat.messages
    assert ws.sessions == [] and ws.memory.pane_ids == []


# -- one reply ---------------------------------------------------------------------------------


def test_a_message_is_sent_as_the_chat_with_the_system_prompt_and_the_reply_is_added(tmp_path):
    ws, source, *_ = make(tmp_path)
    session = ws.add_pane()
    session.set_params(session.params.with_(system_prompt="Be brief.", high_priority=True, model="other"))

    async def scenario():
        assert not session.send("   ")  # nothing to send
        assert session.send("  Hi  ")
        assert not session.send("again")  # one reply at a time
        await settle(ws)

    run(scenario())
    request = source.requests[0]
    assert request.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    assert (request.prompt, request.priority, request.model, request.conversation_id) == (
        None,
        Priority.HIGH,
        "other",
        session.key,
    )
    assert session.chat.messages[-1] == {"role": "assistant", "content": "Hello there"}
    assert session.chat.model == "other" and ws.store.load(session.key).messages == session.chat.messages


def test_a_reply_started_with_given_text_is_sent_as_a_last_assistant_message_and_kept_as_one_reply(tmp_path):
    ws, source, *_ = make(tmp_path)
    session, completing = ws.add_pane(), ws.add_pane()
    completing.set_params(completing.params.with_(completion=True))
    session.reply_start = completing.reply_start = "Sure,"

    async def scenario():
        assert session.send("Hi") and completing.send("Once")
        await settle(ws)
        assert session.regenerate()  # the start stays for the next replies
        await settle(ws)
        session.reply_start = ""
        assert session.send("Again")
        await settle(ws)

    run(scenario())
    first, done, again, cleared = source.requests
    assert first.messages == ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure,"})
    assert done.prompt == "OnceSure," and again.messages == first.messages
    assert cleared.messages[-1] == {"role": "user", "content": "Again"}
    assert [m["content"] for m in session.chat.messages] == ["Hi", "Sure,Hello there", "Again", "Hello there"]
    assert completing.chat.messages[-1]["content"] == "Sure,Hello there"


def test_only_a_pane_set_to_high_priority_sends_high_priority_requests(tmp_path):
    ws, source, *_ = make(tmp_path)
    high, normal = ws.add_pane(), ws.add_pane()
    high.set_params(high.params.with_(high_priority=True))

    async def scenario():
        assert high.send("Hi") and normal.send("Hi")
        await settle(ws)

    run(scenario())
    assert {r.conversation_id: r.priority for r in source.requests} == {high.key: Priority.HIGH, normal.key: Priority.NORMAL}


def test_completion_mode_sends_one_text_as_typed_and_nothing_typed_goes_on(tmp_path):
    ws, source, *_ = make(tmp_path)
    session = ws.add_pane()
    session.set_params(session.params.with_(completion=True, system_prompt="Story:"))

    async def scenario():
        assert not session.send("")  # nothing to go on from yet
        assert session.send("Once upon a time ")
        await settle(ws)
        assert session.send("")
        await settle(ws)

    run(scenario())
    assert [r.messages for r in source.requests] == [None, None]
    assert source.requests[0].prompt.startswith("Story:") and source.requests[0].prompt.endswith("Once upon a time ")
    assert source.requests[1].prompt.endswith("Hello there")


@pytest.mark.parametrize(
    ("final", "pieces", "last"),
    [
        ((FinishReason.LENGTH,), ["Hello"], f"cut at Max tokens ({PaneParams().max_tokens}): raise it in ⚙ for longer replies"),
        ((FinishReason.STOP, None, "old turns were dropped"), ["Hello"], "old turns were dropped"),
        ((FinishReason.CANCELLED,), ["Hel"], "stopped"),
    ],
)
def test_how_a_reply_ends_is_said_after_it(tmp_path, final, pieces, last):
    ws, *_ = make(tmp_path, script=lambda request: (pieces, *final))
    session = ws.add_pane()

    async def scenario():
        session.send("Hi")
        await settle(ws)

    run(scenario())
    assert session.chat.messages[-2] == {"role": "assistant", "content": "".join(pieces)}
    assert session.chat.messages[-1] == {"role": NOTICE, "content": last}


def test_a_refused_turn_is_taken_back_to_the_message_field_and_a_cut_reply_is_kept(tmp_path):
    outcomes = iter([([], FinishReason.ERROR, "the prompt is longer than the context"), (["Half a"], FinishReason.ERROR, "gone")])
    ws, *_ = make(tmp_path, script=lambda request: next(outcomes))
    session = ws.add_pane()
    restored = []
    session.draft_restored.connect(restored.append)

    async def scenario():
        session.send("word " * 10)
        await settle(ws)
        assert restored == ["word word word word word word word word word word"]
        assert session.chat.messages == [{"role": NOTICE, "content": "not answered: the prompt is longer than the context"}]
        session.draft = ""
        session.send("Short")
        await settle(ws)

    run(scenario())
    assert session.chat.messages[-3:] == [
        {"role": "user", "content": "Short"},
        {"role": "assistant", "content": "Half a", "cut": True},
        {"role": NOTICE, "content": "cut short: gone"},
    ]


def test_stop_cancels_the_reply_at_its_source_and_the_streamed_text_stays(tmp_path):
    ws, *_ = make(tmp_path, script=lambda request: (["Once", " upon"], "hold"))
    session = ws.add_pane()
    ended = []
    session.reply_ended.connect(ended.append)

    async def scenario():
        session.send("Tell me a story")
        while session.streamed != "Once upon":
            await asyncio.sleep(0)
        assert session.is_busy and session.take_text() == "Once upon" and session.take_text() == ""
        session.stop()
        await settle(ws)

    run(scenario())
    assert [e.reason for e in ended] == [FinishReason.CANCELLED]
    assert session.chat.messages[-2:] == [{"role": "assistant", "content": "Once upon"}, {"role": NOTICE, "content": "stopped"}]


def test_a_streaming_reply_is_saved_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(session_module, "CHECKPOINT_S", 0.01)
    ws, *_ = make(tmp_path, script=lambda request: (["Once"], "hold"))
    session = ws.add_pane()

    async def scenario():
        session.send("Story")
        for _ in range(200):
            await asyncio.sleep(0.01)
            if json.loads(ws.store.path(session.key).read_text())["messages"][-1] == {
                "role": "assistant",
                "content": "Once",
                "streaming": True,
            }:
                break
        else:
            raise AssertionError("the streaming reply was not saved")
        session.stop()
        await settle(ws)

    run(scenario())
    assert not any(m.get("streaming") for m in json.loads(ws.store.path(session.key).read_text())["messages"])


def test_regenerate_and_clear(tmp_path):
    replies = iter(["first", "second"])
    ws, *_ = make(tmp_path, script=lambda request: ([next(replies)], FinishReason.STOP))
    session = ws.add_pane()

    async def scenario():
        assert not session.regenerate()  # nothing to regenerate
        session.send("Hi")
        await settle(ws)
        assert session.regenerate()
        await settle(ws)
        assert [m["content"] for m in session.chat.messages] == ["Hi", "second"]
        await session.clear()

    run(scenario())
    assert session.chat.messages == [] and ws.store.load(session.key).messages == []


# -- the chat list -----------------------------------------------------------------------------


def saved_chat(ws, name, text="Hello"):
    chat = Chat.new(name)
    chat.add("user", text)
    ws.store.save(chat)
    return chat


def test_a_saved_chat_opens_in_a_free_pane_once_and_not_where_nothing_is_free(tmp_path):
    ws, _, _, said = make(tmp_path, capacity=2)
    ws.restore(pane_count=2)
    kept = saved_chat(ws, "Kept")
    other = saved_chat(ws, "Other")
    ws.set_draft(ws.sessions[1], "typed")  # not free: something was typed

    async def scenario():
        opened = await ws.open_chat(kept.chat_id)
        assert ws.sessions.index(opened) == 0 and opened.chat.messages == kept.messages
        assert await ws.open_chat(kept.chat_id) is opened
        assert await ws.open_chat(other.chat_id) is None  # no free pane, no room

    run(scenario())
    assert said == [
        "Opened “Kept”.",
        "“Kept” is already open.",
        "No free pane: close a pane, clear one, or raise the parallel capacity (2) in the Engine panel.",
    ]


def test_a_deleted_chat_leaves_its_pane_with_a_new_chat_and_takes_its_settings(tmp_path):
    ws, _, _, said = make(tmp_path)
    ws.restore(pane_count=2)
    session = ws.sessions[1]
    session.set_params(session.params.with_(temperature=0.2))

    async def scenario():
        session.send("Hi")
        await settle(ws)
        await ws.delete_chat(session.key)

    run(scenario())
    assert session not in ws.sessions and ws.sessions[1].chat.messages == [] and len(ws.sessions) == 2
    assert not ws.store.path(session.key).exists() and session.key not in ws.memory.params
    assert said == ["Deleted “Pane 2”."]


def test_a_chat_renamed_in_the_list_is_saved_and_a_vanished_one_leaves_the_list(tmp_path):
    ws, _, _, said = make(tmp_path)
    chat = saved_chat(ws, "Old")
    gone = []
    ws.chat_unlisted.connect(gone.append)
    ws.rename_chat(chat.chat_id, "New")
    assert ws.store.load(chat.chat_id).name == "New"
    ws.store.delete(chat.chat_id)
    ws.rename_chat(chat.chat_id, "Newer")
    assert gone == [chat.chat_id] and said == ["That chat is no longer on disk."]


# -- branch, fan-out, broadcast ----------------------------------------------------------------


def probs(token, piece):
    choice = TokenChoice(token, piece, -0.5, 0.5)
    return TokenProbs(choice, (choice,))


def test_a_branch_goes_on_in_a_free_pane_with_the_turns_before_it_and_the_sources_settings(tmp_path):
    ws, source, *_ = make(tmp_path)
    ws.restore(pane_count=2)
    origin = ws.sessions[0]
    origin.set_params(origin.params.with_(temperature=0.9))
    origin.chat.add("user", "Hi")  # the chat it branches from: not a free pane
    messages = [{"role": "user", "content": "Hi"}, {"role": NOTICE, "content": "stopped"}]
    taken = [probs(1, b"Hel"), probs(2, b"lo")]
    branch = Branch.at(taken, 1, TokenChoice(7, b"p", -2.0, 0.1), messages)

    async def scenario():
        branched = await ws.branch(origin, branch)
        await settle(ws)
        return branched

    branched = run(scenario())
    assert ws.sessions.index(branched) == 1 and branched.chat.name == "Pane 1 ⑂"
    assert branched.params.temperature == 0.9 and source.requests[-1].reply_prefix == (1, 7)
    assert branched.chat.messages == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "HelpHello there"}]


def test_a_fan_out_takes_free_panes_then_new_ones_and_sends_them_all_or_none(tmp_path):
    ws, source, said, _ = make(tmp_path, capacity=3)
    ws.restore(pane_count=2)
    variants = [(f"Temperature {t}", PaneParams(temperature=t)) for t in (0.1, 0.5, 0.9, 1.3)]

    async def scenario():
        assert ws.fan_out("Hi", variants) == []  # four do not fit in three
        sessions = ws.fan_out("Hi", variants[:3])
        await settle(ws)
        return sessions

    sessions = run(scenario())
    assert said[0].startswith("Fan out needs 4 free panes and 1 more cannot be had")
    assert [s.chat.name for s in sessions] == ["Temperature 0.1", "Temperature 0.5", "Temperature 0.9"]
    assert [r.params.temperature for r in source.requests] == [0.1, 0.5, 0.9]
    assert all(r.params.n_probs == 0 for r in source.requests)  # the compare view reads each token's probability


def test_broadcast_goes_to_the_idle_panes_only_and_stop_all_stops_them(tmp_path):
    ws, source, *_ = make(tmp_path, script=lambda request: (["a"], "hold"))
    ws.restore(pane_count=3)

    async def scenario():
        ws.sessions[0].send("first")
        assert ws.broadcast("all") == 2
        assert ws.broadcast("again") == 0
        ws.stop_all()
        await settle(ws)

    run(scenario())
    assert sorted(r.messages[-1]["content"] for r in source.requests) == ["all", "all", "first"]


def test_copying_settings_and_following_a_base_model_touch_only_what_they_should(tmp_path):
    ws, *_ = make(tmp_path)
    ws.restore(pane_count=3)
    a, b, c = ws.sessions
    a.set_params(a.params.with_(top_k=7))
    ws.copy_settings(a)
    assert b.params.top_k == c.params.top_k == 7
    b.chat.add("user", "kept")
    c.set_params(c.params.with_(remote_url="http://127.0.0.1:9"))
    ws.suit_blank_panes(completion=True)
    assert (a.params.completion, b.params.completion, c.params.completion) == (True, False, False)
    assert ws.add_pane().params.completion  # new panes follow the model too


# -- remote endpoints --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "prefix", "why"),
    [
        (PaneParams(completion=True), (), "completion mode needs the local engine"),
        (PaneParams(high_priority=True), (), "takes no priorities"),
        (PaneParams(), (5,), "a branch goes on from the local engine's tokens"),
    ],
)
def test_a_remote_pane_refuses_what_its_endpoint_cannot_do_and_says_why(tmp_path, params, prefix, why):
    ws, *_ = make(tmp_path)
    session = ws.add_pane()
    session.set_params(params.with_(remote_url="http://127.0.0.1:9/v1"))  # nothing listens there: nothing is asked

    async def scenario():
        if prefix:
            session.go_on_from(Branch(prefix, "x", (probs(5, b"x"),)))
        else:
            session.send("Hi")
        await settle(ws)
        await ws.shutdown()

    run(scenario())
    notice = session.chat.messages[-1]
    assert notice["role"] == NOTICE and why in notice["content"] and "127.0.0.1:9" in notice["content"]


def test_a_remote_client_says_when_asked_for_probabilities_it_does_not_give():
    async def scenario():
        client = RemoteClient(Endpoint("http://127.0.0.1:9"))
        events = []
        client.add_listener(events.extend)
        request = Request("r", PaneParams().sampling().with_(n_probs=3), messages=({"role": "user", "content": "Hi"},))
        finals = [e async for e in client.reply(request)]
        await client.close()
        return finals, events

    finals, events = run(scenario())
    assert finals == events and finals[-1].reason is FinishReason.ERROR and "cannot reach" in finals[-1].error


# -- any sequence of actions -------------------------------------------------------------------

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["send", "stop", "regenerate", "clear", "wait", "close", "add"]),
        st.sampled_from([FinishReason.STOP, FinishReason.LENGTH, FinishReason.ERROR, "hold"]),
        st.integers(0, 3),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_any_actions_end_every_reply_once_and_leave_the_chats_saved(tmp_path_factory, actions):
    """Whatever is clicked in whatever order, every reply ends once, the panes end idle, and every
    chat on disk is the chat shown."""
    outcome = {}
    ws, source, *_ = make(
        tmp_path_factory.mktemp("ws"), script=lambda request: (["a", "b"], outcome["next"], "failed"), capacity=4
    )
    ws.restore(pane_count=2)
    accepted, started, ended = [], [], []

    def watch(session):
        session.reply_started.connect(lambda: started.append(session.key))
        session.reply_ended.connect(lambda final: ended.append(session.key))

    for s in ws.sessions:
        watch(s)
    ws.pane_added.connect(lambda s, i: watch(s))

    async def scenario():
        for action, reason, n in actions:
            outcome["next"] = reason
            if not ws.sessions:
                ws.add_pane()
            session = ws.sessions[n % len(ws.sessions)]
            if action == "send" and session.send("hello"):
                accepted.append(session.key)
            elif action == "stop":
                session.stop()
            elif action == "regenerate" and session.regenerate():
                accepted.append(session.key)
            elif action == "clear":
                await session.clear()
            elif action == "close":
                await ws.close_pane(session)
            elif action == "add":
                ws.add_pane()
            elif action == "wait":  # otherwise the next action comes before the reply's task has run
                for _ in range(n + 1):
                    await asyncio.sleep(0)
        ws.stop_all()
        await settle(ws)
        await ws.shutdown()

    run(scenario())
    assert sorted(accepted) == sorted(started) == sorted(ended)
    for s in ws.sessions:
        assert not s.is_busy and s.chat.streaming is None
        assert ws.store.load(s.key) is None or ws.store.load(s.key).messages == s.chat.messages


def test_a_refused_request_from_the_engine_client_is_one_final_event(tmp_path):
    """EngineClient.reply turns an engine that is not running into a final event, as any source must."""

    async def scenario():
        client = EngineClient(EngineConfig(model_path=str(tmp_path / "none.gguf")))
        return [e async for e in client.reply(Request("r", PaneParams().sampling(), messages=()))]

    events = run(scenario())
    assert len(events) == 1 and events[0].reason is FinishReason.ERROR and events[0].error


# -- thinking models -------------------------------------------------------------------------------


def test_a_thinking_reply_keeps_its_thoughts_apart_and_gives_them_back_next_turn(tmp_path):
    script = lambda request: ([Thought("Two and"), Thought(" two."), "Four", "."], FinishReason.STOP)  # noqa: E731
    ws, source, *_ = make(tmp_path, script)
    ws.restore(pane_count=1)
    session = ws.sessions[0]
    shown = {"thoughts": "", "text": ""}

    def take():
        shown["thoughts"] += session.take_thoughts()
        shown["text"] += session.take_text()

    session.text_received.connect(lambda: asyncio.get_running_loop().call_soon(take))  # as the window's flush, later

    async def chat():
        session.send("2+2?")
        await settle(ws)
        session.send("3+3?")
        await settle(ws)

    run(chat())
    reply = session.chat.messages[1]
    assert reply["content"] == "Four." and reply["reasoning"] == "Two and two."
    assert reply["reasoning_tokens"] == 2 and reply["reasoning_s"] >= 0
    assert shown["thoughts"] == "Two and two." * 2 and shown["text"].startswith("Four")  # taken apart as they streamed
    assert source.requests[1].messages[1] == {"role": "assistant", "content": "Four.", "reasoning_content": "Two and two."}
    assert ws.metrics.panes[session.key].thought_tokens == 2 and ws.metrics.panes[session.key].gen_tokens == 4
    again = ChatStore(tmp_path).load(session.key)  # saved with its thoughts and figures
    assert again.messages[1] == reply


def test_think_off_and_a_budget_reach_the_request(tmp_path):
    ws, source, *_ = make(tmp_path)
    ws.restore(pane_count=1)
    session = ws.sessions[0]

    async def chat():
        session.set_params(session.params.with_(reasoning_budget=64))
        session.send("a")
        await settle(ws)
        session.set_params(session.params.with_(think=False))
        session.send("b")
        await settle(ws)
        session.set_params(session.params.with_(think=True, reasoning_budget=-1))
        session.send("c")
        await settle(ws)

    run(chat())
    budget, off, free = source.requests
    assert budget.reasoning_budget == 64 and budget.template_kwargs is None
    assert off.reasoning_budget == 0 and off.template_kwargs == {"enable_thinking": False}
    assert free.reasoning_budget is None and free.template_kwargs is None


def test_a_chat_file_keeps_a_replys_thoughts_and_exports_them(tmp_path):
    from app.workspace.chat_store import Thought as Thoughts
    from app.workspace.chat_store import to_markdown

    chat = Chat.new("Sums")
    chat.add("user", "2+2?")
    chat.add("assistant", "Four.", thoughts=Thoughts("Two and two.", 1.25, 7))
    chat.add("assistant", "No thoughts.", thoughts=Thoughts(""))
    store = ChatStore(tmp_path)
    store.save(chat)
    again = store.load(chat.chat_id)
    assert again.messages[1] == {
        "role": "assistant",
        "content": "Four.",
        "reasoning": "Two and two.",
        "reasoning_s": 1.25,
        "reasoning_tokens": 7,
    }
    assert again.messages[2] == {"role": "assistant", "content": "No thoughts."}
    assert again.for_model("")[1] == {"role": "assistant", "content": "Four.", "reasoning_content": "Two and two."}
    assert "<details><summary>Thinking</summary>\n\nTwo and two.\n\n</details>" in to_markdown(again)
    # figures of the wrong type in a hand-edited file are dropped, the thoughts kept
    data = json.loads(store.path(chat.chat_id).read_text())
    data["messages"][1] |= {"reasoning_s": "slow", "reasoning_tokens": -3}
    store.path(chat.chat_id).write_text(json.dumps(data))
    kept = store.load(chat.chat_id).messages[1]
    assert kept == {"role": "assistant", "content": "Four.", "reasoning": "Two and two.", "reasoning_tokens": 0}
