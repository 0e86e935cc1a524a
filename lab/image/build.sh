#!/usr/bin/env bash
# Build the lab node image: Debian 12 with systemd as PID 1, debootstrapped
# into a folder and imported into the local Docker engine (no registry is used).
# The image is tagged by the hash of this script, so an unchanged script reuses
# the image already built.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo="${KUBEGPU_LAB_IMAGE_REPO:-kubegpu-lab-node}"
mirror="${KUBEGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
hash=$(sha256sum "$here/build.sh" | cut -c1-12)
tag="$repo:$hash"

if docker image inspect "$tag" >/dev/null 2>&1; then
    docker tag "$tag" "$repo:latest"
    echo "$tag"
    exit 0
fi

packages=(
    systemd systemd-sysv dbus sudo procps iproute2 kmod pciutils
    ca-certificates gnupg apt-utils
    python3 python3-apt python3-pynvml python3-tomlkit python3-yaml
    containerd runc docker.io
)

work=$(mktemp -d /var/tmp/kubegpu-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building $tag in $work" >&2
debootstrap --variant=minbase --components=main,contrib,non-free,non-free-firmware \
    --include="$(IFS=,; echo "${packages[*]}")" bookworm "$work/rootfs" "$mirror" >&2

root="$work/rootfs"
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main contrib non-free non-free-firmware
deb $mirror bookworm-updates main contrib non-free non-free-firmware
SOURCES
# A container has no consoles, kernel audit or udev to settle: mask the units
# that would wait for them, and keep the runtimes from starting until a role asks.
for unit in getty@tty1.service console-getty.service systemd-udevd.service \
    systemd-udev-trigger.service systemd-remount-fs.service systemd-firstboot.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
rm -f "$root/etc/systemd/system/multi-user.target.wants/docker.service" \
      "$root/etc/systemd/system/sockets.target.wants/docker.socket"
mkdir -p "$root/etc/docker"
printf '{\n  "storage-driver": "vfs"\n}\n' >"$root/etc/docker/daemon.json"
echo 'kubegpu-lab-node' >"$root/etc/hostname"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*

tar -C "$root" -c . | docker import \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=docker' - "$tag" >&2
docker tag "$tag" "$repo:latest"
echo "$tag"
