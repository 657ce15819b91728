# The front door. `make demo` and `make test` install what they need first.
.PHONY: deps build test demo bench clean

JOBS ?= $(shell nproc)

deps:
	./scripts/install-deps.sh

build: deps
	cmake --preset default >/dev/null
	cmake --build --preset default -j $(JOBS)

test: deps
	./scripts/test.sh

demo: build
	./scripts/demo.sh

bench: build
	./bench/run.sh

clean:
	rm -rf build
