#!/usr/bin/env bash
# ansible-test sanity over a private copy of this checkout laid out as
# .../ansible_collections/kubegpu/nvidia/ (where ansible-test must run).
# Arguments go to ansible-test: `scripts/sanity.sh --test pep8 plugins/modules/x.py`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
base=$(mktemp -d "${TMPDIR:-/tmp}/kubegpu-sanity.XXXXXX")
trap 'rm -rf "$base"' EXIT
dest="$base/ansible_collections/kubegpu/nvidia"
mkdir -p "$dest"
git ls-files -co --exclude-standard -z | rsync -a --from0 --files-from=- . "$dest/"
cd "$dest"
ansible-test sanity --local --python 3.11 --color no "$@"
