"""Generated bodies and headers thrown at every endpoint over real loopback HTTP while a normal stream runs beside them.

The invariant: every answer is a 2xx or a 4xx within a bounded time, never a 5xx; the stream beside
them keeps getting tokens; afterwards /health is ok and a normal request completes. The headers
a browser page or a stranger may send (Origin, Host, Content-Type) vary too. FUZZ_EXAMPLES sets
how many bodies (the default keeps CI fast; `FUZZ_EXAMPLES=2000 scripts/test -k fuzz` is the long
run).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from serving import Serving, chat

pytestmark = pytest.mark.model

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "80"))
ANSWER_WITHIN_S = 30.0
LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "n_predict")  # only small values: a reply is bounded
ENDPOINTS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/completions"),
    ("GET", "/v1/models"),
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("POST", "/v1/models"),
    ("GET", "/v1/chat/completions"),
    ("POST", "/v1/embeddings"),
]

# text with what JSON lets through and UTF-8 does not: lone surrogates, control characters, NUL
text = st.text(st.characters(codec=None, exclude_categories=()), max_size=30)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 1e308]),
)
# a body that could be served always says how long its reply may be (the default of 256 tokens
# would make a valid example slow): "messages" and "prompt" appear only in the bodies below
keys = st.one_of(text, st.sampled_from(["stop", "temperature", "top_k", "seed", "stream", "role", "content"]))
keys = keys.filter(lambda k: k not in LENGTH_FIELDS and k not in ("messages", "prompt"))
small_length = st.one_of(st.integers(-3, 4), st.sampled_from(["8", [], {}, 1.5, True]))  # never null: that means 256
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, text),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=20,
)
message = st.fixed_dictionaries(
    {
        "role": st.one_of(st.sampled_from(["system", "user", "assistant", "developer"]), json_values),
        "content": st.one_of(text, json_values),
    }
)
# a valid chat with some of its fields replaced by anything
chat_body = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(message, min_size=1, max_size=4), json_values), "max_tokens": small_length},
    optional={
        "stream": st.one_of(st.booleans(), json_values),
        "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), json_values),
        "stop": st.one_of(text, st.lists(text, max_size=20), json_values),
        "temperature": st.one_of(numbers, json_values),
        "top_k": st.one_of(numbers, json_values),
        "top_p": st.one_of(numbers, json_values),
        "seed": st.one_of(numbers, json_values),
        "n": st.one_of(st.integers(-2, 3), json_values),
        "ignore_eos": st.one_of(st.booleans(), json_values),
        "logprobs": st.one_of(st.booleans(), json_values),
        "top_logprobs": st.one_of(st.integers(-1, 101), json_values),
        "n_probs": st.one_of(st.integers(-1, 101), json_values),
        "post_sampling_probs": st.one_of(st.booleans(), json_values),
        # llama.cpp's samplers: lists and maps, ids past the vocabulary, texts made tokens
        "logit_bias": st.one_of(
            st.dictionaries(st.one_of(text, st.integers(-2, 60000).map(str)), numbers, max_size=4), json_values
        ),
        "samplers": st.one_of(
            text, st.lists(st.sampled_from(["top_k", "dry", "xtc", "temp", "infill", "k"]), max_size=5), json_values
        ),
        "dry_sequence_breakers": st.one_of(st.lists(text, max_size=4), json_values),
        "dry_multiplier": st.one_of(numbers, json_values),
        "mirostat": st.one_of(st.integers(-1, 3), json_values),
        "xtc_probability": st.one_of(numbers, json_values),
    },
)
completion_body = st.fixed_dictionaries(
    {"prompt": st.one_of(text, st.lists(text, max_size=2), json_values), "max_tokens": small_length},
    optional={
        "stream": st.one_of(st.booleans(), json_values),
        "stop": st.one_of(text, json_values),
        "logprobs": st.one_of(st.integers(-1, 101), json_values),
        "n": st.one_of(st.integers(-2, 3), json_values),
    },
)
# a chat the engine serves: reaches the template, the tokenizer and a decode
valid_chat = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=60)}),
            min_size=1,
            max_size=6,
        ),
        "max_tokens": st.integers(1, 6),
    },
    optional={
        "stream": st.booleans(),
        "stop": st.lists(st.text(min_size=1, max_size=5), max_size=3),
        "temperature": st.floats(0, 2),
        "seed": st.integers(-1, 2**40),
        "ignore_eos": st.booleans(),
        "n": st.integers(1, 3),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "post_sampling_probs": st.booleans(),
    },
)
raw_bodies = st.sampled_from(
    [
        b"",
        b"{",
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the JSON reader goes
        b'{"messages": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
        b'{"messages": [' + b'{"role": "user", "content": ""},' * 50_000 + b'{"role": "user", "content": "x"}]}',
        b'{"messages": [{"role": "user", "content": "' + b"\\ud800" * 1000 + b'"}]}',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1' + b"0" * 5000 + b"}",
        b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e999, "max_tokens": 2}',
        b"\xff\xfe\x00garbage",
        json.dumps(chat("x" * 3_000_000, max_tokens=2)).encode(),
    ]
)
bodies = st.one_of(
    valid_chat.map(lambda b: json.dumps(b).encode()),
    completion_body.map(lambda b: json.dumps(b).encode()),
    chat_body.map(lambda b: json.dumps(b).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    raw_bodies,
)
# what an HTTP client lets through in a header: printable ASCII (a space inside, none at the ends)
header_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
header_text = st.one_of(header_text, st.tuples(header_text, header_text).map(" ".join))
origins = st.one_of(
    st.sampled_from(
        ["http://evil.example", "null", "http://localhost:3000", "https://[::1]", "http://127.0.0.1.nip.io", "file://", "http://"]
    ),
    st.builds("{}://{}".format, st.sampled_from(["http", "https", "ws", "chrome-extension"]), header_text),
    header_text,
)
hosts = st.one_of(
    st.sampled_from(["localhost", "127.0.0.1:1", "[::1]", "[::1", "evil.example", ":", "localhost:", "127.0.0.1.evil.example"]),
    header_text,
)
content_types = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=latin-1",
            "APPLICATION/JSON;",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json; boundary",
            ";;;",
        ]
    ),
    header_text,
)
headers = st.fixed_dictionaries({}, optional={"Origin": origins, "Host": hosts, "Content-Type": content_types})


class Beside:
    """A normal stream that runs for the whole fuzz run, restarted whenever a reply ends; notes each token's arrival."""

    def __init__(self, url: str, http: aiohttp.ClientSession):
        self.url, self.http = url, http
        self.arrivals: list[float] = []
        self.errors: list[str] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        body = chat("Tell me a long story about a lighthouse.", max_tokens=400, ignore_eos=True, stream=True)
        while True:
            async with self.http.post(f"{self.url}/v1/chat/completions", json=body) as r:
                if r.status != 200:
                    self.errors.append(f"{r.status}: {await r.text()}")
                async for line in r.content:
                    if line.startswith(b"data: {") and b'"content"' in line:
                        self.arrivals.append(time.monotonic())


@pytest.fixture(scope="module")
def served(model_path):
    from app.engine.params import EngineConfig

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    serving = Serving(EngineConfig(model_path=model_path, n_ctx=4096, n_batch=256, capacity=4, n_threads=2))
    _client, _server, url = loop.run_until_complete(serving.__aenter__())
    http = aiohttp.ClientSession(loop=loop)
    beside = Beside(url, http)
    loop.run_until_complete(asyncio.sleep(1.0))  # the normal stream is under way
    yield loop, url, http, beside
    beside.task.cancel()
    loop.run_until_complete(asyncio.gather(beside.task, return_exceptions=True))
    loop.run_until_complete(http.close())
    loop.run_until_complete(serving.__aexit__(None, None, None))
    asyncio.set_event_loop(None)
    loop.close()


async def _send(
    http: aiohttp.ClientSession, url: str, method: str, path: str, body: bytes, headers: dict | None = None
) -> tuple[int, bytes]:
    async with http.request(method, url + path, data=body, headers={"Content-Type": "application/json", **(headers or {})}) as r:
        return r.status, await r.read()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(endpoint=st.sampled_from(ENDPOINTS), body=bodies)
def test_any_body_at_any_endpoint_gets_a_2xx_or_4xx_in_bounded_time(served, endpoint, body):
    loop, url, http, _ = served
    method, path = endpoint
    status, answer = loop.run_until_complete(asyncio.wait_for(_send(http, url, method, path, body), ANSWER_WITHIN_S))
    assert status < 500, (status, answer[:300])
    if status >= 400 and path != "/metrics":
        assert json.loads(answer)["error"]["message"]  # every refusal says why, in the OpenAI shape


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    endpoint=st.sampled_from(ENDPOINTS), body=st.one_of(valid_chat.map(lambda b: json.dumps(b).encode()), bodies), headers=headers
)
def test_any_origin_host_and_content_type_get_a_2xx_or_4xx(served, endpoint, body, headers):
    loop, url, http, _ = served
    method, path = endpoint
    status, answer = loop.run_until_complete(asyncio.wait_for(_send(http, url, method, path, body, headers), ANSWER_WITHIN_S))
    event(f"status {status}")  # --hypothesis-show-statistics: how many got past the headers
    assert status < 500, (status, answer[:300])
    if status >= 400 and path != "/metrics":
        assert json.loads(answer)["error"]["message"]


def test_after_the_fuzz_the_normal_stream_went_on_and_the_server_is_healthy(served):
    loop, url, http, beside = served

    async def after():
        async with http.get(f"{url}/health") as r:
            health = r.status, await r.json()
        good = await _send(http, url, "POST", "/v1/chat/completions", json.dumps(chat("What is two plus two?")).encode())
        return health, good

    (health_status, health), (status, answer) = loop.run_until_complete(after())
    gaps = [b - a for a, b in zip(beside.arrivals, beside.arrivals[1:])]
    print(f"normal stream: {len(beside.arrivals)} tokens beside the fuzz, longest gap {max(gaps, default=0):.2f} s")
    assert not beside.errors and not beside.task.done()
    assert len(beside.arrivals) >= 20
    assert max(gaps) < 10  # a liveness bound (the stream never stopped), not a speed figure
    assert health_status == 200 and health["status"] == "ok"
    assert status == 200 and json.loads(answer)["choices"][0]["message"]["content"]
