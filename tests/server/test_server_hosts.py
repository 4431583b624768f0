"""The Host check against DNS rebinding, over raw HTTP: on loopback, beyond loopback without a key
(IP addresses and this machine's names pass, any other name is refused and told of --allow-host),
and with a key; `serve`'s flags for it and the Responses store, end to end."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import pytest
from helpers import run
from serving import Serving
from spawn import free_port, running, serve_command

from app.cli import build_parser
from app.server.responses.store import STORE_BYTES

MODELS = "GET /v1/models HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{more}\r\n"
FOREIGN = ["evil.example", "attacker.example.com:{port}", "localhost.evil.example", "127.0.0.1.nip.io"]


async def status_of(port: int, host: str, more: str = "") -> tuple[int, dict | None]:
    """GET /v1/models naming `host`: the status, and the error object of a refusal."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(MODELS.format(host=host.format(port=port), more=more).encode())
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body)["error"] if status >= 400 else None


def answers(tiny_config, bind: str, hosts: list[str], more: str = "", **options) -> dict[str, tuple[int, dict | None]]:
    """Each Host's answer from a server listening on `bind`."""

    async def main():
        async with Serving(tiny_config, **options) as (_client, server, _url):
            await server.stop()
            port = int((await server.start(bind, 0)).rsplit(":", 1)[1])
            return {host: await status_of(port, host, more) for host in hosts}

    return run(main())


@pytest.mark.tiny
def test_beyond_loopback_without_a_key_only_addresses_and_this_machines_names_pass(tiny_config):
    own = [socket.gethostname(), socket.gethostname().upper() + ":{port}", socket.getfqdn() + ".", "localhost:{port}"]
    addresses = ["192.168.1.20", "10.0.0.7:{port}", "[fe80::1]:{port}", "[::1]", "127.0.0.1"]
    allowed = ["my.lan", "MY.LAN:{port}"]
    out = answers(tiny_config, "0.0.0.0", FOREIGN + own + addresses + allowed + ["sub.my.lan"], allow_hosts=["My.Lan."])
    for host in own + addresses + allowed:
        assert out[host][0] == 200, (host, out[host])
    for host in FOREIGN + ["sub.my.lan"]:
        status, error = out[host]
        name = host.split(":")[0]
        assert status == 403 and error["code"] == "host_not_allowed" and error["type"] == "permission_error", (host, error)
        assert f"--allow-host {name}" in error["message"] and socket.gethostname().lower() in error["message"]


@pytest.mark.tiny
def test_beyond_loopback_with_a_key_any_host_passes_as_before(tiny_config):
    out = answers(tiny_config, "0.0.0.0", FOREIGN, more="Authorization: Bearer sesame\r\n", api_key="sesame")
    assert {host: status for host, (status, _) in out.items()} == dict.fromkeys(FOREIGN, 200)


@pytest.mark.tiny
def test_on_loopback_only_loopback_names_and_allowed_ones_pass(tiny_config):
    """With a key too, as before; an address of the network is no name of a loopback server."""
    hosts = ["localhost", "127.0.0.2:{port}", "[::1]:{port}", "my.lan", "192.168.1.20", socket.gethostname(), *FOREIGN]
    more = "Authorization: Bearer sesame\r\n"
    out = answers(tiny_config, "127.0.0.1", hosts, more, api_key="sesame", allow_hosts=["my.lan"])
    assert [h for h in hosts if out[h][0] == 200] == ["localhost", "127.0.0.2:{port}", "[::1]:{port}", "my.lan"]
    status, error = out["evil.example"]
    assert status == 403 and "--allow-host evil.example" in error["message"] and "loopback" in error["message"]


@pytest.mark.unit
def test_the_flags_are_declared_with_the_other_serve_flags(capsys):
    parse = build_parser().parse_args
    args = parse(["serve", "--allow-host", "my.lan", "--allow-host", "*", "--responses-store-mb", "3"])
    assert args.allow_hosts == ["my.lan", "*"] and args.responses_store_mb == 3
    assert parse(["serve"]).responses_store_mb is None  # the server's own default
    for bad in (["--allow-host", "http://my.lan"], ["--allow-host", "my.lan:8080"], ["--responses-store-mb", "0"]):
        with pytest.raises(SystemExit):
            parse(["serve", *bad])
    assert "host name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["serve", "--help"])
    assert f"(default: {STORE_BYTES // 2**20})" in " ".join(capsys.readouterr().out.split())


@pytest.mark.tiny
def test_serve_takes_allow_host_and_the_store_budget(tiny_model_path):
    port = free_port()
    flags = ["--model", tiny_model_path, "--parallel", "1", "--ctx", "512", "--threads", "1"]
    flags += ["--host", "0.0.0.0", "--allow-host", "my.lan", "--responses-store-mb", "1"]
    with running(serve_command(port, *flags), port):

        async def hosts():
            return [(await status_of(port, host))[0] for host in ("my.lan", "evil.example", "127.0.0.1")]

        assert run(hosts()) == [200, 403, 200]
        body = json.dumps({"input": "Hi", "max_output_tokens": 2}).encode()
        post = urllib.request.Request(f"http://127.0.0.1:{port}/v1/responses", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(post, timeout=60) as r:
            assert json.load(r)["store"] is True
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = dict(line.rsplit(" ", 1) for line in r.read().decode().splitlines() if not line.startswith("#"))
    assert metrics["batch_playground_responses_stored"] == "1"
    assert 0 < int(metrics["batch_playground_responses_stored_bytes"]) < 2**20
