"""Bad input gets a clear message and loses nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from helpers import Started, run, user

from app.client import EngineClient
from app.engine.errors import ModelLoadError
from app.engine.events import FinishReason
from app.engine.sampling.params import GREEDY


def broken_files(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 12)
    return {"missing": tmp_path / "nope.gguf", "not gguf": text, "truncated": truncated, "folder": tmp_path}


@pytest.mark.model
@pytest.mark.parametrize("kind", ["missing", "not gguf", "truncated", "folder"])
def test_broken_model_file_raises_with_the_reason(tmp_path, config, kind):
    path = broken_files(tmp_path)[kind]

    async def main():
        await EngineClient(config.with_(model_path=str(path))).start()

    with pytest.raises(ModelLoadError) as info:
        run(main())
    message = str(info.value)
    assert "\n" not in message and str(path.name) in message


@pytest.mark.unit
def test_broken_model_file_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    bad = broken_files(tmp_path)["not gguf"]
    result = subprocess.run(
        [sys.executable, "-m", "app", "bench", "--model", str(bad), "--max-tokens", "4"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error: ") and "GGUF" in result.stderr


@pytest.mark.model
def test_prompt_longer_than_the_context_fails_alone(config):
    config = config.with_(n_ctx=512, capacity=2)
    too_long = "word " * 2000

    async def main():
        async with Started(config) as client:
            return await asyncio.gather(
                client.complete(user(too_long), GREEDY.with_(max_tokens=8)),
                client.complete(user("What is the capital of Italy?"), GREEDY.with_(max_tokens=8)),
            )

    bad, good = run(main())
    assert bad.reason is FinishReason.ERROR
    assert "context holds 512" in bad.error and "tokens" in bad.error
    assert good.reason in (FinishReason.STOP, FinishReason.LENGTH) and good.text


@pytest.mark.model
def test_more_requests_than_capacity_queue_and_all_complete(config):
    config = config.with_(capacity=2)

    async def main():
        async with Started(config) as client:
            finals = await asyncio.gather(
                *(client.complete(user(f"Give me a fact about the number {i}."), GREEDY.with_(max_tokens=12)) for i in range(6))
            )
            return finals, list(client.recent_steps())

    finals, steps = run(main())
    assert all(f.reason in (FinishReason.STOP, FinishReason.LENGTH) and f.text for f in finals)
    assert max(s.n_seqs for s in steps) == 2
    assert sum(1 for f in finals if f.stats.queued_s > 0.05) >= 3


@pytest.mark.model
def test_cancel_at_any_moment_leaks_no_cells(config):
    config = config.with_(capacity=2, n_batch=64)
    long_prompt = "Please summarise: " + "the cat sat on the mat. " * 60

    async def main():
        async with Started(config) as client:
            loop = asyncio.get_running_loop()
            finals = {}

            async def request(rid, messages, max_tokens):
                finals[rid] = await client.complete(messages, GREEDY.with_(max_tokens=max_tokens), request_id=rid)

            tasks = [
                loop.create_task(request("running", user("Tell me a story."), 300)),
                loop.create_task(request("prefilling", user(long_prompt), 50)),
                loop.create_task(request("queued", user("And another one."), 50)),
                loop.create_task(request("instant", user("Hello"), 50)),
            ]
            client.cancel("instant")  # before it even reached the engine
            await asyncio.sleep(0.3)
            for rid in ("queued", "prefilling", "running"):
                client.cancel(rid)
            await asyncio.gather(*tasks)
            after = await client.complete(user("Still there?"), GREEDY.with_(max_tokens=8))
            from test_engine import leaked_cells

            return finals, after, await client.call(leaked_cells), client.snapshot

    finals, after, leaks, snapshot = run(main())
    assert {f.reason for f in finals.values()} == {FinishReason.CANCELLED}
    assert after.text and after.reason is not FinishReason.ERROR
    assert leaks == []
    assert snapshot.running == snapshot.waiting == 0
