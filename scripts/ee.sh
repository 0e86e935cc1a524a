#!/usr/bin/env bash
# make ee: build the execution environment on the lab's Debian image and run site.yml on the lab from inside it.
#   scripts/ee.sh build   build the image (EE_TAG, default kubegpu-nvidia-ee:lab) from meta/execution-environment.yml's
#                         dependencies with kubegpu-lab-node:latest as the base (scripts/ee_local.py writes the
#                         definition; the collections are tarballs, Galaxy is never asked)
#   scripts/ee.sh site    run kubegpu.nvidia.site --check on the lab (scripts/lab.sh up first) from inside the image
#   scripts/ee.sh         both
# The image reaches the lab as the control host does: host network (the API test server listens on 127.0.0.1),
# the Docker socket (the nodes' connection is community.docker.docker, the docker CLI comes with the lab image),
# lab/ mounted at its own path (inventory, .state/kubeconfig, .state/site-vars.yml). The collection comes from the
# image, not from this checkout.
set -euo pipefail
# shellcheck source=scripts/env.sh
. "$(dirname "$0")/env.sh"
cd "$KUBEGPU_ROOT"

tag="${EE_TAG:-kubegpu-nvidia-ee:lab}"
base="${EE_BASE_IMAGE:-kubegpu-lab-node:latest}"
out="$KUBEGPU_ROOT/.cache/ee"
collections="$VIRTUAL_ENV/lib/python3.11/site-packages/ansible_collections"

build() {
    if ! docker image inspect "$base" >/dev/null 2>&1; then
        echo "ee: no base image $base: run scripts/lab.sh nodes (or make lab) first" >&2
        exit 1
    fi
    rm -rf "$out" && mkdir -p "$out/dist"
    ansible-galaxy collection build --force --output-path "$out/dist" >/dev/null
    python3 scripts/ee_local.py "$out/definition" "$(ls "$out"/dist/*.tar.gz)" "$collections" "$base" "$tag" \
        ${PIP_CERT:+"$PIP_CERT"}
    local start=$SECONDS
    ansible-builder build --container-runtime docker --file "$out/definition/execution-environment.yml" \
        --context "$out/context" --tag "$tag" --verbosity 1 > "$out/build.log" 2>&1 || {
        tail -n 30 "$out/build.log" >&2
        echo "ee: ansible-builder build failed (log: $out/build.log)" >&2
        exit 1
    }
    echo "ee: built $tag in $((SECONDS - start)) s, $(docker image inspect --format '{{.Size}}' "$tag" |
        awk '{printf "%.0f MB", $1 / 1000000}')"
    docker run --rm "$tag" ansible-galaxy collection list --format yaml 2>/dev/null |
        python3 -c 'import sys, yaml
for path, found in sorted(yaml.safe_load(sys.stdin).items()):
    if "/_internal/" not in path:
        print("ee: " + path + ": " + ", ".join("%s %s" % (name, info["version"]) for name, info in sorted(found.items())))'
}

site() {
    if [ ! -s lab/.state/site-vars.yml ]; then
        echo "ee: the lab is not up (no lab/.state/site-vars.yml): run scripts/lab.sh up first" >&2
        exit 1
    fi
    docker run --rm --network host \
        --user "$(id -u):$(id -g)" --group-add "$(stat -c %g /var/run/docker.sock)" \
        -v /var/run/docker.sock:/var/run/docker.sock \
        -v "$KUBEGPU_ROOT/lab:$KUBEGPU_ROOT/lab" -w "$KUBEGPU_ROOT" \
        -e HOME=/tmp -e ANSIBLE_HOST_KEY_CHECKING=false -e ANSIBLE_PIPELINING=true \
        -e ANSIBLE_INJECT_FACT_VARS=false -e ANSIBLE_CALLBACK_RESULT_FORMAT=yaml -e ANSIBLE_NOCOLOR=1 \
        "$tag" ansible-playbook -i lab/inventory.yml -e "@lab/.state/site-vars.yml" kubegpu.nvidia.site --check
}

case "${1:-all}" in
    build) build ;;
    site) site ;;
    all) build; site ;;
    *) echo "usage: scripts/ee.sh [build|site]" >&2; exit 2 ;;
esac
