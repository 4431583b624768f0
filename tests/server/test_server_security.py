"""`serve` and what a browser page or a careless client can do: foreign origins and hosts, bodies that
are not JSON or never finish, idle sockets by the hundred, and a bug in a handler."""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import time

import aiohttp
import pytest
from helpers import run
from serving import Serving, chat, engine_is_idle

from app.cli import build_parser
from app.server.api import status as status_api
from app.server.connections import MAX_CONNECTIONS

pytestmark = pytest.mark.model

CHAT = "/v1/chat/completions"


async def exchange(url: str, head: str, body: bytes = b"", pause_s: float = 0.0, timeout: float = 30.0):
    """One raw HTTP/1.1 request (its head without the final blank line); the body a byte per pause_s
    if pause_s. Returns (status, headers in lower case, body); the status is None when the server
    closed without an answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + b"\r\n\r\n" + (b"" if pause_s else body))
        answer = asyncio.ensure_future(_read_answer(reader))
        for i in range(len(body) if pause_s else 0):
            if answer.done():
                break
            writer.write(body[i : i + 1])
            await asyncio.sleep(pause_s)
        return await asyncio.wait_for(answer, timeout)
    finally:
        writer.close()


async def _read_answer(reader: asyncio.StreamReader):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None, {}, b""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in filter(None, lines):
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return int(status_line.split()[1]), headers, body


def finished_requests(server) -> int:
    """Requests the engine finished."""
    return sum(server.totals.all.requests.values())


def post_head(url: str, path: str, body: bytes, content_type: str = "application/json", **headers) -> str:
    port = url.rsplit(":", 1)[1]
    fields = {"Host": f"127.0.0.1:{port}", "Content-Type": content_type, "Content-Length": len(body), **headers}
    return f"POST {path} HTTP/1.1\r\n" + "\r\n".join(f"{k.replace('_', '-')}: {v}" for k, v in fields.items())


def test_a_body_not_sent_as_json_gets_415_and_never_reaches_the_engine(config):
    body = json.dumps(chat("Hi", max_tokens=2)).encode()
    content_types = {
        "text/plain": 415,  # what a page's fetch() may send cross-origin without a preflight
        "application/x-www-form-urlencoded": 415,
        "multipart/form-data; boundary=x": 415,
        None: 415,  # no Content-Type: application/octet-stream
        "application/json; charset=utf-8": 200,
        "Application/JSON": 400,  # let through, to the body's check: it lacks messages
    }

    async def main():
        async with Serving(config) as (client, server, url), aiohttp.ClientSession() as http:
            answers = {}
            for content_type in content_types:
                headers = {"Content-Type": content_type} if content_type else {}
                skip = [] if content_type else ["Content-Type"]
                data = b"{}" if content_type == "Application/JSON" else body
                async with http.post(url + CHAT, data=data, headers=headers, skip_auto_headers=skip) as r:
                    answers[content_type] = r.status, await r.json()
            return answers, await engine_is_idle(client), finished_requests(server)

    answers, idle, served = run(main())
    for content_type, expected in content_types.items():
        status, answer = answers[content_type]
        assert status == expected, (content_type, answer)
        if expected == 415:
            assert "application/json" in answer["error"]["message"] and answer["error"]["type"] == "invalid_request_error"
    assert idle and served == 1  # only the JSON one was submitted


def test_a_foreign_page_gets_403_and_a_page_from_this_machine_gets_cors_headers(config):
    foreign = ["http://evil.example", "null", "http://localhost.evil.example:8080", "http://127.0.0.1.nip.io"]
    local = ["http://localhost:3000", "http://127.0.0.1:8000", "https://[::1]"]

    async def main():
        async with Serving(config) as (client, server, url), aiohttp.ClientSession() as http:
            out = {}
            for origin in foreign:
                async with http.post(url + CHAT, json=chat("Hi", max_tokens=2), headers={"Origin": origin}) as r:
                    out[origin] = r.status, r.headers.get("Access-Control-Allow-Origin"), await r.json()
            async with http.get(f"{url}/v1/models", headers={"Origin": "https://evil.example"}) as r:
                out["models, foreign"] = r.status, r.headers.get("Access-Control-Allow-Origin"), await r.json()
            for origin in local[1:]:
                async with http.get(f"{url}/v1/models", headers={"Origin": origin}) as r:
                    out[origin] = r.status, r.headers.get("Access-Control-Allow-Origin"), await r.read()
            stream = chat("Hi", max_tokens=2, stream=True)  # a streamed reply's head too
            async with http.post(url + CHAT, json=stream, headers={"Origin": local[0]}) as r:
                out[local[0]] = r.status, r.headers.get("Access-Control-Allow-Origin"), await r.read()
            preflight = {
                "Origin": "http://localhost:5173",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
            }
            async with http.options(url + CHAT, headers=preflight) as r:
                out["preflight"] = r.status, dict(r.headers)
            async with http.options(url + CHAT, headers={**preflight, "Origin": "http://evil.example"}) as r:
                out["preflight, foreign"] = r.status, r.headers.get("Access-Control-Allow-Origin"), await r.json()
            async with http.get(f"{url}/v1/models") as r:  # curl, the openai client: no Origin
                out["no origin"] = r.status, r.headers.get("Access-Control-Allow-Origin")
            return out, await engine_is_idle(client), finished_requests(server)

    out, idle, served = run(main())
    for origin in foreign:
        status, allow, body = out[origin]
        assert status == 403 and allow is None, (origin, status, body)
        assert body["error"]["type"] == "permission_error" and origin in body["error"]["message"]
    assert out["models, foreign"][:2] == (403, None)
    for origin in local:
        status, allow, _ = out[origin]
        assert status == 200 and allow == origin, (origin, out[origin])
    assert out[local[0]][2].rstrip().endswith(b"data: [DONE]")
    status, headers = out["preflight"]
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    assert "POST" in headers["Access-Control-Allow-Methods"]
    assert "authorization" in headers["Access-Control-Allow-Headers"].lower()
    assert out["preflight, foreign"][:2] == (403, None)
    assert out["no origin"] == (200, None)
    assert idle and served == 1  # the foreign pages' chats never reached the engine


def test_allow_origin_lets_a_named_page_through(config):
    args = build_parser().parse_args(["serve", "--allow-origin", "https://chat.example.com", "--allow-origin", "*"])
    assert args.allow_origins == ["https://chat.example.com", "*"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--allow-origin", "chat.example.com"])  # not an origin: no scheme
    origins = ["https://chat.example.com", "https://CHAT.example.com", "http://chat.example.com", "https://evil.example"]

    async def main():
        out = {}
        async with (
            Serving(config, allow_origins=["https://chat.example.com/"]) as (_c, server, url),
            aiohttp.ClientSession() as http,
        ):
            for origin in origins:
                async with http.post(url + CHAT, json=chat("Hi", max_tokens=2), headers={"Origin": origin}) as r:
                    out[origin] = r.status, r.headers.get("Access-Control-Allow-Origin")
            await server.stop()
            server.allow_origins = {"*"}  # what `--allow-origin '*'` gives
            url = await server.start("127.0.0.1", 0)
            async with http.get(f"{url}/v1/models", headers={"Origin": "https://anywhere.example"}) as r:
                out["any"] = r.status, r.headers.get("Access-Control-Allow-Origin")
        return out

    out = run(main())
    assert out["https://chat.example.com"] == (200, "https://chat.example.com")
    assert out["https://CHAT.example.com"][0] == 200  # an origin's host is not case-sensitive
    assert out["http://chat.example.com"] == (403, None)  # another scheme is another origin
    assert out["https://evil.example"] == (403, None)
    assert out["any"] == (200, "https://anywhere.example")


def test_a_loopback_server_refuses_a_foreign_host_and_so_does_one_on_all_addresses_without_a_key(config):
    """More Hosts, beyond loopback with and without a key, in test_server_hosts.py."""
    body = json.dumps(chat("Hi", max_tokens=2)).encode()
    foreign = ["evil.example", "evil.example:{port}", "192.168.1.20", "localhost.evil.example"]
    loopback = ["localhost:{port}", "127.0.0.2", "[::1]:{port}", "LOCALHOST"]

    async def main():
        out = {}
        async with Serving(config) as (client, server, url):
            port = url.rsplit(":", 1)[1]
            for host in foreign:
                out[host] = await exchange(url, post_head(url, CHAT, body, Host=host.format(port=port)), body)
            for host in loopback:
                out[host] = await exchange(url, f"GET /v1/models HTTP/1.1\r\nHost: {host.format(port=port)}")
            out["health, foreign"] = await exchange(url, f"GET /health HTTP/1.1\r\nHost: attacker.example:{port}")
            idle = await engine_is_idle(client) and finished_requests(server) == 0
            await server.stop()
            everywhere = await server.start("0.0.0.0", 0)
            local = "http://127.0.0.1:" + everywhere.rsplit(":", 1)[1]
            out["on all addresses"] = await exchange(local, "GET /v1/models HTTP/1.1\r\nHost: evil.example")
        return out, idle

    out, idle = run(main())
    for host in foreign:
        status, _, answer = out[host]
        error = json.loads(answer)["error"]
        assert status == 403 and host.split(":")[0] in error["message"] and error["type"] == "permission_error", answer
    for host in loopback:
        assert out[host][0] == 200, (host, out[host])
    assert out["health, foreign"][0] == 403
    assert out["on all addresses"][0] == 403
    assert idle  # the refused chats never reached the engine


def test_a_trickled_body_is_cut_with_408_and_a_slow_whole_one_is_served(config):
    body = json.dumps(chat("Hi", max_tokens=2)).encode()

    async def main():
        async with Serving(config, body_timeout_s=1.0) as (client, server, url):
            t0 = time.monotonic()
            trickled = await exchange(url, post_head(url, CHAT, body), body, pause_s=0.2)
            took = time.monotonic() - t0
            # half the body, a pause under the deadline, the rest: served
            head = post_head(url, CHAT, body)
            host, port = url.removeprefix("http://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(head.encode() + b"\r\n\r\n" + body[:10])
            await asyncio.sleep(0.5)
            writer.write(body[10:])
            slow = await asyncio.wait_for(_read_answer(reader), 30)
            writer.close()
            return trickled, took, slow, await engine_is_idle(client), finished_requests(server)

    (status, headers, answer), took, slow, idle, served = run(main())
    assert status == 408 and "did not arrive within 1 s" in json.loads(answer)["error"]["message"]
    assert headers.get("connection", "").lower() == "close"
    assert 1.0 <= took < 5.0  # cut at the deadline, long before the body's 0.2 s x its length would end
    assert slow[0] == 200
    assert idle and served == 1


def test_hundreds_of_idle_sockets_leave_health_answering_and_a_stream_running(config):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:  # 600 sockets here and up to 512 on the server's side, in one process
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip(f"{hard} open files at most")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))

    async def main():
        async with Serving(config) as (client, server, url), aiohttp.ClientSession() as http:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            body = chat("Tell me a story.", max_tokens=60, ignore_eos=True, stream=True)
            stream = await http.post(url + CHAT, json=body)
            await stream.content.readline()
            idle = [socket.create_connection((host, int(port))) for _ in range(600)]
            half = idle[-1]
            half.sendall(b"GET /health HTTP/1.1\r\nHost: loc")  # a head that never ends
            await asyncio.sleep(0.5)  # the server accepts them all
            t0 = time.monotonic()
            async with aiohttp.ClientSession() as fresh, fresh.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=10)) as r:
                health = r.status
            took = time.monotonic() - t0
            rest = await stream.read()
            stream.close()
            open_now, evicted = len(server.connections), server.connections.evicted
            closed = sum(1 for s in idle[:50] if _closed_by_server(s))
            for s in idle:
                s.close()
            return health, took, rest, open_now, evicted, closed, await engine_is_idle(client)

    health, took, rest, open_now, evicted, closed, idle = run(main())
    print(f"/health beside 600 idle sockets: {took:.3f} s; {evicted} idle connections closed to make room")
    assert health == 200 and took < 2.0
    assert rest.rstrip().endswith(b"data: [DONE]")  # the stream was not taken for idle
    assert open_now <= MAX_CONNECTIONS and evicted >= 600 - MAX_CONNECTIONS
    assert closed == 50  # the oldest idle ones made room
    assert idle


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(2.0)
    try:
        return s.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return False


def test_idle_connections_are_closed_and_beyond_the_cap_a_busy_server_answers_503(config):
    async def main():
        async with Serving(config, keepalive_s=1.0, max_connections=3) as (_client, server, url), aiohttp.ClientSession() as http:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            silent = socket.create_connection((host, int(port)))
            half = socket.create_connection((host, int(port)))
            half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
            await asyncio.sleep(2.0)  # twice the keep-alive time
            reaped = [_closed_by_server(silent), _closed_by_server(half)]
            body = chat("Tell me a story.", max_tokens=300, ignore_eos=True, stream=True)
            busy = [await http.post(url + CHAT, json=body) for _ in range(3)]  # three connections, each serving
            refused = await exchange(url, f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}")
            for response in busy:
                response.close()
            await asyncio.sleep(0.3)
            async with aiohttp.ClientSession() as fresh, fresh.get(f"{url}/health") as r:
                after = r.status
            return reaped, refused, after, server.connections.refused

    reaped, (status, headers, answer), after, refused = run(main())
    assert reaped == [True, True]
    assert status == 503 and headers["retry-after"] == "1" and json.loads(answer)["error"]["type"] == "unavailable_error"
    assert refused == 1 and after == 200


def test_an_unexpected_exception_in_a_handler_is_a_500_server_error(config, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("injected fault")  # a ValueError, not bad input: still a 500

    async def main():
        async with Serving(config) as (client, server, url), aiohttp.ClientSession() as http:
            out = {}
            with monkeypatch.context() as patch:
                patch.setattr(server, "pick_model", broken)
                patch.setattr(status_api, "prometheus_text", broken)
                async with http.post(url + CHAT, json=chat("Hi", max_tokens=2)) as r:
                    out["chat"] = r.status, r.content_type, await r.json()
                async with http.get(f"{url}/metrics") as r:
                    out["metrics"] = r.status, r.content_type, await r.json()
            async with http.post(url + CHAT, json=chat("Hi", max_tokens=2)) as r:
                out["after"] = r.status
            return out, await engine_is_idle(client)

    out, idle = run(main())
    for name in ("chat", "metrics"):
        status, content_type, body = out[name]
        assert status == 500 and content_type == "application/json", (name, out[name])
        assert body["error"]["type"] == "server_error" and "injected fault" in body["error"]["message"]
    assert out["after"] == 200 and idle
