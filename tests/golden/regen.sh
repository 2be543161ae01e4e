#!/usr/bin/env bash
# Regenerates the golden files under tests/golden/ from a build of the current
# tree, then shows what changed.  Golden files change only through this
# script, and the diff is reviewed like code:
#     tests/golden/regen.sh [BUILD_DIR]      (default: build)
#     git diff tests/golden/
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$src/build}"
[ -x "$build/npuc" ] || { echo "regen.sh: no npuc binary in $build (build first)" >&2; exit 2; }
cd "$build"
NPUC_GOLDEN_REGEN=1 ctest --output-on-failure -R 'golden'
cd "$src"
git status --short -- tests/golden/ || true
git diff --stat -- tests/golden/ || true
