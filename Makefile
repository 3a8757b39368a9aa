# Thin wrappers over CMake presets. Quick start: `make run`, `make test`.
.PHONY: deps build run test test-asan fuzz format format-check clean bench

JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 30
CLANG_FORMAT ?= clang-format
SOURCES = $(shell git ls-files 'src/*.cc' 'src/*.h' 'tests/*.cc' 'tests/*.h' 2>/dev/null)

deps:
	@scripts/install-deps.sh

build/release/build.ninja: CMakeLists.txt CMakePresets.json | deps
	cmake --preset release >/dev/null

build: deps build/release/build.ninja
	cmake --build build/release -j $(JOBS)

# Builds only the CLI, then prints a story from the embedded default model.
run: deps build/release/build.ninja
	cmake --build build/release -j $(JOBS) --target dsv4
	build/release/dsv4 run

test: build
	cd build/release && ctest --output-on-failure -j $(JOBS)
	@if ls tests/integration/test_*.py >/dev/null 2>&1; then \
	  DSV4_BIN=$(CURDIR)/build/release/dsv4 .venv/bin/python -m pytest -q tests/integration; \
	fi

test-asan: deps
	cmake --preset asan-ubsan >/dev/null
	cmake --build build/asan-ubsan -j $(JOBS)
	cd build/asan-ubsan && ctest --output-on-failure -j $(JOBS)

# Runs every libFuzzer target for FUZZ_SECONDS each, from its seed corpus.
fuzz: deps
	cmake --preset asan-ubsan >/dev/null
	cmake --build build/asan-ubsan -j $(JOBS)
	@set -e; for f in $$(find build/asan-ubsan/tests -type f -name 'fuzz_*' -perm -u+x | sort); do \
	  name=$$(basename $$f); seeds=""; \
	  for d in tests/fuzz/corpus/$$name tests/*/fuzz_corpus/$${name#fuzz_}; do \
	    [ -d "$$d" ] && seeds="$$seeds $$d"; \
	  done; \
	  mkdir -p build/fuzz-corpus/$$name; \
	  echo "== $$name ($(FUZZ_SECONDS)s)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -max_len=65536 \
	      build/fuzz-corpus/$$name $$seeds; \
	done

format:
	$(CLANG_FORMAT) -i $(SOURCES)

format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(SOURCES)

clean:
	rm -rf build
