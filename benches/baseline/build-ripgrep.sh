#!/usr/bin/env bash
# Builds the large module of the symbolization benchmark (benches/symbolize.rs): ripgrep for
# wasm32-wasip1, optimized and with full debug info (~38 MB, 16 MB of .debug_info), into
# target/bench-programs/bin/rg.wasm. Needs `rustup target add wasm32-wasip1`; takes a few
# minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_PROFILE_RELEASE_DEBUG=true CARGO_TARGET_DIR=target/bench-programs/build \
    cargo install ripgrep --version 15.2.0 --locked --target wasm32-wasip1 --root target/bench-programs
