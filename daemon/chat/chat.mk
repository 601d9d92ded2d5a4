# SPDX-License-Identifier: MIT
# chat.mk - model families (daemon/chat/): chat templates and tool-call
# syntaxes, shared by the API front ends and the orchestrator, and their
# tests. Included from the top-level Makefile (-include) before api.mk and
# kvarenad.mk; paths from the repo root.
#
#   CHAT_LIB / CHAT_SLIB   the room as a static library (plain / ASan+UBSan),
#                          with daemon/common/strbuf.c; link -ljansson
#   fuzz-chat, check-chat-fuzz  the parsers and template recognition
#                          under libFuzzer (check-chat-unit runs 10,000
#                          inputs; the hardening lane a million)
#   check-chat             its unit tests, then the families against
#                          llama.cpp's own rendering (check-chat-llama:
#                          fetches the peer like BENCH=engine does)

CHAT_CC     ?= cc
CHAT_SRC    := daemon/chat
CHAT_OUT    := build/chat
CHAT_CFLAGS := -std=c11 -Wall -Wextra -Werror -O2 -g -I$(CHAT_SRC) -Idaemon/common
CHAT_SAN    := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=all
CHAT_SRCS   := $(sort $(wildcard $(CHAT_SRC)/*.c)) daemon/common/strbuf.c
CHAT_HDRS   := $(wildcard $(CHAT_SRC)/*.h) daemon/common/strbuf.h
CHAT_OBJS   := $(CHAT_SRCS:%.c=$(CHAT_OUT)/obj/%.o)
CHAT_SOBJS  := $(CHAT_SRCS:%.c=$(CHAT_OUT)/san/%.o)
CHAT_LIB    := $(CHAT_OUT)/libkvdchat.a
CHAT_SLIB   := $(CHAT_OUT)/libkvdchat-san.a
CHAT_UNIT   := $(CHAT_OUT)/tests/test_chat
CHAT_RENDER := $(CHAT_OUT)/tests/kvd-chat-render
CHAT_DEFUSE := $(CHAT_OUT)/tests/test_defuse
CHAT_PROP   := $(CHAT_OUT)/tests/test_calls_prop
CHAT_TSUP   := tests/chat/jconv.c tests/chat/jconv.h
CHAT_FUZZ   := $(CHAT_OUT)/fuzz_chat
CHAT_FUZZCC ?= clang

.PHONY: chat check-chat fuzz-chat check-chat-fuzz
chat: $(CHAT_LIB) $(CHAT_SLIB) $(CHAT_UNIT) $(CHAT_RENDER)

$(CHAT_OBJS): $(CHAT_OUT)/obj/%.o: %.c $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) -c $< -o $@

$(CHAT_SOBJS): $(CHAT_OUT)/san/%.o: %.c $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -c $< -o $@

$(CHAT_LIB): $(CHAT_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(CHAT_SLIB): $(CHAT_SOBJS)
	@rm -f $@
	ar rcs $@ $^

$(CHAT_UNIT): tests/chat/test_chat.c $(CHAT_TSUP) $(CHAT_SLIB) $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -Itests/chat $< tests/chat/jconv.c $(CHAT_SLIB) -o $@ \
		-lcunit -ljansson

$(CHAT_RENDER): tests/chat/chat-render.c $(CHAT_TSUP) $(CHAT_SLIB) $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -Itests/chat $< tests/chat/jconv.c $(CHAT_SLIB) -o $@ \
		-ljansson

# tokenizing rendered prompts with special tokens only in their markup
# (the engine's tokenizer, the shipped agent model, a kva-mkmodel model)
$(CHAT_DEFUSE): tests/chat/test_defuse.c $(CHAT_TSUP) $(CHAT_SLIB) $(CHAT_HDRS) $(ENGINE_SLIB)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -Itests/chat -Idaemon/engine $< tests/chat/jconv.c \
		$(CHAT_SLIB) $(ENGINE_SLIB) -o $@ -ljansson $(ENGINE_LIBS)

# the structured decoder's outputs, parsed by each family's parser
$(CHAT_PROP): tests/chat/test_calls_prop.c daemon/kvarenad/callsyntax.h $(CHAT_SLIB) $(CHAT_HDRS) \
		$(ENGINE_SLIB)
	@mkdir -p $(@D)
	$(CHAT_CC) $(CHAT_CFLAGS) $(CHAT_SAN) -Idaemon/kvarenad -Idaemon/engine $< $(CHAT_SLIB) \
		$(ENGINE_SLIB) -o $@ -ljansson $(ENGINE_LIBS)

# generated text and GGUF templates under libFuzzer (tests/chat/fuzz_chat.c)
fuzz-chat: $(CHAT_FUZZ)
$(CHAT_FUZZ): tests/chat/fuzz_chat.c $(CHAT_SRCS) $(CHAT_HDRS)
	@mkdir -p $(@D)
	$(CHAT_FUZZCC) -std=c11 -Wall -Wextra -Werror -g -O1 -I$(CHAT_SRC) -Idaemon/common \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/chat/fuzz_chat.c $(CHAT_SRCS) -o $@ -ljansson

# the hardening lane's part: a million inputs (FUZZ_CHAT_RUNS), no report
FUZZ_CHAT_RUNS ?= 1000000
check-chat-fuzz: $(CHAT_FUZZ)
	@nice -n 10 tests/chat/fuzz-chat.sh $(FUZZ_CHAT_RUNS)

CHAT_BPE_MODEL := $(CHAT_OUT)/tests/bpe.gguf
$(CHAT_BPE_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 32 --layers 1 --heads 2 --ffn 64 --vocab 512 --ctx 256 \
		--tokenizer bpe --type f32 --seed 3 -o $@ >/dev/null

# llama.cpp's chat code (libllama-common from the peer cache), test-time only
CHAT_LLAMA_REF := $(CHAT_OUT)/tests/llama-chat-ref
CHAT_PEER      := build/engine/bench/llama-driver

.PHONY: check-chat-unit check-chat-llama check-chat-serve
check-chat: check-chat-unit check-chat-llama check-chat-serve

# the real kvarenad with the agent model: markers in client text stay
# plain, and spelled turns do not continue a conversation's KV; then every
# family chosen at start and serving a forced call on each API
check-chat-serve: $(ENGINE_MKMODEL)
	@$(MAKE) --no-print-directory daemon >/dev/null
	python3 tests/chat/defuse_serve.py $(B)/bin/kvarenad models/kvarena-agent-f32.gguf
	python3 tests/chat/family_serve.py $(B)/bin/kvarenad $(ENGINE_MKMODEL)

check-chat-unit: $(CHAT_UNIT) $(CHAT_DEFUSE) $(CHAT_PROP) $(CHAT_BPE_MODEL) $(CHAT_FUZZ)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(CHAT_UNIT)
	ASAN_OPTIONS=detect_leaks=1 ./$(CHAT_PROP) $(CHAT_BPE_MODEL) $(CHAT_PROP_SEED)
	ASAN_OPTIONS=detect_leaks=1 ./$(CHAT_DEFUSE) models/kvarena-agent-f32.gguf $(CHAT_BPE_MODEL)
	FUZZ_CHAT_DIR=$(CHAT_OUT)/fuzz-chat-unit tests/chat/fuzz-chat.sh 10000
	sh scripts/check-layering.sh

check-chat-llama: $(CHAT_RENDER) $(CHAT_DEFUSE) $(CHAT_BPE_MODEL)
	@cache=$$(sh tools/bench/engine/fetch-llama.sh $(CHAT_PEER)) && \
	if [ ! -x $(CHAT_LLAMA_REF) ] || [ tests/chat/llama-chat-ref.cpp -nt $(CHAT_LLAMA_REF) ]; then \
		echo "  CXX $(CHAT_LLAMA_REF)"; \
		$(CXX) -std=c++17 -O1 -I$$cache/src/common -I$$cache/src/include \
			-I$$cache/src/ggml/include -I$$cache/src/vendor tests/chat/llama-chat-ref.cpp \
			-L$$cache/lib -lllama-common -lllama -lggml -lggml-base \
			-Wl,-rpath,$$cache/lib -o $(CHAT_LLAMA_REF) || exit 1; \
	fi && \
	python3 tests/chat/llama-ref.py $(CHAT_RENDER) $(CHAT_LLAMA_REF) $$cache/src/models/templates && \
	ASAN_OPTIONS=detect_leaks=1 ./$(CHAT_DEFUSE) models/kvarena-agent-f32.gguf $(CHAT_BPE_MODEL) \
		$$cache/src/models
