"""Build a signed local Debian mirror of stand-in NVIDIA driver packages for the `driver` scenario.

The real bookworm driver stack is 136 packages and about 256 MiB to download, and its
nvidia-kernel-dkms cannot build a module in a container (no headers for the host's
kernel), so the scenario installs packages that carry Debian's names instead:

    nvidia-driver, nvidia-kernel-dkms, nvidia-open-kernel-dkms   (two versions: 535.183.01 and 535.216.01)
    nvidia-persistenced    /usr/bin/nvidia-persistenced (sleeps) and its systemd unit
    firmware-misc-nonfree  a placeholder under /lib/firmware/nvidia/
    linux-headers-amd64    a placeholder under /usr/src/
    initramfs-tools        /usr/sbin/update-initramfs, which appends its arguments to
                           /var/log/kubegpu-standin/update-initramfs.log

laid out as a Debian mirror (dists/bookworm/{main,non-free,non-free-firmware}, pool/),
signed by a throwaway key (<out>/debian/archive-key.asc), so the role reaches it through
the variables a user sets for an air-gapped mirror. The packages are built with the
toolkit repository's builder (tests/support/toolkit_repo/build.py). The result is cached
under .cache/driver_standin_repo/<hash>; the output directory is printed.
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
DRIVER_VERSIONS = ["535.183.01-1~standin1", "535.216.01-1~standin1"]
COMPONENTS = ["main", "non-free", "non-free-firmware"]

PERSISTENCED_UNIT = b"""[Unit]
Description=NVIDIA Persistence Daemon (stand-in)
Wants=syslog.target

[Service]
Type=simple
ExecStart=/usr/bin/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

UPDATE_INITRAMFS = b"""#!/bin/sh
# Stand-in for initramfs-tools' update-initramfs: records each call.
mkdir -p /var/log/kubegpu-standin
echo "$*" >> /var/log/kubegpu-standin/update-initramfs.log
"""


def packages():
    """Return (component, name, version, depends, description, files) for every package."""
    result = []
    for version in DRIVER_VERSIONS:
        upstream = version.split("-", maxsplit=1)[0]
        marker = ("stand-in for NVIDIA driver %s\n" % upstream).encode()
        result += [
            ("non-free", "nvidia-driver", version,
             "nvidia-kernel-dkms (= {0}) | nvidia-open-kernel-dkms (= {0})".format(version),
             "NVIDIA metapackage (stand-in)",
             {"usr/share/doc/nvidia-driver/STANDIN": (marker, 0o644)}),
            ("non-free", "nvidia-kernel-dkms", version, "",
             "NVIDIA binary kernel module DKMS source (stand-in)",
             {"usr/src/nvidia-current-%s/dkms.conf" % upstream:
              (('PACKAGE_NAME="nvidia-current"\nPACKAGE_VERSION="%s"\n' % upstream).encode(), 0o644)}),
            ("non-free", "nvidia-open-kernel-dkms", version, "",
             "NVIDIA open kernel module DKMS source (stand-in)",
             {"usr/src/nvidia-current-open-%s/dkms.conf" % upstream:
              (('PACKAGE_NAME="nvidia-current-open"\nPACKAGE_VERSION="%s"\n' % upstream).encode(), 0o644)}),
            ("non-free", "nvidia-persistenced", version, "",
             "daemon to maintain persistent software state in the NVIDIA driver (stand-in)",
             {"usr/bin/nvidia-persistenced": (b"#!/bin/sh\nexec sleep infinity\n", 0o755),
              "lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT, 0o644)}),
        ]
    result += [
        ("non-free-firmware", "firmware-misc-nonfree", "20230210-5~standin1", "",
         "binary firmware for various drivers in the Linux kernel (stand-in)",
         {"lib/firmware/nvidia/STANDIN": (b"stand-in firmware\n", 0o644)}),
        ("main", "linux-headers-amd64", "6.1.0-99~standin1", "",
         "header files for Linux amd64 configuration (stand-in)",
         {"usr/src/linux-headers-standin/STANDIN": (b"stand-in headers\n", 0o644)}),
        ("main", "initramfs-tools", "0.142-99~standin1", "",
         "generic modular initramfs generator (stand-in)",
         {"usr/sbin/update-initramfs": (UPDATE_INITRAMFS, 0o755)}),
    ]
    return result


def content_hash():
    digest = hashlib.sha256()
    for path in (os.path.abspath(__file__), os.path.join(ROOT, "tests", "support", "toolkit_repo", "build.py")):
        with open(path, "rb") as handle:
            digest.update(handle.read())
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
