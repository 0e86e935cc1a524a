#!/usr/bin/env bash
# The lab: simulated GPU nodes as systemd containers (see docs/lab.md).
#
#   scripts/lab.sh build   build the node image, the fake NVML library and the fake sysfs views
#   scripts/lab.sh nodes   build, then create (or reuse) and prepare the four nodes
#   scripts/lab.sh up      nodes, then the main job: the Kubernetes API test server and the
#                          toolkit mirror (lab/cluster.yml), and kubegpu.nvidia.site over the lab,
#                          ending with its summary; run it again and nothing changes
#   scripts/lab.sh down    remove the nodes, stop both servers, remove lab/.state
#   scripts/lab.sh xid NODE XID[:GPU]...   give a running node's kernel log these Xid lines
#   scripts/lab.sh xid NODE clear          empty it again (lab_kernel_log_xids of the inventory
#                          is written back by the next nodes or up)
#
# Nodes: kubegpu-lab-h100 (h100x8), kubegpu-lab-a100 (a100x4-mig), kubegpu-lab-t4 (t4x1),
# kubegpu-lab-cpu (cpu); their profiles are in lab/inventory.yml. LAB_NODES=8 adds one more node of
# each profile (kubegpu-lab-h100-2, ...; lab/inventory-8.yml), for the fleet figures of bench/site.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

image=kubegpu-lab-node:latest
sysfs="$KUBEGPU_ROOT/.cache/lab/sysfs"
# The fake NVML's MIG state of a node whose MIG geometry the run changes, kept on this machine (the Kubernetes
# API test server's kubelet stand-in reads it there, as a device plugin reads NVML); lab/cluster.yml points
# the node's kubegpu.io/simulated-nvml annotation at it.
nvml_state="$KUBEGPU_ROOT/.cache/lab/nvml-state"
state="$KUBEGPU_ROOT/lab/.state"
# name profile, as in lab/inventory.yml (and lab/inventory-8.yml with the second four)
nodes=(
    "kubegpu-lab-h100 h100x8"
    "kubegpu-lab-a100 a100x4-mig"
    "kubegpu-lab-t4 t4x1"
    "kubegpu-lab-cpu cpu"
)
more_nodes=(
    "kubegpu-lab-h100-2 h100x8"
    "kubegpu-lab-a100-2 a100x4-mig"
    "kubegpu-lab-t4-2 t4x1"
    "kubegpu-lab-cpu-2 cpu"
)
inventory=lab/inventory.yml
case "${LAB_NODES:-4}" in
    4) ;;
    8) inventory=lab/inventory-8.yml; nodes+=("${more_nodes[@]}") ;;
    *) echo "LAB_NODES must be 4 or 8, not ${LAB_NODES}" >&2; exit 2 ;;
esac

usage() {
    sed -n '2,16s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

build() {
    # one build at a time: Molecule scenarios run side by side (scripts/test.sh) and each one's
    # dependency step builds; the sysfs views are written through one temporary folder per profile
    local lock
    mkdir -p "$KUBEGPU_ROOT/.cache/lab"
    exec {lock}>"$KUBEGPU_ROOT/.cache/lab/build.lock"
    flock "$lock"
    lab/image/build.sh >/dev/null
    scripts/build-fakenvml.sh >/dev/null
    python3 tests/support/fakenvml/sysfs.py "$sysfs"
    exec {lock}>&-
}

# The machine's DMI product name can only be faked where the host has the file
# to mount over (sysfs refuses to create it); see docs/lab.md.
dmi_mount() {
    local profile=$1
    if [ -f /sys/class/dmi/id/product_name ]; then
        echo "--volume=$sysfs/$profile/dmi/product_name:/sys/class/dmi/id/product_name:ro"
    fi
}

# Profiles whose MIG geometry the lab changes: their state folder, bind-mounted, and FAKENVML_STATE in the
# container's environment (docker exec passes it to every module run).
mig_mount() {
    local name=$1 profile=$2
    if [ "$profile" = a100x4-mig ]; then
        mkdir -p "$nvml_state/$name"
        echo "--volume=$nvml_state/$name:/var/lib/fakenvml --env=FAKENVML_STATE=/var/lib/fakenvml/state"
    fi
}

create_node() {
    local name=$1 profile=$2 state
    state=$(docker container inspect --format '{{.State.Status}}' "$name" 2>/dev/null || true)
    case "$state" in
        running) echo "$name: running, reused"; return ;;
        "") ;;
        *) echo "$name: $state, starting"; docker start "$name" >/dev/null; return ;;
    esac
    echo "$name: creating ($profile)"
    # shellcheck disable=SC2046 # dmi_mount and mig_mount print words or nothing
    docker run --detach --name "$name" --hostname "$name" --label kubegpu-lab=node \
        --label "kubegpu-lab.profile=$profile" \
        --cap-add SYS_ADMIN --security-opt seccomp=unconfined \
        --tmpfs /run --tmpfs /run/lock \
        --volume /sys/fs/cgroup:/sys/fs/cgroup:rw --cgroupns host \
        --volume "$sysfs/$profile/pci/devices:/sys/bus/pci/devices:ro" \
        $(dmi_mount "$profile") $(mig_mount "$name" "$profile") \
        "$image" /lib/systemd/systemd >/dev/null
}

wait_for_systemd() {
    local name=$1 tries=60 state
    while [ $tries -gt 0 ]; do
        state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
        case "$state" in
            running|degraded) return 0 ;;
        esac
        tries=$((tries - 1))
        sleep 1
    done
    echo "$name: systemd did not finish starting (state: ${state:-unknown})" >&2
    return 1
}

nodes() {
    build
    local entry
    for entry in "${nodes[@]}"; do
        # shellcheck disable=SC2086 # "name profile"
        create_node $entry
    done
    for entry in "${nodes[@]}"; do
        wait_for_systemd "${entry%% *}"
    done
    ansible-playbook -i "$inventory" lab/prepare.yml
}

up() {
    nodes
    ansible-playbook -i "$inventory" lab/cluster.yml
    ANSIBLE_CALLBACK_RESULT_FORMAT=yaml \
        ansible-playbook -i "$inventory" -e "@$state/site-vars.yml" kubegpu.nvidia.site
}

down() {
    local entry name
    if [ -s "$state/kubeapi.pid" ] && kill "$(cat "$state/kubeapi.pid")" 2>/dev/null; then
        echo "Kubernetes API test server: stopped"
    fi
    if [ -d "$state/toolkit_repo" ]; then
        python3 tests/support/toolkit_repo/serve.py stop --state "$state/toolkit_repo"
        echo "toolkit mirror: stopped"
    fi
    rm -rf "$state"
    # the nodes of either size
    for entry in "${nodes[@]}" "${more_nodes[@]}"; do
        name=${entry%% *}
        if docker container inspect "$name" >/dev/null 2>&1; then
            docker rm --force --volumes "$name" >/dev/null
            echo "$name: removed"
        fi
        rm -rf "${nvml_state:?}/$name"
    done
}

# Rewrite one node's kernel log (lab/prepare.yml, tag lab_kernel_log) with the Xids given,
# which the lab's health read (kubegpu.nvidia.health, site) then finds.
xid() {
    local name=$1
    shift
    [ $# -gt 0 ] || usage
    if [ $# -eq 1 ] && [ "$1" = clear ]; then
        set --
    fi
    ansible-playbook -i "$inventory" lab/prepare.yml --limit "$name" --tags lab_kernel_log \
        -e "$(python3 -c 'import json, sys; print(json.dumps({"lab_kernel_log_xids": sys.argv[1:]}))' "$@")"
}

if [ $# -ge 2 ] && [ "$1" = xid ]; then
    shift
    xid "$@"
    exit
fi
[ $# -eq 1 ] || usage
case "$1" in
    build) build ;;
    nodes) nodes ;;
    up) up ;;
    down) down ;;
    *) usage ;;
esac
