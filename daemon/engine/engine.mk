# SPDX-License-Identifier: MIT
# engine.mk - build, test and benchmark kvarena's CPU inference engine.
# Included from the top-level Makefile (paths are relative to the repo
# root); also usable alone: make -f daemon/engine/engine.mk engine
# Defines only ENGINE_* variables and the phony targets
#   engine check-engine check-engine-avx512 check-engine-peer bench-engine
#   deps-engine deps-engine-avx512 coverage-engine
# Everything it writes goes under build/.

ENGINE_CC       ?= cc
ENGINE_PY       ?= /usr/bin/python3
ENGINE_SRC      := daemon/engine
ENGINE_OUT      := build/engine
ENGINE_BIN      := build/bin
ENGINE_CFLAGS   := -std=c11 -Wall -Wextra -Werror -O2 -g -fno-strict-aliasing \
                   -I$(ENGINE_SRC) -Ilib -Iinclude/uapi
ENGINE_SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                   -fno-omit-frame-pointer $(ENGINE_COVFLAGS)
# libpcre2-8: the BPE pre-tokenizers' regular expressions (tokenizer.c);
# libjansson: JSON Schema parsing for constrained decoding (json_schema.c)
ENGINE_LIBS     := -lpcre2-8 -ljansson -lm -lpthread
# libkvarena (the KV arena library): the top-level Makefile's $(LIB_A);
# standalone, built through the top-level Makefile.
ifeq ($(LIB_A),)
ENGINE_KVA      := build/lib/libkvarena.a
$(ENGINE_KVA): FORCE_ENGINE_KVA
	$(MAKE) -f Makefile $@
.PHONY: FORCE_ENGINE_KVA
FORCE_ENGINE_KVA:
else
ENGINE_KVA      := $(LIB_A)
endif

ENGINE_NAMES    := gguf model pack quant tokenizer forward threads sample kernels \
                   kernels_c kernels_avx2 kernels_avx512 kernels_avxvnni \
                   kernels_avx512vnni selfcheck kv_arena \
                   grammar json_schema constrain
ENGINE_HDRS     := $(wildcard $(ENGINE_SRC)/*.h) lib/kvarena.h \
                   include/uapi/linux/kvarena.h
ENGINE_OBJS     := $(ENGINE_NAMES:%=$(ENGINE_OUT)/obj/%.o)
ENGINE_SOBJS    := $(ENGINE_NAMES:%=$(ENGINE_OUT)/san/%.o)
ENGINE_LIB      := $(ENGINE_OUT)/libkvengine.a
ENGINE_SLIB     := $(ENGINE_OUT)/libkvengine-san.a
ENGINE_MKMODEL  := $(ENGINE_BIN)/kva-mkmodel
# the engine as prefill and decode workers over one arena (make demo)
ENGINE_DEMO     := $(ENGINE_BIN)/kve-demo

ENGINE_TESTS    := test_gguf test_kernels test_tokenizer test_engine test_fuzz test_threads \
                   test_arena test_constrain test_oom test_selfcheck test_sample
ENGINE_TBINS    := $(ENGINE_TESTS:%=$(ENGINE_OUT)/tests/%)
ENGINE_LOGITS   := $(ENGINE_OUT)/tests/kve-logits
# the constrained-decoding property test's generator (constrain-prop.js checks)
ENGINE_KVCGEN   := $(ENGINE_OUT)/tests/kvc-gen
ENGINE_BENCH    := $(ENGINE_OUT)/bench/kve-bench
# the set's one-token products on a model's own matrices (engine.md, "Loads")
ENGINE_TILES    := $(ENGINE_OUT)/bench/kve-tiles
# constrained vs unconstrained decode, schema compile time (BENCH=constrained)
ENGINE_KVCBENCH := $(ENGINE_OUT)/bench/kvc-bench

# test_kernels linked statically (no sanitizers) for the AVX-512 emulation
# lane: check-engine-avx512 boots it under Bochs's Ice Lake CPU model
# (AVX-512 with VNNI)
ENGINE_EMU_TK   := $(ENGINE_OUT)/avx512emu/test_kernels

.PHONY: engine check-engine check-engine-avx512 check-engine-peer bench-engine deps-engine \
	deps-engine-avx512 coverage-engine

engine: $(ENGINE_LIB) $(ENGINE_SLIB) $(ENGINE_MKMODEL) $(ENGINE_TBINS) \
	$(ENGINE_LOGITS) $(ENGINE_KVCGEN) $(ENGINE_BENCH) $(ENGINE_TILES) $(ENGINE_KVCBENCH) \
	$(ENGINE_DEMO)

$(ENGINE_OBJS): $(ENGINE_OUT)/obj/%.o: $(ENGINE_SRC)/%.c $(ENGINE_HDRS)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -c $< -o $@

$(ENGINE_SOBJS): $(ENGINE_OUT)/san/%.o: $(ENGINE_SRC)/%.c $(ENGINE_HDRS)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -O1 $(ENGINE_SANFLAGS) -c $< -o $@

$(ENGINE_LIB): $(ENGINE_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(ENGINE_SLIB): $(ENGINE_SOBJS)
	@rm -f $@
	ar rcs $@ $^

$(ENGINE_MKMODEL): tools/mkmodel/mkmodel.c tools/mkmodel/corpus.h $(ENGINE_HDRS)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< -o $@ -lm

$(ENGINE_TBINS): $(ENGINE_OUT)/tests/%: tests/engine/%.c tests/engine/tcheck.h \
		tests/engine/nojit.h $(ENGINE_SLIB) $(ENGINE_KVA)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -O1 $(ENGINE_SANFLAGS) -Itests/engine $< \
		$(ENGINE_SLIB) $(ENGINE_KVA) -o $@ $(ENGINE_LIBS) $(ENGINE_TLDFLAGS)

# test_tokenizer runs the pre-tokenizers once more under a seccomp filter
# that refuses executable memory (PCRE2's JIT off, its interpreter on;
# tests/engine/nojit.h)
$(ENGINE_OUT)/tests/test_tokenizer: ENGINE_TLDFLAGS := -lseccomp

# test_oom fails the engine's allocations one by one (tests/engine/test_oom.c),
# the interpreter's among them under the same filter
$(ENGINE_OUT)/tests/test_oom: ENGINE_TLDFLAGS := -lseccomp \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=strdup

$(ENGINE_LOGITS): tests/engine/kve-logits.c tests/engine/tcheck.h $(ENGINE_SLIB) $(ENGINE_KVA)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -O1 $(ENGINE_SANFLAGS) -Itests/engine $< \
		$(ENGINE_SLIB) $(ENGINE_KVA) -o $@ $(ENGINE_LIBS)

$(ENGINE_KVCGEN): tests/engine/kvc-gen.c tests/engine/cgen.h tests/engine/tcheck.h $(ENGINE_SLIB) \
		$(ENGINE_KVA)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -O1 $(ENGINE_SANFLAGS) -Itests/engine $< \
		$(ENGINE_SLIB) $(ENGINE_KVA) -o $@ $(ENGINE_LIBS)

$(ENGINE_DEMO): tools/kve-demo/kve-demo.c $(ENGINE_LIB) $(ENGINE_KVA)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< $(ENGINE_LIB) $(ENGINE_KVA) -o $@ $(ENGINE_LIBS)

$(ENGINE_BENCH): tools/bench/engine/kve-bench.c tools/bench/engine/bench_argmax.h $(ENGINE_LIB) $(ENGINE_KVA)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< $(ENGINE_LIB) $(ENGINE_KVA) -o $@ $(ENGINE_LIBS)

$(ENGINE_TILES): tools/bench/engine/kve-tiles.c $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< $(ENGINE_LIB) -o $@ $(ENGINE_LIBS)

$(ENGINE_KVCBENCH): tools/bench/engine/kvc-bench.c $(ENGINE_LIB)
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $< $(ENGINE_LIB) -o $@ $(ENGINE_LIBS)

check-engine: engine
	@ENGINE_PY=$(ENGINE_PY) sh tests/engine/run.sh

# the engine against llama.cpp (its quantiser, logits, greedy decoding,
# dequantisation) on the same files, and the shipped agent model's chat
# prompts and token ids as llama.cpp renders and tokenizes them
# (tests/model/llama-peer.py): fetches the benchmark's peer into
# its cache first; 1-2.5 minutes (Documentation/engine.md)
check-engine-peer: engine build/chat/tests/kvd-chat-render
	@ENGINE_PY=$(ENGINE_PY) sh tests/engine/peer.sh

# the engine suite's branch coverage, to find what no test exercises:
# every condition it never makes true or never makes false
# (build/engine-cov/untaken.txt; minutes; not part of make check)
coverage-engine: $(ENGINE_MKMODEL)
	@ENGINE_PY=$(ENGINE_PY) sh tests/engine/coverage.sh

$(ENGINE_EMU_TK): tests/engine/test_kernels.c tests/engine/tcheck.h $(ENGINE_LIB) \
		| deps-engine-avx512
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) -static -Itests/engine $< $(ENGINE_LIB) -o $@ \
		$(ENGINE_LIBS)

# The AVX-512 and AVX-512 VNNI kernels under emulation (no CPU here has
# AVX-512), 2-15 minutes by the host's load; see Documentation/engine.md.
check-engine-avx512: $(ENGINE_EMU_TK)
	@sh tests/engine/avx512-emu.sh $(ENGINE_EMU_TK)

deps-engine-avx512:
	@scripts/deps.sh avx512-emu

bench-engine: engine
	@sh tools/bench/engine/bench.sh

deps-engine:
	@missing=""; \
	[ -f /usr/include/pcre2.h ] || missing="$$missing libpcre2-dev"; \
	[ -f /usr/include/jansson.h ] || missing="$$missing libjansson-dev"; \
	[ -f /usr/share/nodejs/ajv/package.json ] || missing="$$missing node-ajv"; \
	$(ENGINE_PY) -c 'import numpy' 2>/dev/null || missing="$$missing python3-numpy"; \
	$(ENGINE_PY) -c 'import regex' 2>/dev/null || missing="$$missing python3-regex"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	command -v git >/dev/null 2>&1 || missing="$$missing git"; \
	if [ -n "$$missing" ]; then \
		echo "deps-engine: installing$$missing"; \
		apt-get install -y $$missing || { apt-get update && apt-get install -y $$missing; }; \
	else echo "deps-engine: nothing to install"; fi
