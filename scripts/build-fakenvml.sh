#!/usr/bin/env bash
# Build the fake NVML library (tests/support/fakenvml/fakenvml.c) three times:
#   .cache/fakenvml/full/libnvidia-ml.so.1           every function pynvml needs for GPU discovery
#   .cache/fakenvml/legacy/libnvidia-ml.so.1         without the MIG, attributes and compute capability functions
#   .cache/fakenvml/attributes-v1/libnvidia-ml.so.1  without nvmlDeviceGetAttributes_v2 (a driver before R470)
# Rebuilds only when the source or this script changed. Prints the output directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tests/support/fakenvml/fakenvml.c"
out="${FAKENVML_OUT:-$root/.cache/fakenvml}"
stamp="$out/.stamp"
want=$(cat "$src" "$0" | sha256sum | cut -c1-16)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
    && [ -f "$out/full/libnvidia-ml.so.1" ] && [ -f "$out/legacy/libnvidia-ml.so.1" ] \
    && [ -f "$out/attributes-v1/libnvidia-ml.so.1" ]; then
    echo "$out"
    exit 0
fi

cc="${CC:-gcc}"
flags=(-std=c11 -D_GNU_SOURCE -O2 -g0 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden
       "-Wl,-soname,libnvidia-ml.so.1" "-Wl,--no-undefined")
mkdir -p "$out/full" "$out/legacy" "$out/attributes-v1"
build() {  # build DIR [extra flags...]: compile into a temporary file of this process, then rename
    # (parallel test workers may build at the same time; each rename is atomic)
    local dir=$1; shift
    "$cc" "${flags[@]}" "$@" -o "$out/$dir/.libnvidia-ml.so.1.tmp.$$" "$src"
    mv -f "$out/$dir/.libnvidia-ml.so.1.tmp.$$" "$out/$dir/libnvidia-ml.so.1"
}
build full
build legacy -DFAKENVML_LEGACY
build attributes-v1 -DFAKENVML_NO_ATTRIBUTES_V2
echo "$want" >"$stamp"
echo "$out"
