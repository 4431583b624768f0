"""RemoteClient: a pane's replies from a remote endpoint, streamed as the same events as EngineClient.generate."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from urllib.parse import urlsplit
from uuid import uuid4

import aiohttp

from app.engine.events import Event, Fault, FinishEvent, FinishReason, TokenEvent, refused
from app.engine.params import Priority
from app.engine.sampling.constraints import ConstraintError, follows
from app.engine.sampling.params import SamplingParams
from app.engine.sequence import Request
from app.engine.stats import ConversationTotals, RequestStats

from . import chat_api
from .chat_api import ChatApi
from .endpoint import Endpoint, RemoteError
from .output_format import output_of
from .responses_api import ResponsesApi
from .wire import _Budget, _check_status, _count_tokens, _next_line, _parse_json, _read_body, _Reply, _valid_text

CONVERSATIONS_KEPT = 1024  # the running KV totals of the most recent conversations
Listener = Callable[[list[Event]], None]


class RemoteClient:
    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.api = ResponsesApi() if endpoint.api == "responses" else ChatApi()
        self._session: aiohttp.ClientSession | None = None
        self._open: dict[str, _Reply] = {}  # the replies streaming now, by request id
        self.conversations = ConversationTotals(CONVERSATIONS_KEPT)
        self._listeners: list[Listener] = []

    @property
    def host(self) -> str:
        return urlsplit(self.endpoint.api_url).netloc or self.endpoint.api_url

    def model_label(self, model: str | None) -> str:
        """The endpoint's model, or its host (a remote is not asked for a local model)."""
        return self.endpoint.model or self.host

    def add_listener(self, listener: Listener) -> None:
        """Call `listener([event])` with every event any reply of this client streams."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def reply(self, request: Request) -> AsyncIterator[Event]:
        """A pane's reply (the workspace's ReplySource). What a chat endpoint cannot do ends it at once
        with an ERROR that says so; token probabilities it does not give are said in a notice."""
        why = self._cannot(request)
        if why is not None:
            event = refused(request.request_id, why, request.conversation_id, fault=Fault.REQUEST)
            self._tell(event)
            yield event
            return
        stream = self.generate(
            request.messages or (),
            request.params,
            conversation_id=request.conversation_id,
            request_id=request.request_id,
            thinking=thinking_fields(request),
        )
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, FinishEvent) and event.ok:
                    notices = [event.notice, self._unheld(request, event)]
                    if request.params.n_probs is not None:
                        api = "Responses" if self.endpoint.api == "responses" else "chat"
                        notices.append(f"{self.host} gives no token probabilities over its {api} API")
                    event = replace(event, notice="; ".join(n for n in notices if n) or None)
                self._tell(event)
                yield event

    def _unheld(self, request: Request, final: FinishEvent) -> str | None:
        """What to say of a reply sent with a grammar that does not follow it: the endpoint took the
        field and ignored it (many ignore what they do not know). A reply cut short is read as far
        as it goes. Only llguidance's own dialects (a Lark grammar, a regular expression): a GBNF
        grammar is the endpoint's to read, and llama.cpp's reading of one can differ."""
        output = output_of(request.params)
        if output is None or not output.lark or final.reason not in (FinishReason.STOP, FinishReason.LENGTH):
            return None
        try:
            if follows(output.lark, final.text, whole=final.reason is FinishReason.STOP):
                return None
        except ConstraintError:
            return None
        return (
            f"the reply does not follow {output.label} in ⚙ Output: {self.host} ignored it "
            "(it was sent as `grammar`, which serve and llama-server take; many endpoints ignore a field they do not know)"
        )

    def _cannot(self, request: Request) -> str | None:
        if request.prompt is not None:
            return f"completion mode needs the local engine; {self.host} is asked through its chat API (turn ⚙ Completion off)"
        if request.priority is not Priority.NORMAL:
            return f"{self.host} takes no priorities (turn ⚙ High priority off for this pane)"
        if request.reply_prefix:
            return f"a branch goes on from the local engine's tokens, which {self.host} does not take"
        output = output_of(request.params)
        return None if output is None else output.problem()

    def _tell(self, event: Event) -> None:
        for listener in tuple(self._listeners):
            listener([event])

    async def generate(
        self,
        messages: Sequence[dict[str, str]],
        params: SamplingParams,
        *,
        conversation_id: str | None = None,
        request_id: str | None = None,
        thinking: Mapping[str, object] | None = None,
    ) -> AsyncIterator[Event]:
        """Stream one reply: TokenEvents, then exactly one FinishEvent (ERROR with the reason on a fault);
        `thinking`: a thinking model's fields for the body (`thinking_fields`)."""
        request_id = request_id or f"remote-{uuid4().hex[:12]}"
        reply = self._open[request_id] = _Reply(RequestStats(request_id, conversation_id, t_submit=time.monotonic()))
        error = None
        try:
            async with aclosing(self._stream(reply, messages, params, thinking or {})) as pieces:
                async for piece, thought in pieces:
                    yield TokenEvent(
                        request_id, piece, 1, reply.stats.t_last_token, reasoning=thought, thought=bool(thought) and not piece
                    )
        except Exception as e:  # whatever the endpoint does ends this reply, never the pane
            error = None if reply.cancelled else self._reason(e)
        finally:
            self._open.pop(request_id, None)
        if error is not None or reply.cancelled:
            reply.reason = None  # nothing to go on from
        self.api.remember(reply, messages)
        yield self._final(reply, error)

    def cancel(self, request_id: str) -> None:
        """Stop a reply: closing its connection tells the server to free the sequence."""
        reply = self._open.get(request_id)
        if reply is None:
            return  # already over
        reply.cancelled = True
        reply.stopped.set()  # Stop before the server answers ends the reply now, not at a timeout
        if reply.response is not None:
            reply.response.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the request ---------------------------------------------------------------------------

    async def _stream(self, reply: _Reply, messages, params: SamplingParams, thinking) -> AsyncIterator[tuple[str, str]]:
        """The reply's pieces as they come: (text, "") for its answer, ("", text) for a thinking model's thoughts."""
        budget = _Budget(self.endpoint, params.max_tokens, reply.stopped)
        bodies = self.api.bodies(self.endpoint, messages, params, reply.stats.conversation_id)
        for body in bodies:
            body.update(thinking)
        async with await self._answer(reply, budget, bodies) as response:
            if reply.cancelled:
                return
            await _check_status(response, budget, output_of(params))
            if response.content_type == "application/json":  # the server ignored "stream": one whole reply
                self.api.read_whole(_parse_json(await _read_body(response, budget, self.endpoint.max_bytes)), reply)
                yield "".join(reply.pieces), "".join(reply.thoughts)
                return
            while raw := await _next_line(response, budget):
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:") and line[5:].strip() == "[DONE]":
                    return
                thought_count = len(reply.thoughts)
                pieces = self.api.read_line(line, reply)
                for thought in reply.thoughts[thought_count:]:  # before the answer's pieces: they came first
                    budget.spend_piece()
                    reply.stats.on_token(time.monotonic())
                    yield "", thought
                for piece in pieces:
                    budget.spend_piece()
                    reply.stats.on_token(time.monotonic())
                    reply.pieces.append(piece)
                    yield piece, ""
                if reply.over:
                    return
        if reply.reason is None and not reply.cancelled:
            raise RemoteError(self.api.unfinished)

    async def _answer(self, reply: _Reply, budget: _Budget, bodies: list[dict]) -> aiohttp.ClientResponse:
        """The answer to the first body; to the next when the first is a 404 (the Responses API's previous
        response no longer kept: it is asked once more with the whole chat)."""
        for i, body in enumerate(bodies):
            response = reply.response = await budget.wait(self._post(body), f"no answer from {self.endpoint.api_url}")
            if response.status != 404 or i == len(bodies) - 1 or reply.cancelled:
                return response
            response.close()
            self.api.forget(reply.stats.conversation_id)
        raise AssertionError("no body to send")

    async def _post(self, body: dict) -> aiohttp.ClientResponse:
        url = self.endpoint.api_url + self.api.path
        return await self._open_session().post(url, json=body, headers=self._headers())

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # a connection per reply: a kept-alive one the server closed meanwhile fails mid-request;
            # no timeouts of aiohttp's own: each reply's _Budget keeps time
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True), timeout=aiohttp.ClientTimeout(total=None)
            )
        return self._session

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}

    def _body(self, messages, params: SamplingParams) -> dict:
        return chat_api.body(self.endpoint, messages, params)

    # -- the end -------------------------------------------------------------------------------

    def _reason(self, e: Exception) -> str:
        where = self.endpoint.api_url
        if isinstance(e, RemoteError):
            return str(e)
        if isinstance(e, aiohttp.ClientConnectorError):
            return f"cannot reach {where}: {e.os_error.strerror or e.os_error}"
        if isinstance(e, (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError)):
            return f"the endpoint is not a valid http(s) URL: {where}"
        return f"{where}: {str(e) or type(e).__name__}"

    def _final(self, reply: _Reply, error: str | None) -> FinishEvent:
        st = reply.stats
        st.t_finish = time.monotonic()
        _count_tokens(reply)
        self.conversations.add(st)
        text, thoughts = "".join(reply.pieces), "".join(reply.thoughts)
        if reply.cancelled:
            return FinishEvent(st.request_id, FinishReason.CANCELLED, text, st, reasoning=thoughts)
        if error is not None:
            return FinishEvent(st.request_id, FinishReason.ERROR, text, st, _valid_text(error), reasoning=thoughts)
        return FinishEvent(st.request_id, reply.reason or FinishReason.STOP, text, st, reasoning=thoughts)


def thinking_fields(request: Request) -> dict:
    """A pane's ⚙ Think and its budget as llama-server's (and serve's) fields, sent only where moved
    from the model's own way (so an endpoint that knows neither, as OpenAI's, is asked as before):
    `chat_template_kwargs` (`enable_thinking`, which vLLM reads too) and `reasoning_budget_tokens`."""
    fields: dict = {}
    if request.template_kwargs:
        fields["chat_template_kwargs"] = dict(request.template_kwargs)
    if request.reasoning_budget is not None:
        fields["reasoning_budget_tokens"] = request.reasoning_budget
    return fields
