# SPDX-License-Identifier: MIT
# replay.mk - the agent-trace replayer (tools/replay/kvreplay.py, Python
# stdlib, gnuplot) and its smoke test. Included from the top-level
# Makefile after tests/daemon/daemon-tests.mk (the hooks build of the
# daemon runs the server-side tool mode). Documentation/replay.md.

.PHONY: check-replay
# a short replay of each policy in both tool modes, its table and plots
# (about 1 min; build/replay/smoke/); the hooks build checks the
# scheduler's books every turn (KVD_AUDIT, daemon/kvarenad/audit.c)
check-replay: $(KVD_BIN) $(KVD_HOOKS_BIN) $(ENGINE_MKMODEL)
	KVD_AUDIT=1 tests/replay/check-replay.sh $(KVD_BIN) $(KVD_HOOKS_BIN) $(ENGINE_MKMODEL)
