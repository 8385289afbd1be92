#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets: fuzz/corpus/<target>/seed-*.

    python3 fuzz/gen_seeds.py          (re)writes every target's seeds (deterministic)

The targets decode their input with `arbitrary::Unstructured` (a weighted choice per byte, ranges
as the proptest generators'), so any bytes are a valid case: the seeds are pseudo-random bytes
of a few lengths from a fixed seed, plus all-zero and all-0xff inputs (the decoders' edges).
`vector_file` is seeded from the scenario vectors (tests/vectors/**, a spread of a few dozen,
and the schema's smallest shapes), `origin_key` from URLs (its first byte sizes the C buffer).
Only files named seed-* are committed (fuzz/.gitignore); libFuzzer's own finds are not.
"""

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")

TARGETS = [
    "differential_base",
    "differential_budget",
    "differential_classes",
    "c_abi",
    "origin_key",
    "options",
    "vector_file",
    "host_segment",
    "fleet_reply",
]

URLS = [
    "https://api.example.com/v1?q=1",
    "HTTPS://API.Example.com:443/",
    "http://[::1]:8080/",
    "http://127.0.0.1/",
    "https://bücher.example/",
    "https://xn--bcher-kva.example:443",
    "ws://chat.example/",
    "ftp://files.example/",
    "foo://host:99",
    "foo://host",
    "file:///etc/passwd",
    "mailto:a@b.example",
    "/relative/path",
    "  https://example.com  ",
    "http://0x7f.1/",
    "https://user:pass@example.com:8443/x#f",
    "http://%41.example/",
    "a://%C3%BC:1",
    "http://[::ffff:1.2.3.4]/",
    "",
]


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def random_seeds(target, rng, lengths):
    for i, n in enumerate(lengths):
        write(target, "%02d" % i, bytes(rng.getrandbits(8) for _ in range(n)))
    write(target, "zeros", bytes(64))
    write(target, "ones", b"\xff" * 64)


def vector_seeds():
    files = []
    base = os.path.join(ROOT, "tests", "vectors")
    for sub in ["", "policies", "admission", "deadline"]:
        d = os.path.join(base, sub)
        names = sorted(n for n in os.listdir(d) if n.endswith(".json") and n != "schema.json")
        # A spread: every k-th file, so each folder gives a handful.
        k = max(1, len(names) // (8 if sub in ("", "admission") else 4))
        files += [os.path.join(d, n) for n in names[::k]]
    for i, path in enumerate(files):
        with open(path) as f:
            v = json.load(f)
        # Compact JSON: smaller seeds, the same parse.
        write("vector_file", "%02d-%s" % (i, v["name"][:40]),
              json.dumps(v, separators=(",", ":")).encode())
    # The registry shapes the runner reads (options, overrides, a global cap, nulls).
    extra = [
        {"name": "r", "registry": {"max_keys": 3, "defaults": {"max_concurrent": 2,
         "queue_timeout_ms": "infinite", "resilience": {"breaker": {"failure_threshold": 3}}},
         "overrides": {"https://Slow.example/v1": {"max_concurrent": 5, "queue_timeout_ms": 0},
                       "k": {"resilience": {"breaker": None, "call_timeout_ms": None}}},
         "global": {"limit": 4, "max_queue": 2}}, "steps": []},
        {"name": "c", "config": {"max_concurrent": 4, "budget": 10, "max_queued_cost": 5,
         "resilience": {"adaptive": {"algorithm": "aimd"}, "breaker": {}}}, "steps": []},
    ]
    for i, v in enumerate(extra):
        write("vector_file", "extra-%d" % i, json.dumps(v, separators=(",", ":")).encode())


def main():
    if os.path.isdir(CORPUS):
        for t in os.listdir(CORPUS):
            d = os.path.join(CORPUS, t)
            for n in os.listdir(d):
                if n.startswith("seed-"):
                    os.remove(os.path.join(d, n))
    rng = random.Random(21)
    for t in TARGETS:
        if t == "vector_file":
            vector_seeds()
        elif t == "origin_key":
            for i, u in enumerate(URLS):
                write(t, "%02d" % i, bytes([rng.randrange(64)]) + u.encode())
        else:
            lengths = {"c_abi": [32, 96, 256, 512, 1024, 2048],
                       "host_segment": [8, 64, 256, 1024, 4096]}.get(t, [16, 48, 128, 256, 512, 1024])
            random_seeds(t, rng, lengths)
    for t in TARGETS:
        print("%-22s %3d seeds" % (t, len(os.listdir(os.path.join(CORPUS, t)))))


if __name__ == "__main__":
    main()
