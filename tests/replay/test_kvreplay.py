#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Unit tests of kvreplay's pure parts (make check-replay runs them first):
the eviction benchmark's arena rule, its run time limits, the server
load it reports and the offline eviction bound."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "replay"))
import kvreplay  # noqa: E402


def sample(held, tool_wait):
    return {"kvarenad_kv_blocks_conversations": held, "kvarenad_kv_blocks_tool_wait": tool_wait}


class ArenaRule(unittest.TestCase):
    def test_running_fit_and_half_the_waiting(self):
        # the start: 1000 blocks all running; then 300 running and 700
        # waiting on tools, three samples of it; idle samples ignored
        tl = [sample(0, 0), sample(1000, 0)] + [sample(1000, 700)] * 3 + [sample(0, 0)]
        a = kvreplay.arena_rule(tl)
        self.assertEqual(a["arena"], 300 + 350)
        self.assertEqual(a["working_set"], 1000)
        self.assertAlmostEqual(a["waiting_share"], 2100 / 4000.0)

    def test_not_half_of_everything(self):
        # half the working set (the rule before) is less than the running
        # conversations need: every policy would evict waiting sessions
        # for room, whatever its ranking (the 18:33 trial)
        tl = [sample(1700, 100)] * 5
        a = kvreplay.arena_rule(tl)
        self.assertGreater(a["arena"], 1600)
        self.assertLess(a["arena"], 1700)

    def test_needs_the_gauge(self):
        with self.assertRaises(ValueError):
            kvreplay.arena_rule([{"kvarenad_kv_blocks_conversations": 10}])
        with self.assertRaises(ValueError):
            kvreplay.arena_rule([sample(0, 0)])


class RunTimeout(unittest.TestCase):
    def sessions(self, tool_s):
        return [{"arrival_ms": 0, "turns": [{"input": 10, "output": 8, "tool": "test",
                                              "tool_ms": tool_s * 1000}, {"input": 10,
                                                                          "output": 8}]}]

    def test_scales_with_the_tools(self):
        # a session whose tools alone take 1500 s cannot finish in the
        # constant 1200 s the benchmark had
        self.assertGreater(kvreplay.run_timeout(self.sessions(1500)), 2 * 1500)

    def test_scales_with_the_ample_run(self):
        # lru ran 2.4x ample's wall in a trial (1353 s against 560 s)
        t = kvreplay.run_timeout(self.sessions(10), ample_wall=560)
        self.assertGreaterEqual(t, 4 * 560)
        self.assertGreater(t, 1353)


class ServerLoad(unittest.TestCase):
    def test_busy_and_queued_shares(self):
        tl = ([{"kvarenad_requests_running": 0, "kvarenad_queue_depth": 0}] * 2 +
              [{"kvarenad_requests_running": 1, "kvarenad_queue_depth": 0}] * 5 +
              [{"kvarenad_requests_running": 3, "kvarenad_queue_depth": 2}] * 3)
        load = kvreplay.server_load(tl)
        self.assertAlmostEqual(load["busy"], 0.8)
        self.assertAlmostEqual(load["queued"], 0.3)

    def test_no_samples(self):
        load = kvreplay.server_load([{"t": 0.5}])
        self.assertNotEqual(load["busy"], load["busy"])    # nan: nothing to say


def loop_run(shared_tokens=0, turn_s=0.5):
    """Three agents in turn (A at 0, 3, 6 s, B at 1, 4, 7, C at 2, 5, 8),
    each turn half a second, each conversation 10 blocks of 16 tokens
    beyond a shared prompt: a recency loop in an arena of two of them."""
    sessions = []
    for i, name in enumerate("ABC"):
        reqs = [{"send": float(i + 3 * k), "total": turn_s, "error": None,
                 "prompt_tokens": shared_tokens + 150, "completion_tokens": 10,
                 "cached_tokens": shared_tokens if i else 0} for k in range(3)]
        sessions.append({"session": name, "requests": reqs})
    return {"label": "loop", "sessions": sessions, "metrics_end": {
        'vllm:cache_config_info{model_name="m",block_size="16",num_gpu_blocks="99"}': 1.0}}


class EvictionBound(unittest.TestCase):
    def test_recency_loop(self):
        # worked by hand: lru evicts the KV whose tool returns next, each
        # return until the first agent ends (5 evictions, 5 misses);
        # Belady evicts the one used again last (3 and 3)
        sessions, shared = kvreplay.kv_turns(loop_run(), 16)
        self.assertEqual(shared, 0)
        lru = kvreplay.evict_sim(sessions, 20, "lru")
        far = kvreplay.evict_sim(sessions, 20, "far")
        self.assertEqual((lru["evictions"], lru["misses"], lru["over"]), (5, 5, 0))
        self.assertEqual((far["evictions"], far["misses"], far["over"]), (3, 3, 0))
        self.assertEqual(kvreplay.evict_sim(sessions, 30, "lru")["evictions"], 0)
        # every wait 2.5 s: the toolwait score with that mean known keeps
        # the KV whose wait is nearly over, as Belady does
        self.assertEqual(kvreplay.class_means(sessions), {None: 2.5})
        self.assertEqual(kvreplay.evict_sim(sessions, 20, "class")["evictions"], 3)
        # no room beside a running turn is counted, not hidden
        self.assertEqual(kvreplay.evict_sim(sessions, 5, "far")["over"], 9)

    def test_watermarks_evict_ahead(self):
        # 25 blocks: below 10 free after B's first turn, evicting up to 20
        # takes B's KV too, which returns at 4 s
        sessions, _ = kvreplay.kv_turns(loop_run(), 16)
        self.assertEqual(kvreplay.evict_sim(sessions, 25, "lru")["evictions"], 5)
        self.assertEqual(kvreplay.evict_sim(sessions, 25, "lru", (10, 20))["evictions"], 6)

    def test_stall_floor(self):
        # turns of half a second never overlap: a return's 10 blocks fit
        # beside them in 15; turns of 1.5 s overlap (C runs when A
        # returns, A when B does...): every return finds 10 of 15 running
        sessions, _ = kvreplay.kv_turns(loop_run(), 16)
        self.assertEqual(kvreplay.stall_floor(sessions, 15), (0, 6))
        self.assertEqual(kvreplay.stall_floor(sessions, 5), (6, 6))
        sessions, _ = kvreplay.kv_turns(loop_run(turn_s=1.5), 16)
        self.assertEqual(kvreplay.stall_floor(sessions, 15), (6, 6))
        self.assertEqual(kvreplay.stall_floor(sessions, 20), (0, 6))

    def test_bound_counts_the_shared_prompt_once(self):
        # 49 blocks every session shares: the same loop in an arena of
        # 20 blocks beside them
        b = kvreplay.eviction_bound(loop_run(784), 49 + 20, fractions=(1.0,))
        self.assertEqual((b["block_tokens"], b["shared"]), (16, 49))
        self.assertEqual((b["lru"], b["oracle"]), (5, 3))
        self.assertAlmostEqual(b["ratio"], 5 / 3.0)
        self.assertEqual(b["working_set"], 49 + 30)
        self.assertEqual(b["curve"][0]["lru"], 0)


if __name__ == "__main__":
    unittest.main()
