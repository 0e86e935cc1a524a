"""Build a signed local Debian mirror of stand-in NVIDIA driver packages for the `driver` scenario.

The real bookworm driver stack is 136 packages and about 256 MiB to download, and its
nvidia-kernel-dkms cannot build a module in a container (no headers for the host's
kernel), so the scenario installs packages that carry Debian's names instead:

    nvidia-driver, nvidia-kernel-dkms, nvidia-open-kernel-dkms, libcuda1, libnvidia-ml1
                           at 535.183.01, 535.216.01 and 570.195.03; nvidia-driver depends on the
                           libraries and on one of the module packages at its own version
    nvidia-persistenced    at 535.171.04, a version of its own as in Debian (a source package of its own)
    nvidia-fabricmanager-535  at 535.183.01 only (the mirror's driver goes up to 535.216.01: a
                           branch install must pick the version both have)
    nvidia-fabricmanager-570  at 570.195.03
    dkms                   /usr/sbin/dkms, a stand-in that "builds" a module (a text file
                           /lib/modules/<kernel>/updates/dkms/<module>.ko) for kernels whose headers
                           are installed, signs it when /etc/dkms/framework.conf.d names a MOK key
                           (it records the certificate's SHA-256 in the file), answers `dkms status`,
                           and fails for kernels whose headers carry KUBEGPU-STANDIN-UNBUILDABLE;
                           with the kernel hooks that run it when headers or a kernel are installed
    linux-headers-<running kernel>, linux-headers-6.99.0-1-amd64 (unbuildable), linux-headers-amd64
    linux-image-6.99.0-1-amd64  a "kernel update": /boot/vmlinuz-6.99.0-1-amd64, /boot/vmlinuz points at it
    firmware-misc-nonfree  a placeholder under /lib/firmware/nvidia/
    initramfs-tools        /usr/sbin/update-initramfs, which appends its arguments to
                           /var/log/kubegpu-standin/update-initramfs.log

laid out as a Debian mirror (dists/bookworm/{main,non-free,non-free-firmware}, pool/),
signed by a throwaway key (<out>/debian/archive-key.asc), so the role reaches it through
the variables a user sets for an air-gapped mirror. The packages are built with the
toolkit repository's builder (tests/support/toolkit_repo/build.py). The result is cached
under .cache/driver_standin_repo/<hash> (the hash covers this file, the builder and the running
kernel, whose headers the mirror carries); the output directory is printed.
"""

import argparse
import gzip
import hashlib
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from toolkit_repo.build import build_deb, index_entry, release, sign_release  # noqa: E402  pylint: disable=wrong-import-position

SUITE = "bookworm"
ARCH = "amd64"
DRIVER_VERSIONS = ["535.183.01-1~standin1", "535.216.01-1~standin1", "570.195.03-1~standin1"]
# Debian's nvidia-persistenced is a source package of its own, with its own versions
PERSISTENCED_VERSION = "535.171.04-1~standin1"
FABRIC_MANAGER_VERSIONS = {"535": ["535.183.01-1~standin1"], "570": ["570.195.03-1~standin1"]}
COMPONENTS = ["main", "non-free", "non-free-firmware"]
# the kernel update the scenario installs; its headers make the stand-in DKMS fail
NEXT_KERNEL = "6.99.0-1-amd64"


def running_kernel():
    return os.uname().release


SERVICE_UNIT = """[Unit]
Description=%s (stand-in)

[Service]
Type=simple
ExecStart=%s

[Install]
WantedBy=multi-user.target
"""

UPDATE_INITRAMFS = b"""#!/bin/sh
# Stand-in for initramfs-tools' update-initramfs: records each call.
mkdir -p /var/log/kubegpu-standin
echo "$*" >> /var/log/kubegpu-standin/update-initramfs.log
"""

# A small DKMS: state under /var/lib/dkms/<module>/<version>/<kernel>, modules as text files.
DKMS = r"""#!/bin/sh
# Stand-in for DKMS (kubegpu test mirror): builds nothing, writes what a build would leave.
mkdir -p /var/log/kubegpu-standin /var/lib/dkms
echo "dkms $*" >> /var/log/kubegpu-standin/dkms.log
command=${1:-}
[ $# -gt 0 ] && shift
kernel=""
target=""
while [ $# -gt 0 ]; do
    case "$1" in
        -k|--kernelver) kernel=$2; shift 2 ;;
        --all) shift ;;
        -*) shift ;;
        *) target=$1; shift ;;
    esac
done

kernels() {
    if [ -n "$kernel" ]; then echo "$kernel"; return; fi
    for build in /lib/modules/*/build; do
        [ -e "$build" ] && basename "$(dirname "$build")"
    done
}

modules() {
    if [ -n "$target" ]; then echo "$target"; return; fi
    for dir in /var/lib/dkms/*/*/source; do
        [ -e "$dir" ] || continue
        version=$(basename "$(dirname "$dir")")
        name=$(basename "$(dirname "$(dirname "$dir")")")
        echo "$name/$version"
    done
}

signing() {
    key=""; cert=""
    for conf in /etc/dkms/framework.conf /etc/dkms/framework.conf.d/*.conf; do
        [ -f "$conf" ] || continue
        k=$(sed -n 's/^mok_signing_key=//p' "$conf"); [ -n "$k" ] && key=$k
        c=$(sed -n 's/^mok_certificate=//p' "$conf"); [ -n "$c" ] && cert=$c
    done
    if [ -n "$key" ] && [ -f "$key" ] && [ -f "$cert" ]; then
        echo "signed-by-certificate-sha256: $(sha256sum "$cert" | cut -d' ' -f1)"
    fi
}

install_one() {  # name/version kernel
    name=${1%%/*}; version=${1#*/}; k=$2
    if [ ! -e "/lib/modules/$k/build" ]; then
        echo "Error! Your kernel headers for kernel $k cannot be found." >&2
        return 1
    fi
    if [ -e "/lib/modules/$k/build/KUBEGPU-STANDIN-UNBUILDABLE" ]; then
        echo "Error! Bad return status for module build on kernel: $k (x86_64)" >&2
        return 10
    fi
    mkdir -p "/lib/modules/$k/updates/dkms" "/var/lib/dkms/$name/$version/$k/x86_64"
    {
        echo "stand-in module $name $version for $k"
        signing
    } > "/lib/modules/$k/updates/dkms/$name.ko"
    echo "$name/$version, $k, x86_64: installed"
}

case "$command" in
    add)
        name=${target%%/*}; version=${target#*/}
        mkdir -p "/var/lib/dkms/$name/$version"
        ln -sfn "/usr/src/$name-$version" "/var/lib/dkms/$name/$version/source"
        ;;
    remove)
        name=${target%%/*}; version=${target#*/}
        for dir in /var/lib/dkms/"$name"/"$version"/*/; do
            k=$(basename "$dir")
            [ "$k" = "source" ] && continue
            rm -f "/lib/modules/$k/updates/dkms/$name.ko"
        done
        rm -rf "/var/lib/dkms/$name/$version"
        ;;
    build|install|autoinstall)
        status=0
        for m in $(modules); do
            for k in $(kernels); do
                install_one "$m" "$k" || status=$?
            done
        done
        exit $status
        ;;
    status)
        for m in $(modules); do
            name=${m%%/*}; version=${m#*/}
            found=0
            for dir in /var/lib/dkms/"$name"/"$version"/*/; do
                k=$(basename "$dir")
                [ "$k" = "source" ] && continue
                [ -n "$kernel" ] && [ "$k" != "$kernel" ] && continue
                echo "$name/$version, $k, x86_64: installed"
                found=1
            done
            [ $found -eq 0 ] && [ -z "$kernel" ] && echo "$name/$version: added"
        done
        ;;
    *)
        echo "dkms (stand-in): $command is not supported" >&2
        exit 2
        ;;
esac
exit 0
"""

# Run by the headers' and the kernel's postinst, as Debian's dkms package installs them; a failed
# build is reported, not fatal (the driver role checks the result).
KERNEL_HOOK = b"""#!/bin/sh
dkms autoinstall -k "$1" || echo "dkms: building the modules for kernel $1 failed" >&2
exit 0
"""


def module_postinst(name, upstream):
    return ("#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
            "    dkms add %s/%s\n"
            "    dkms autoinstall || echo 'dkms: building %s failed for a kernel' >&2\n"
            "fi\n" % (name, upstream, name)).encode()


def module_prerm(name, upstream):
    return ("#!/bin/sh\nset -e\ndkms remove %s/%s --all || true\n" % (name, upstream)).encode()


def headers_postinst(kernel):
    return ("#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
            "    mkdir -p /lib/modules/{k}\n"
            "    ln -sfn /usr/src/linux-headers-{k} /lib/modules/{k}/build\n"
            "    run-parts --arg={k} /etc/kernel/header_postinst.d || true\n"
            "fi\n").format(k=kernel).encode()


def image_postinst(kernel):
    return ("#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
            "    ln -sfn vmlinuz-{k} /boot/vmlinuz\n"
            "    run-parts --arg={k} /etc/kernel/postinst.d || true\n"
            "fi\n").format(k=kernel).encode()


def driver_packages(version):
    upstream = version.split("-", maxsplit=1)[0]
    marker = ("stand-in for NVIDIA driver %s\n" % upstream).encode()
    result = [
        ("non-free", "nvidia-driver", version,
         "nvidia-kernel-dkms (= {0}) | nvidia-open-kernel-dkms (= {0}), libcuda1 (= {0}), libnvidia-ml1 (= {0})"
         .format(version),
         "NVIDIA metapackage (stand-in)",
         {"usr/share/doc/nvidia-driver/STANDIN": (marker, 0o644)}),
        ("non-free", "libcuda1", version, "", "NVIDIA CUDA Driver Library (stand-in)",
         {"usr/share/doc/libcuda1/STANDIN": (marker, 0o644)}),
        ("non-free", "libnvidia-ml1", version, "", "NVIDIA Management Library (NVML) runtime library (stand-in)",
         {"usr/share/doc/libnvidia-ml1/STANDIN": (marker, 0o644)}),
    ]
    for package, module in (("nvidia-kernel-dkms", "nvidia-current"), ("nvidia-open-kernel-dkms", "nvidia-current-open")):
        result.append((
            "non-free", package, version, "dkms",
            "NVIDIA %s kernel module DKMS source (stand-in)" % ("open" if "open" in package else "binary"),
            {"usr/src/%s-%s/dkms.conf" % (module, upstream):
             (('PACKAGE_NAME="%s"\nPACKAGE_VERSION="%s"\n' % (module, upstream)).encode(), 0o644),
             "DEBIAN/postinst": (module_postinst(module, upstream), 0o755),
             "DEBIAN/prerm": (module_prerm(module, upstream), 0o755)}))
    return result


def packages():
    """Return (component, name, version, depends, description, files) for every package."""
    result = []
    for version in DRIVER_VERSIONS:
        result += driver_packages(version)
    persistenced_unit = (SERVICE_UNIT % ("NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced")).encode()
    result.append(("non-free", "nvidia-persistenced", PERSISTENCED_VERSION, "",
                   "daemon to maintain persistent software state in the NVIDIA driver (stand-in)",
                   {"usr/bin/nvidia-persistenced": (b"#!/bin/sh\nexec sleep infinity\n", 0o755),
                    "lib/systemd/system/nvidia-persistenced.service": (persistenced_unit, 0o644)}))
    fm_unit = (SERVICE_UNIT % ("NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager")).encode()
    for branch, versions in FABRIC_MANAGER_VERSIONS.items():
        for version in versions:
            result.append(("non-free", "nvidia-fabricmanager-%s" % branch, version, "",
                           "Fabric Manager for NVSwitch based systems (stand-in)",
                           {"usr/bin/nv-fabricmanager": (b"#!/bin/sh\nexec sleep infinity\n", 0o755),
                            "lib/systemd/system/nvidia-fabricmanager.service": (fm_unit, 0o644)}))
    running = running_kernel()
    result += [
        ("main", "dkms", "3.0.10-8~standin1", "", "Dynamic Kernel Module System (stand-in)",
         {"usr/sbin/dkms": (DKMS.encode(), 0o755),
          "etc/kernel/header_postinst.d/dkms": (KERNEL_HOOK, 0o755),
          "etc/kernel/postinst.d/dkms": (KERNEL_HOOK, 0o755)}),
        ("non-free-firmware", "firmware-misc-nonfree", "20230210-5~standin1", "",
         "binary firmware for various drivers in the Linux kernel (stand-in)",
         {"lib/firmware/nvidia/STANDIN": (b"stand-in firmware\n", 0o644)}),
        ("main", "linux-headers-amd64", "6.1.0-99~standin1", "",
         "header files for Linux amd64 configuration (stand-in)",
         {"usr/share/doc/linux-headers-amd64/STANDIN": (b"stand-in headers meta package\n", 0o644)}),
        ("main", "initramfs-tools", "0.142-99~standin1", "",
         "generic modular initramfs generator (stand-in)",
         {"usr/sbin/update-initramfs": (UPDATE_INITRAMFS, 0o755)}),
        ("main", "linux-image-%s" % NEXT_KERNEL, "6.99.0-1~standin1", "",
         "Linux %s for 64-bit PCs, a kernel update (stand-in)" % NEXT_KERNEL,
         {"boot/vmlinuz-%s" % NEXT_KERNEL: (b"stand-in kernel\n", 0o644),
          "lib/modules/%s/modules.order" % NEXT_KERNEL: (b"", 0o644),
          "DEBIAN/postinst": (image_postinst(NEXT_KERNEL), 0o755)}),
    ]
    for kernel, buildable in ((running, True), (NEXT_KERNEL, False)):
        files = {"usr/src/linux-headers-%s/STANDIN" % kernel: (b"stand-in headers\n", 0o644),
                 "DEBIAN/postinst": (headers_postinst(kernel), 0o755)}
        if not buildable:
            files["usr/src/linux-headers-%s/KUBEGPU-STANDIN-UNBUILDABLE" % kernel] = (
                b"the stand-in DKMS fails to build modules for this kernel\n", 0o644)
        result.append(("main", "linux-headers-%s" % kernel, "1.0-1~standin1", "",
                       "Header files for Linux %s (stand-in)" % kernel, files))
    return result


def content_hash():
    digest = hashlib.sha256()
    for path in (os.path.abspath(__file__), os.path.join(ROOT, "tests", "support", "toolkit_repo", "build.py")):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    digest.update(running_kernel().encode())
    return digest.hexdigest()[:12]


def write_release(suite_dir, files):
    release(suite_dir, files, fields=[
        ("Origin", "kubegpu test mirror"), ("Label", "Debian (stand-in NVIDIA driver packages)"),
        ("Suite", SUITE), ("Codename", SUITE), ("Architectures", ARCH), ("Components", " ".join(COMPONENTS)),
    ])


def build(out):
    work = tempfile.mkdtemp(prefix=".driver_standin.", dir=os.path.dirname(out))
    try:
        mirror = os.path.join(work, "repo", "debian")
        suite_dir = os.path.join(mirror, "dists", SUITE)
        entries = {component: [] for component in COMPONENTS}
        for component, name, version, depends, description, files in packages():
            pool = os.path.join(mirror, "pool", component, name[0], name)
            os.makedirs(pool, exist_ok=True)
            deb = build_deb(work, pool, name, version, depends, description, files)
            entry = index_entry(deb).replace(
                "Filename: ./%s" % os.path.basename(deb),
                "Filename: %s" % os.path.relpath(deb, mirror))
            entries[component].append(entry)
        index_files = []
        for component, items in entries.items():
            rel = os.path.join(component, "binary-%s" % ARCH)
            os.makedirs(os.path.join(suite_dir, rel))
            text = "\n".join(items)
            with open(os.path.join(suite_dir, rel, "Packages"), "w", encoding="utf-8") as handle:
                handle.write(text)
            with gzip.GzipFile(os.path.join(suite_dir, rel, "Packages.gz"), "wb", mtime=0) as handle:
                handle.write(text.encode())
            index_files += [os.path.join(rel, "Packages"), os.path.join(rel, "Packages.gz")]
        write_release(suite_dir, index_files)

        sign_release(work, suite_dir, os.path.join(mirror, "archive-key.asc"),
                     "kubegpu test mirror <mirror@kubegpu.invalid>")
        os.rename(os.path.join(work, "repo"), out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", default=os.path.join(ROOT, ".cache", "driver_standin_repo"),
                        help="cache directory (default: %(default)s)")
    args = parser.parse_args()
    for tool in ("dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            sys.exit("driver standin repo: %s is required" % tool)
    os.makedirs(args.cache, exist_ok=True)
    out = os.path.join(args.cache, content_hash())
    if not os.path.exists(os.path.join(out, "debian", "dists", SUITE, "InRelease")):
        shutil.rmtree(out, ignore_errors=True)
        build(out)
    print(out)


if __name__ == "__main__":
    main()
