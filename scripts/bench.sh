#!/usr/bin/env bash
# Run the benchmarks in bench/ and print their figures. With arguments, only
# the named ones: `scripts/bench.sh gpu_facts runtime_config`.
# bench/label_nodes.py at full size takes a long time; see its --help.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
scripts/build-fakenvml.sh >/dev/null

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for script in bench/*.py; do names+=("$(basename "$script" .py)"); done
fi
for name in "${names[@]}"; do
    printf '\n=== bench/%s.py ===\n' "$name"
    python "bench/$name.py"
done
