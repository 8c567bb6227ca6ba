# The two Quick start commands. Both install what is missing (packaging/setup.sh, cached in ~/.cache/kvscope),
# configure and build into ./build.
.PHONY: run test build bench

build:
	@bash packaging/build.sh >/dev/null

# Runs kvscope on the embedded model. Until the model runtime lands, this is kvscope-cli's cache simulation over
# every backend, plus the embedded model's location.
run:
	@eval "$$(bash packaging/build.sh)"; \
	  echo "embedded model: $$KVSCOPE_MODEL"; \
	  ./build/app/kvscope-cli cache-sim --cache dynamic --cache fp8 --cache fp8:granularity=head \
	    --cache quanto:nbits=4 --cache quanto:nbits=2 --cache hqq:nbits=4 --context 1024 --steps 256

# The whole test suite (unit, parity against the pinned Python packages, gui when built, bench smoke; gpu tests skip
# without a device).
test:
	@bash packaging/build.sh >/dev/null
	cd build && ctest --output-on-failure -j2 --timeout 1800

bench:
	@bash packaging/build.sh >/dev/null
	./build/tests/kvscope_bench --benchmark_counters_tabular=true
