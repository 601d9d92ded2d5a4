#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Unit tests of kvreplay's pure parts (make check-replay runs them first):
the eviction benchmark's arena rule, its run time limits and the server
load it reports."""
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


if __name__ == "__main__":
    unittest.main()
