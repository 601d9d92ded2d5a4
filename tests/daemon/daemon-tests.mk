# SPDX-License-Identifier: MIT
# The daemon's tests: the orchestrator end to end without HTTP
# (test_orch: real workers, engine and arena), under ASan/UBSan.
KVD_TEST_ORCH  := $(KVD_OUT)/tests/test_orch
KVD_TEST_MODEL := $(KVD_OUT)/tests/orch-bpe.gguf

$(KVD_TEST_ORCH): tests/daemon/test_orch.c $(KVD_CORE_SLIB) $(ENGINE_SLIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) $< $(KVD_CORE_SLIB) $(ENGINE_SLIB) $(LIB_A) \
		-o $@ $(KVD_LDLIBS)

$(KVD_TEST_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 \
		--vocab 512 --ctx 1024 --tokenizer bpe --type f32 --seed 3 -o $@ >/dev/null

.PHONY: check-orch
check-orch: $(KVD_TEST_ORCH) $(KVD_TEST_MODEL) $(KVD_PLUGIN)
	ASAN_OPTIONS=detect_leaks=1 $(KVD_TEST_ORCH) $(KVD_TEST_MODEL) $(KVD_PLUGIN)
