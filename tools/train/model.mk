# SPDX-License-Identifier: MIT
# model.mk - the trained agent model (tools/train/, models/). Included from
# the top-level Makefile after engine.mk (uses its ENGINE_* variables).
#   make model        retrain from scratch (~30 min of one core) and re-export
#                     models/kvarena-agent-{f32,f16,q8_0}.gguf + training log
#   make eval-model   200 held-out conversations through the engine (greedy,
#                     real tool execution): right tool / arguments / answer
#   make eval-model-http  the same 200 conversations through kvarenad's HTTP
#                     API (started on a free loopback port), tools run by
#                     the client for real
#   make eval-model-server  the calc, calc2, c_compile_run and talk conversations
#                     through kvarenad with the tools run server-side, in its sandbox
#   make check-model  torch cross-check of the engine's logits (F32, Q8_0),
#                     tokenizer parity, one calc round trip, corpus determinism

MODEL_PY        ?= /usr/bin/python3
MODEL_DIR       := models
MODEL_BASE      := $(MODEL_DIR)/kvarena-agent
MODEL_F32       := $(MODEL_BASE)-f32.gguf
MODEL_Q8        := $(MODEL_BASE)-q8_0.gguf
EVAL_MODEL      ?= $(MODEL_F32)
MODEL_TRAIN     := build/train/model
MODEL_CHAT      := build/bin/kve-chat
MODEL_CHAT_SAN  := build/engine/tests/kve-chat-san

.PHONY: model eval-model eval-model-http eval-model-server check-model

$(MODEL_CHAT): tools/train/kve-chat.c $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< $(ENGINE_LIB) -o $@ $(ENGINE_LIBS)

$(MODEL_CHAT_SAN): tools/train/kve-chat.c $(ENGINE_SLIB)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -O1 $(ENGINE_SANFLAGS) $< $(ENGINE_SLIB) -o $@ $(ENGINE_LIBS)

# Three runs: 2700 steps from scratch (the first 900 after a short system
# turn, see train.py) from weights with an induction circuit built in
# (circuit.py), then 600 and 350 more, each from the previous run's
# weights on fresh conversations (seed + 1) at a new learning-rate peak.
# One thread: the same seed gives the same weights, bit for bit, only on
# the same thread count.
MODEL_RUN1_ARGS := --steps 2700 --induction-init --threads 1
MODEL_RUN2_ARGS := --steps 600 --lr 2e-3 --warmup 20 --short-steps 0 --threads 1
MODEL_RUN3_ARGS := --seed 2 --steps 350 --lr 1e-3 --warmup 10 --short-steps 0 --threads 1

model:
	@mkdir -p $(MODEL_TRAIN)/1 $(MODEL_TRAIN)/2 $(MODEL_TRAIN)/3
	nice -n 10 $(MODEL_PY) tools/train/train.py --out $(MODEL_TRAIN)/1 $(MODEL_RUN1_ARGS) > $(MODEL_TRAIN)/1/train.log 2>&1 || \
		{ tail -20 $(MODEL_TRAIN)/1/train.log; exit 1; }
	nice -n 10 $(MODEL_PY) tools/train/train.py --out $(MODEL_TRAIN)/2 --init $(MODEL_TRAIN)/1/ckpt.pt \
		$(MODEL_RUN2_ARGS) > $(MODEL_TRAIN)/2/train.log 2>&1 || \
		{ tail -20 $(MODEL_TRAIN)/2/train.log; exit 1; }
	nice -n 10 $(MODEL_PY) tools/train/train.py --out $(MODEL_TRAIN)/3 --init $(MODEL_TRAIN)/2/ckpt.pt \
		$(MODEL_RUN3_ARGS) > $(MODEL_TRAIN)/3/train.log 2>&1 || \
		{ tail -20 $(MODEL_TRAIN)/3/train.log; exit 1; }
	$(MODEL_PY) tools/train/export_gguf.py $(MODEL_TRAIN)/3/ckpt.pt $(MODEL_BASE)
	cat $(MODEL_TRAIN)/1/train.log $(MODEL_TRAIN)/2/train.log $(MODEL_TRAIN)/3/train.log \
		> $(MODEL_BASE)-train.log
	@tail -2 $(MODEL_BASE)-train.log

eval-model: $(MODEL_CHAT)
	$(MODEL_PY) tools/train/eval.py --chat $(MODEL_CHAT) --model $(EVAL_MODEL)

# kvarenad.mk is included after this file: KVD_BIN is known in recipes only
eval-model-http:
	@$(MAKE) --no-print-directory $(KVD_BIN)
	$(MODEL_PY) tools/train/eval_http.py --kvarenad $(KVD_BIN) --model $(EVAL_MODEL)

eval-model-server:
	@$(MAKE) --no-print-directory $(KVD_BIN)
	$(MODEL_PY) tools/train/eval_http.py --kvarenad $(KVD_BIN) --model $(EVAL_MODEL) --server-tools

check-model: $(MODEL_CHAT_SAN) $(ENGINE_LOGITS)
	@MODEL_PY=$(MODEL_PY) sh tests/model/run.sh $(MODEL_CHAT_SAN) $(ENGINE_LOGITS)
