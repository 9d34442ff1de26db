#!/usr/bin/env bash
# Rebuilds examples/hotspots.wasm (committed). Needs Debian clang lld wasi-libc libclang-rt-14-dev-wasm32.
# Compile and link separately: a one-step clang build runs wasm-opt when installed, which drops the name section.
set -euo pipefail
cd "$(dirname "$0")"
# Source paths in the DWARF are relative to the repository, whoever builds it.
clang --target=wasm32-wasi -g -O2 -ffile-prefix-map="$(pwd)=examples" -c hotspots.c -o hotspots.o
clang --target=wasm32-wasi -g hotspots.o -o hotspots.wasm
rm hotspots.o
