#!/usr/bin/env bash
# Builds with cargo and prints the path of the executable it built, where
# cargo put it (CARGO_TARGET_DIR, a workspace's target, a config's
# build.target-dir): scripts run what this prints, never a path under
# target/ of their own making.
#
#   tools/built.sh build --release -p depengine-serve --bin serve
#   tools/built.sh test --release --features mpi --test mpi_collectives --no-run
#
# Diagnostics go to standard error as cargo renders them; exits non-zero
# if the build fails or builds no executable.
set -euo pipefail
exe=$(cargo "$@" --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
if [ -z "$exe" ]; then
    echo "tools/built.sh: cargo $* built no executable" >&2
    exit 1
fi
echo "$exe"
