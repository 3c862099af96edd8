#!/usr/bin/env bash
# A library that differs from a build in one source file, for A/B runs of a kernel experiment:
#   scripts/build_kernel_variant.sh REF FILE NAME [BUILD_DIR]
# compiles FILE as it is at git REF (e.g. a tag experiment/...) with the command BUILD_DIR
# (default build-gpu, built first) compiles FILE with, links it with BUILD_DIR's other objects into
# BUILD_DIR/variants/libhypatia_ops_NAME.so and puts the build metadata beside it. Load it with
# HYPATIA_OPS_LIBRARY=BUILD_DIR/variants/libhypatia_ops_NAME.so (carry BUILD_DIR to the device).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 3 ] || { echo "usage: $0 REF FILE NAME [BUILD_DIR]" >&2; exit 2; }
ref="$1" file="$2" name="$3" build="$(cd "${4:-$root/build-gpu}" && pwd)"
[[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "$0: NAME must be letters, digits, _ or -, got '$name'" >&2; exit 2; }
object="CMakeFiles/hypatia_ops.dir/$file.o"
commands="$(ninja -C "$build" -t commands libhypatia_ops.so)"
compile="$(grep -F -- "-c $root/$file" <<<"$commands" | head -n 1)" || true
[ -n "$compile" ] || { echo "$0: $build does not compile $file" >&2; exit 1; }
link="$(tail -n 1 <<<"$commands")"
ninja -C "$build" libhypatia_ops.so >/dev/null

out="$build/variants"
mkdir -p "$out"
source_copy="$out/$(basename "${file%.*}")_$name.${file##*.}"
git -C "$root" show "$ref:$file" >"$source_copy"
compile="${compile//$object/$out/$name.o}"  # -MT, -MF (its .d) and -o
compile="${compile//-c $root\/$file/-c $source_copy}"
link="${link// $object / $out/$name.o }"
link="${link//-o libhypatia_ops.so /-o $out/libhypatia_ops_$name.so }"
(cd "$build" && eval "$compile" && eval "$link")
cp "$build/hypatia_ops_build_info.json" "$out/"
echo "$out/libhypatia_ops_$name.so: $file at $(git -C "$root" rev-parse --short "$ref"), the rest as $build"
