#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""kv_subscriber.py - a real ZeroMQ subscriber (Debian's python3-zmq and
python3-msgpack) for kvarenad's KV events, decoding them the way the
routers that consume vLLM's stream do (llm-d's kv-cache indexer: three
frames, an 8-byte big-endian sequence number, a msgpack array batch of
tagged array events).

    kv_subscriber.py ENDPOINT [--replay ENDPOINT] [--topic PREFIX]

Prints "ready" once subscribed (and, with --replay, after asking for
every buffered batch from sequence 0), then one JSON line per batch, in
sequence order without duplicates:
    {"seq": N, "topic": "..." (null for a replayed batch), "ts": F,
     "dp_rank": R, "events": [
        {"type": "BlockStored", "block_hashes": ["H", ...], "parent": "H"|null,
         "token_ids": [...], "block_size": B, "lora_id": null,
         "medium": null, "lora_name": null}, ...]}
Anything that does not decode exactly so is printed as {"error": "..."}
and the subscriber exits 1. stdin closing ends it (exit 0).
"""
import json
import select
import sys
import time

import msgpack
import zmq


def fail(why):
    print(json.dumps({"error": why}), flush=True)
    sys.exit(1)


def u64(x, what):
    """A uint64 hash, printed as a decimal string (JSON readers keep
    integers to 2^63)."""
    if not isinstance(x, int) or x < 0 or x >= 1 << 64:
        fail("%s: not a uint64: %r" % (what, x))
    return str(x)


def decode_event(ev):
    if not isinstance(ev, list) or not ev or not isinstance(ev[0], str):
        fail("event is not a tagged array: %r" % (ev,))
    tag = ev[0]
    if tag == "BlockStored":
        if len(ev) != 8:
            fail("BlockStored has %d fields, want 8" % len(ev))
        _, hashes, parent, tokens, bs, lora_id, medium, lora_name = ev
        if not isinstance(hashes, list) or not hashes:
            fail("BlockStored: block_hashes")
        if not isinstance(tokens, list) or not isinstance(bs, int) or bs <= 0:
            fail("BlockStored: token_ids / block_size")
        if len(tokens) != len(hashes) * bs:
            fail("BlockStored: %d tokens for %d blocks of %d" % (len(tokens), len(hashes), bs))
        if any(not isinstance(t, int) for t in tokens):
            fail("BlockStored: token ids must be integers")
        return {"type": tag, "block_hashes": [u64(h, "hash") for h in hashes],
                "parent": None if parent is None else u64(parent, "parent"),
                "token_ids": tokens, "block_size": bs, "lora_id": lora_id,
                "medium": medium, "lora_name": lora_name}
    if tag == "BlockRemoved":
        if len(ev) != 3 or not isinstance(ev[1], list) or not ev[1]:
            fail("BlockRemoved: %r" % (ev,))
        return {"type": tag, "block_hashes": [u64(h, "hash") for h in ev[1]],
                "medium": ev[2]}
    if tag == "AllBlocksCleared":
        if len(ev) != 1:
            fail("AllBlocksCleared has fields")
        return {"type": tag}
    fail("unknown event tag %r" % tag)


def decode_batch(seq, topic, payload):
    b = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not isinstance(b, list) or len(b) not in (2, 3):
        fail("batch is not [ts, events, dp_rank]")
    if not isinstance(b[0], float) or not isinstance(b[1], list):
        fail("batch: ts must be a float, events a list")
    dp = b[2] if len(b) == 3 else None
    return {"seq": seq, "topic": topic, "ts": b[0], "dp_rank": dp,
            "events": [decode_event(e) for e in b[1]]}


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint, replay_ep, topic = args[0], None, ""
    i = 1
    while i < len(args):
        if args[i] == "--replay":
            replay_ep = args[i + 1]
        elif args[i] == "--topic":
            topic = args[i + 1]
        i += 2
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.connect(endpoint)
    sub.setsockopt_string(zmq.SUBSCRIBE, topic)
    seen = set()
    pending = {}
    next_seq = 0
    time.sleep(0.3)     # the subscription reaches the publisher
    if replay_ep:
        rep = ctx.socket(zmq.DEALER)
        rep.connect(replay_ep)
        rep.send_multipart([b"", (0).to_bytes(8, "big")])
        while True:
            if not rep.poll(5000):
                fail("replay: no answer")
            f = rep.recv_multipart()
            if len(f) != 3 or f[0] != b"" or len(f[1]) != 8:
                fail("replay: bad frames")
            s = int.from_bytes(f[1], "big", signed=True)
            if s == -1:
                break
            pending[s] = decode_batch(s, None, f[2])
        rep.close(0)
    print("ready", flush=True)
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    while True:
        for s in sorted(pending):
            if s in seen:
                continue
            if s != next_seq and seen:
                # a gap the replay did not fill: say so, keep order
                fail("sequence gap: %d after %d" % (s, next_seq - 1))
            seen.add(s)
            next_seq = s + 1
            print(json.dumps(pending[s]), flush=True)
        pending.clear()
        r, _, _ = select.select([sys.stdin], [], [], 0)
        if r and not sys.stdin.readline():
            return 0
        if not dict(poller.poll(100)):
            continue
        f = sub.recv_multipart()
        if len(f) != 3 or len(f[1]) != 8:
            fail("expected [topic, seq, payload], got %d frames" % len(f))
        s = int.from_bytes(f[1], "big")
        if s not in seen:
            pending[s] = decode_batch(s, f[0].decode(), f[2])


if __name__ == "__main__":
    sys.exit(main())
