"""The prefix comparison behind KV reuse."""

import random

from app.engine.kv_cache import common_prefix_len


def naive(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_common_prefix_len_matches_a_plain_scan():
    rng = random.Random(7)
    for _ in range(500):
        a = [rng.randrange(4) for _ in range(rng.randrange(0, 60))]
        b = a[: rng.randrange(0, len(a) + 1)] + [rng.randrange(4) for _ in range(rng.randrange(0, 20))]
        assert common_prefix_len(a, b) == naive(a, b)
        assert common_prefix_len(b, a) == naive(a, b)
