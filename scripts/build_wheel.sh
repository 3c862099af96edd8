#!/usr/bin/env bash
# Builds the wheel (pyproject.toml, scikit-build-core) out of the build tree that scripts/build.sh
# made (build/ or $HYPATIA_BUILD_DIR), so that nothing compiles twice, into $build/wheelhouse/:
# tests/python/test_packaging.py installs it into a fresh venv. (Users run `pip install .`, which
# builds in a tree of its own.) The tree keeps the wheel's install layout (HYPATIA_INSTALL_LAYOUT,
# CMakeLists.txt) for later `cmake --install`s. Where the Python has no scikit-build-core it builds
# none, and those tests skip.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup_env.sh"
build="${HYPATIA_BUILD_DIR:-$root/build}"
rm -rf "$build/wheelhouse"
if ! "$HYPATIA_PY" -c 'import scikit_build_core' 2>/dev/null; then
  echo "build_wheel: no scikit-build-core in $HYPATIA_PY: no wheel built"
  exit 0
fi
# The build tree's own settings stay as they are (pyproject.toml turns the tests off for pip installs).
tests="$(sed -n 's/^HYPATIA_BUILD_TESTS:BOOL=//p' "$build/CMakeCache.txt")"
"$HYPATIA_PY" -m pip wheel -v --no-build-isolation --no-deps -w "$build/wheelhouse" -C build-dir="$build" \
  -C cmake.define.HYPATIA_BUILD_TESTS="${tests:-ON}" "$root" >"$build/wheel.log" 2>&1 \
  || { tail -40 "$build/wheel.log"; exit 1; }
echo "built $(ls "$build"/wheelhouse/*.whl)"
