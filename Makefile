# The two Quick start commands. Both install what is missing (packaging/setup.sh, cached in ~/.cache/kvscope),
# configure and build into ./build.
.PHONY: run cli-demo test test-isa test-llamacpp test-asan test-tsan test-fuzz lint build bench

build:
	@bash packaging/build.sh >/dev/null

# Launches the workbench on the embedded model, ready to press Run (needs a display; `make cli-demo` for a terminal).
run:
	@eval "$$(bash packaging/build.sh)"; ./build/app/kvscope --model "$$KVSCOPE_MODEL"

# The same model from the terminal: a chat answer through an FP8 cache with a shadow reference, then every backend
# compared on the same prompt.
PROMPT ?= Explain in three sentences why a quantized key-value cache saves memory.
cli-demo:
	@eval "$$(bash packaging/build.sh)"; export KVSCOPE_MODEL; \
	  ./build/app/kvscope-cli generate --chat --prompt "$(PROMPT)" --cache fp8:overflow=saturate --shadow --max-new 96 && \
	  ./build/app/kvscope-cli compare --chat --prompt "$(PROMPT)" --max-new 48 --cache fp8 --cache fp8:overflow=saturate \
	    --cache fp8:granularity=head,overflow=saturate --cache quanto:nbits=4 --cache quanto:nbits=2 --cache hqq:nbits=4

# The whole test suite (unit, parity against the pinned Python packages, gui (offscreen and under xvfb-run), bench
# smoke; gpu tests skip without a device). Two tests at a time, each with LibTorch's OpenMP threads: waiting threads
# sleep (OMP_WAIT_POLICY=passive) rather than spin, or the two tests take each other's cores (an eval on the embedded
# model: 2.3 s passive, 3.5 to 15 s spinning, beside a build).
CTEST_ENV = OMP_WAIT_POLICY=passive
test:
	@bash packaging/build.sh >/dev/null
	cd build && $(CTEST_ENV) ctest --output-on-failure -j2 --timeout 1800

# The CPU kernels' tests once per instruction-set path this CPU runs (KVSCOPE_ISA=scalar, avx2, avx512): the AVX2
# twins and the portable loops are tested as the default path on an AVX-512 machine too.
test-isa:
	@bash packaging/build.sh >/dev/null
	bash tests/run_isa_paths.sh build/tests/kvscope_unit_tests

# The llamacpp backend against llama.cpp itself: builds llama.cpp's tools once (packaging/build_llamacpp.sh, into the
# cache dir; several minutes on two cores), then the parity tests that `make test` skips while they are missing
# (the KLD tests; the tokenizer's GGUF SentencePiece case, whose reference is llama-tokenize).
test-llamacpp:
	@bash packaging/build.sh >/dev/null
	@export CCACHE_DIR=$${CCACHE_DIR:-$${KVSCOPE_CACHE:-$$HOME/.cache/kvscope}/ccache}; bash packaging/build_llamacpp.sh >/dev/null
	cd build && ctest --output-on-failure --timeout 1800 -R '^parity\.(llamacpp_kld|tokenizer$$)'

# The unit and parity suites again under AddressSanitizer + UndefinedBehaviorSanitizer (the `asan` preset; any UB
# report fails its test). Left out for time, as they run in `make test`: the two exhaustive 2^32 codec tests, the
# llama.cpp comparison, and the CLI's model commands (cli.robustness, bad input on the same commands, stays in).
ASAN_TARGETS = kvscope_unit_tests kvscope_parity_tests kvscope_model_parity_tests kvscope_gguf_parity_tests \
               kvscope_tokenizer_parity_tests kvscope_fp4_parity_tests kvscope_session_tests kvscope-cli
test-asan:
	@bash packaging/build.sh >/dev/null
	@export CCACHE_DIR=$${CCACHE_DIR:-$${KVSCOPE_CACHE:-$$HOME/.cache/kvscope}/ccache} CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1; \
	  cmake --preset asan >/dev/null && cmake --build build-asan -j 2 --target $(ASAN_TARGETS) >/dev/null
	cd build-asan && $(CTEST_ENV) ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j2 --timeout 1800 -L "unit|parity" \
	  -E "BitExactForAllFloat32|packaging|llamacpp_kld|^cli\.(model_commands|calibrate|eval|tune|shard|probe)$$"

# The engine/GUI threading tests (gui.workbench) under ThreadSanitizer (the `tsan` preset: the engine, the views and the
# tests are instrumented; any report fails the test). One OpenMP thread: libgomp's barriers are invisible to TSan.
test-tsan:
	@bash packaging/build.sh >/dev/null
	@export CCACHE_DIR=$${CCACHE_DIR:-$${KVSCOPE_CACHE:-$$HOME/.cache/kvscope}/ccache} CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1; \
	  cmake --preset tsan >/dev/null && cmake --build build-tsan -j 2 --target kvscope_gui_tests >/dev/null
	cd build-tsan && OMP_NUM_THREADS=1 TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1 allocator_may_return_null=1 history_size=7" \
	  ctest --output-on-failure --timeout 1800 -R '^gui\.workbench$$'

# Every libFuzzer target (the `fuzz` preset: clang, ASan + UBSan) for a short smoke run over seeds the project writes
# (KVSCOPE_FUZZ_SMOKE_SECONDS each, 25 by default); a crash, leak, timeout or sanitizer report fails it.
test-fuzz:
	@bash packaging/build.sh >/dev/null
	@export CCACHE_DIR=$${CCACHE_DIR:-$${KVSCOPE_CACHE:-$$HOME/.cache/kvscope}/ccache} CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1; \
	  cmake --preset fuzz >/dev/null && cmake --build build-fuzz -j 2 --target fuzz_targets >/dev/null
	cd build-fuzz && ctest --output-on-failure -j2 --timeout 600 -L fuzz

# clang-format over the whole tree, clang-tidy over the C++ sources changed since LINT_BASE (default: the last commit);
# any difference or finding fails (packaging/lint.sh).
LINT_BASE ?= HEAD~1
lint:
	@bash packaging/build.sh >/dev/null
	bash packaging/lint.sh $(LINT_BASE)

bench:
	@bash packaging/build.sh >/dev/null
	./build/tests/kvscope_bench --benchmark_counters_tabular=true
