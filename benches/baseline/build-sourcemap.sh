#!/usr/bin/env bash
# Builds the module of the symbolization benchmark's source-map row (benches/symbolize.rs): a
# generated C program (48 files of 64 functions, each a loop of 100 lines, a quarter of them
# calling an inlined helper) built by clang for WASI with DWARF, and its source map (v3) made
# from that DWARF by Emscripten's wasm-sourcemap.py, as Emscripten's -gsource-map makes it:
# target/bench-programs/sourcemap/gen.wasm and gen.wasm.map (~10 MB). Needs what
# scripts/test.sh installs (clang, lld, wasi-libc, emscripten); takes a few minutes on two
# cores. Does nothing once built.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/bench-programs/sourcemap
[ -s "$out/gen.wasm.map" ] && exit 0
mkdir -p "$out/src"
python3 - "$out/src" <<'EOF'
import sys
out = sys.argv[1]
for f in range(48):
    lines = [f"static inline unsigned mix{f}(unsigned x, unsigned k) {{",
             "  x ^= x >> 13;", "  x *= k;", "  return x ^ (x >> 7);", "}"]
    for g in range(64):
        lines += [f"unsigned f{f}_{g}(const unsigned *a, unsigned n) {{",
                  f"  unsigned h = {f * 7919 + g}u;", "  for (unsigned i = 0; i < n; i++) {"]
        for s in range(100):
            k = (f * 131 + g * 31 + s * 7) % 1000 * 2 + 1
            if s % 4 == 3:
                lines.append(f"    h = mix{f}(h, a[(i + {s}u) % n] | {k}u);")
            else:
                lines.append(f"    h = (h ^ a[(i + {s}u) % n]) * {k}u + {s}u;")
        lines += ["  }", "  return h;", "}"]
    open(f"{out}/gen{f}.c", "w").write("\n".join(lines) + "\n")
EOF
# Compiled apart and linked without -O: given -O, clang's driver runs wasm-opt on the linked
# module, which drops the line tables the map is made of. Every function exported, none
# called: the module is symbolized, never run.
ls "$out"/src/gen*.c | xargs -P "$(nproc)" -I{} clang --target=wasm32-wasi -O1 -g -c {} -o {}.o
clang --target=wasm32-wasi -g -nostartfiles -Wl,--no-entry -Wl,--export-all "$out"/src/*.o -o "$out/gen.wasm"
rm "$out"/src/*.o
dwarfdump=$(command -v llvm-dwarfdump || ls /usr/bin/llvm-dwarfdump-* | head -1)
python3 /usr/share/emscripten/tools/wasm-sourcemap.py "$out/gen.wasm" \
    --dwarfdump="$dwarfdump" -o "$out/gen.wasm.map.tmp" --basepath="$PWD/$out"
mv "$out/gen.wasm.map.tmp" "$out/gen.wasm.map"
