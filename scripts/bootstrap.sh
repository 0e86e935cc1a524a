#!/usr/bin/env bash
# Install everything the lab and the test suite need on a Debian 12 machine:
# Debian packages when missing, a running Docker engine, a virtualenv with the
# pinned Python tools, this collection on the collections path, and the offline
# pip bootstrap that ansible-test sanity uses.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# The virtualenv's Python: Debian's own (built with PGO and LTO: Ansible runs about a quarter
# faster on it than on an unoptimised build that may come first on PATH), else python3 from PATH.
# KUBEGPU_PYTHON picks another one.
python=${KUBEGPU_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=$(command -v python3)

# Debian packages: docker.io (engine and containerd), debootstrap for the node
# image, gcc for the fake NVML library, kubernetes-client for the kubectl benchmark,
# the shellcheck linter that the sanity test of the scripts needs, and python3-venv.
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v containerd >/dev/null || missing+=(containerd)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v kubectl >/dev/null || missing+=(kubernetes-client)
command -v rsync >/dev/null || missing+=(rsync)
command -v shellcheck >/dev/null || missing+=(shellcheck)
[ "$python" != /usr/bin/python3 ] || dpkg-query -W -f '${Status}' python3-venv 2>/dev/null | grep -q ' installed$' \
    || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: installing ${missing[*]}"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# A Docker engine: start one when none answers.
if ! docker info >/dev/null 2>&1; then
    echo "bootstrap: starting dockerd"
    as_root setsid nohup dockerd >/var/log/kubegpu-dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { echo "bootstrap: dockerd did not start, see /var/log/kubegpu-dockerd.log" >&2; exit 1; }
fi

# The virtualenv, rebuilt only when the pinned requirements or the Python change.
python_id=$("$python" -c 'import sys; print(sys.executable, sys.version)')
stamp=$({ cat requirements/constraints.txt requirements/test.txt; echo "$python_id"; } | sha256sum | cut -c1-16)
if [ "$(cat .venv/.kubegpu-stamp 2>/dev/null)" != "$stamp" ]; then
    echo "bootstrap: creating .venv"
    rm -rf .venv
    "$python" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -c requirements/constraints.txt -r requirements/test.txt
    echo "$stamp" > .venv/.kubegpu-stamp
fi

# Galaxy's importer, in a virtualenv of its own (its pins conflict with the test tools'), for the
# build stage of the test suite.
gi_venv=.cache/galaxy-importer-venv
gi_stamp=$({ cat requirements/galaxy-importer.txt; echo "$python_id"; } | sha256sum | cut -c1-16)
if [ "$(cat "$gi_venv/.kubegpu-stamp" 2>/dev/null)" != "$gi_stamp" ]; then
    echo "bootstrap: creating $gi_venv"
    rm -rf "$gi_venv"
    "$python" -m venv "$gi_venv"
    "$gi_venv/bin/python" -m pip install -q --upgrade pip
    "$gi_venv/bin/python" -m pip install -q -r requirements/galaxy-importer.txt
    echo "$gi_stamp" > "$gi_venv/.kubegpu-stamp"
fi

# This checkout as the collection kubegpu.nvidia.
mkdir -p .cache/collections/ansible_collections/kubegpu "$ANSIBLE_LOCAL_TEMP"
ln -sfn "$KUBEGPU_ROOT" .cache/collections/ansible_collections/kubegpu/nvidia

# ansible-test sanity bootstraps pip in each of its virtualenvs with a script it
# would download; this stand-in does the same from the standard library.
getpip="$HOME/.ansible/test/cache/get_pip_24_2.py"
if [ ! -s "$getpip" ]; then
    mkdir -p "$(dirname "$getpip")"
    cat >"$getpip" <<'PY'
"""Offline stand-in for get-pip.py: ensurepip, then pip installs what was asked."""
import ensurepip
import subprocess
import sys

ensurepip.bootstrap()
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install",
                              "--cert", "/etc/ssl/certs/ca-certificates.crt"] + args))
PY
fi
