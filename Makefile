# The two Quick start commands. Both install what is missing (packaging/setup.sh, cached in ~/.cache/kvscope),
# configure and build into ./build.
.PHONY: run cli-demo test build bench

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
# smoke; gpu tests skip without a device).
test:
	@bash packaging/build.sh >/dev/null
	cd build && ctest --output-on-failure -j2 --timeout 1800

bench:
	@bash packaging/build.sh >/dev/null
	./build/tests/kvscope_bench --benchmark_counters_tabular=true
