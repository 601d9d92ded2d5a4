# Tools: kva-share (the demo's two-process sharing walk-through).
TOOLS_BINS := $(B)/bin/kva-share

$(B)/bin/%: tools/%.c $(LIB_A) lib/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $< -o $@ $(LIB_A) $(LIB_LDLIBS)

.PHONY: tools
tools: $(TOOLS_BINS)

BENCH_BINS := $(B)/bin/kva-bench-blocks
$(B)/bin/kva-bench-blocks: tools/bench/kva-bench-blocks.c $(LIB_A) lib/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $< -o $@ $(LIB_A) $(LIB_LDLIBS)
tools: $(BENCH_BINS)
