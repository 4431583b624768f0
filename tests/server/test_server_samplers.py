"""llama.cpp's samplers through `serve` under llama-server's field names, OpenAI's `logit_bias`,
`/tokenize` and `/detokenize` (which a logit bias needs the ids of), and a value out of range
refused with a 400 that names its field; over real loopback HTTP."""

from __future__ import annotations

import aiohttp
import openai
import pytest
from helpers import run
from serving import Serving

pytestmark = pytest.mark.model

REPEATED = "the cat sat on the mat, the cat sat on the mat, the cat sat on the mat,"


def test_tokenize_and_detokenize_as_llama_server_has_them(config):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:

            async def post(path, body, status=200):
                async with http.post(f"{url}{path}", json=body) as r:
                    assert r.status == status, await r.text()
                    return await r.json()

            ids = (await post("/tokenize", {"content": "Hello world"}))["tokens"]
            with_bos = (await post("/tokenize", {"content": "Hello world", "add_special": True}))["tokens"]
            pieces = (await post("/tokenize", {"content": "<|im_start|> é", "with_pieces": True}))["tokens"]
            plain = (await post("/tokenize", {"content": "<|im_start|>", "parse_special": False}))["tokens"]
            mixed = (await post("/tokenize", {"content": ["Hello", ids[-1]]}))["tokens"]
            text = (await post("/detokenize", {"tokens": ids}))["content"]
            empty = await post("/detokenize", {})
            bad_id = await post("/detokenize", {"tokens": [10**6]}, status=400)
            bad_content = await post("/tokenize", {"content": {"x": 1}}, status=400)
            return ids, with_bos, pieces, plain, mixed, text, empty, bad_id, bad_content

    ids, with_bos, pieces, plain, mixed, text, empty, bad_id, bad_content = run(main())
    assert len(ids) == 2 and all(isinstance(t, int) for t in ids) and text == "Hello world"
    assert with_bos[-2:] == ids  # this model adds no BOS: the same, or one more in front
    assert pieces[0]["piece"] == "<|im_start|>" and "".join(p["piece"] for p in pieces[1:]) == " é"
    assert len(plain) > 1  # read as plain text, the control token's text is several tokens
    assert mixed == ids
    assert empty == {"content": ""}
    assert bad_id["error"]["param"] == "tokens" and "1000000" in bad_id["error"]["message"]
    assert bad_content["error"]["param"] == "content"


def test_llama_server_s_sampling_fields_and_openai_s_logit_bias_are_honoured(config):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            async with http.post(f"{url}/tokenize", json={"content": " cat"}) as r:
                (cat,) = (await r.json())["tokens"]
            api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)

            async def complete(logit_bias=None, **extra):
                reply = await api.completions.create(
                    model="any", prompt=REPEATED, max_tokens=32, temperature=0, logit_bias=logit_bias or openai.NOT_GIVEN,
                    extra_body={"repeat_penalty": 1.0, **extra},
                )  # fmt: skip
                return reply.choices[0].text

            plain = await complete()
            banned = await complete(logit_bias={str(cat): -100})
            dry = await complete(dry_multiplier=0.8, samplers="edkypmxt")
            xtc = await complete(xtc_probability=1.0, xtc_threshold=0.1)
            return plain, banned, dry, xtc

    plain, banned, dry, xtc = run(main())
    assert plain.count(" cat") >= 3 and " cat" not in banned
    assert dry.count("the cat sat on the mat") < plain.count("the cat sat on the mat")
    assert xtc != plain


OUT_OF_RANGE = {
    "dry_multiplier": -0.5,
    "dry_base": 0.5,
    "dry_allowed_length": -1,
    "dry_penalty_last_n": 10**6,
    "dry_sequence_breakers": [],
    "xtc_probability": 1.5,
    "xtc_threshold": -0.1,
    "top_n_sigma": 11,
    "typical_p": 1.2,
    "mirostat": 3,
    "mirostat_tau": -1,
    "mirostat_eta": 2,
    "dynatemp_range": 9,
    "dynatemp_exponent": -1,
    "logit_bias": {"15": 150},
    "samplers": ["top_k", "infill"],
}


def test_a_sampling_value_out_of_range_is_a_400_naming_its_field(config):
    async def main():
        async with Serving(config) as (_client, _server, url), aiohttp.ClientSession() as http:
            answers = {}
            for name, value in OUT_OF_RANGE.items():
                body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, name: value}
                async with http.post(f"{url}/v1/chat/completions", json=body) as r:
                    answers[name] = (r.status, await r.json())
            body = {"prompt": "Hi", "max_tokens": 4, "logit_bias": {"99999": -1}}  # past the vocabulary: the engine says so
            async with http.post(f"{url}/v1/completions", json=body) as r:
                answers["unknown token"] = (r.status, await r.json())
            return answers

    answers = run(main())
    for name in OUT_OF_RANGE:
        status, body = answers[name]
        assert status == 400 and body["error"]["param"] == name and name in body["error"]["message"], (name, body)
    status, body = answers["unknown token"]
    assert status == 400 and "logit_bias" in body["error"]["message"] and "99999" in body["error"]["message"]
