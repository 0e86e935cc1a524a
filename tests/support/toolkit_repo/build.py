"""Build a signed local apt repository of stand-in NVIDIA Container Toolkit packages.

The repository has the layout of NVIDIA's own (https://nvidia.github.io/libnvidia-container/):

    <out>/gpgkey                              armored public key (NVIDIA: /gpgkey)
    <out>/stable/deb/amd64/                   flat repository (NVIDIA: /stable/deb/$(ARCH) /)
        *.deb, Packages, Packages.gz, Release, Release.gpg, InRelease

so a node uses it exactly as an air-gapped mirror of NVIDIA's repository:

    deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] <url>/stable/deb/amd64 /

Packages (same names as NVIDIA's, one set per version):
  libnvidia-container1           /usr/lib/x86_64-linux-gnu/libnvidia-container.so.1 (placeholder)
  libnvidia-container-tools      /usr/bin/nvidia-container-cli
  nvidia-container-toolkit-base  /usr/bin/nvidia-ctk, /usr/bin/nvidia-container-runtime (execs runc) and its
                                 .cdi and .legacy names, /etc/nvidia-container-runtime/config.toml (a conffile,
                                 the defaults the toolkit writes on install); from 1.18 on also the
                                 nvidia-cdi-refresh.path and .service units in /lib/systemd/system (as 1.20 ships
                                 them) and /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env
  nvidia-container-toolkit       /usr/bin/nvidia-container-runtime-hook

Needs only dpkg-deb and gpg (the index is written here, no dpkg-scanpackages or
apt-ftparchive needed). The result is cached under .cache/toolkit_repo/<hash> by
the content of this builder and its payload; the output directory is printed.

The repository is signed with a throwaway key generated for it; ``<out>/gpgkey.fingerprint``
holds that key's fingerprint (what a node is told to trust). ``--key NAME`` builds the same
packages signed with another throwaway key (``--key rotated``: a mirror whose key was rotated).
"""

import argparse
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PAYLOAD = os.path.join(HERE, "payload")
DEFAULT_VERSIONS = ["1.17.8-1", "1.18.1-1", "1.20.0-1"]
# the first version whose packages ship the nvidia-cdi-refresh units
CDI_REFRESH_SINCE = (1, 18)
ARCH = "amd64"
MAINTAINER = "kubegpu test repository <repo@kubegpu.invalid>"


def packages(version):
    """Return (name, depends, description, {path: (source or bytes, mode)}, conffiles) for one version."""
    upstream = version.split("-")[0]
    major = int(upstream.split(".")[0])
    bound = "%d.0.0" % (major + 1)
    base = {
        "usr/bin/nvidia-ctk": ("nvidia-ctk", 0o755),
        "usr/bin/nvidia-container-runtime": ("nvidia-container-runtime", 0o755),
        "usr/bin/nvidia-container-runtime.cdi": ("nvidia-container-runtime", 0o755),
        "usr/bin/nvidia-container-runtime.legacy": ("nvidia-container-runtime", 0o755),
        "etc/nvidia-container-runtime/config.toml": ("config.toml", 0o644),
    }
    base_conffiles = ["/etc/nvidia-container-runtime/config.toml"]
    if tuple(int(part) for part in upstream.split(".")[:2]) >= CDI_REFRESH_SINCE:
        base.update({
            "lib/systemd/system/nvidia-cdi-refresh.path": ("nvidia-cdi-refresh.path", 0o644),
            "lib/systemd/system/nvidia-cdi-refresh.service": ("nvidia-cdi-refresh.service", 0o644),
            "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env": ("nvidia-cdi-refresh.env", 0o644),
        })
        base_conffiles.append("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env")
    return [
        (
            "libnvidia-container1",
            "libc6",
            "NVIDIA container runtime library (stand-in)",
            {"usr/lib/x86_64-linux-gnu/libnvidia-container.so.1": (b"placeholder: stand-in for libnvidia-container.so.1\n", 0o644)},
            [],
        ),
        (
            "libnvidia-container-tools",
            "libnvidia-container1 (>= %s), libnvidia-container1 (<< %s)" % (version, bound),
            "NVIDIA container runtime library, command-line tools (stand-in)",
            {"usr/bin/nvidia-container-cli": ("nvidia-container-cli", 0o755)},
            [],
        ),
        (
            "nvidia-container-toolkit-base",
            "",
            "NVIDIA Container Toolkit base: nvidia-ctk and nvidia-container-runtime (stand-in)",
            base,
            base_conffiles,
        ),
        (
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base (= %s), libnvidia-container-tools (>= %s), libnvidia-container-tools (<< %s)"
            % (version, version, bound),
            "NVIDIA Container Toolkit (stand-in)",
            {"usr/bin/nvidia-container-runtime-hook": ("nvidia-container-runtime-hook", 0o755)},
            [],
        ),
    ]


def content_hash(versions, key):
    digest = hashlib.sha256()
    digest.update(" ".join(versions).encode())
    digest.update(("key=%s" % key).encode())
    for path in [os.path.abspath(__file__)] + sorted(
        os.path.join(PAYLOAD, name) for name in os.listdir(PAYLOAD)
    ):
        digest.update(os.path.basename(path).encode())
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:12]


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        sys.exit("toolkit_repo: %s failed (%d): %s" % (cmd[0], result.returncode, (result.stderr or result.stdout).strip()))
    return result.stdout


def build_deb(work, dest_dir, name, version, depends, description, files, conffiles=None):
    root = os.path.join(work, "%s_%s" % (name, version))
    os.makedirs(os.path.join(root, "DEBIAN"))
    size = 0
    for rel, (source, mode) in files.items():
        target = os.path.join(root, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if isinstance(source, bytes):
            data = source
        else:
            with open(os.path.join(PAYLOAD, source), "rb") as handle:
                data = handle.read().replace(b"@VERSION@", version.encode())
        with open(target, "wb") as handle:
            handle.write(data)
        os.chmod(target, mode)
        size += len(data)
    control = [
        "Package: %s" % name,
        "Version: %s" % version,
        "Architecture: %s" % ARCH,
        "Maintainer: %s" % MAINTAINER,
        "Installed-Size: %d" % max(1, (size + 1023) // 1024),
    ]
    if depends:
        control.append("Depends: %s" % depends)
    control += ["Section: utils", "Priority: optional", "Homepage: https://github.com/NVIDIA/nvidia-container-toolkit",
                "Description: %s" % description,
                " Test package standing in for NVIDIA's package of the same name; it carries no NVIDIA software."]
    with open(os.path.join(root, "DEBIAN", "control"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(control) + "\n")
    if conffiles:
        with open(os.path.join(root, "DEBIAN", "conffiles"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(conffiles) + "\n")
    deb = os.path.join(dest_dir, "%s_%s_%s.deb" % (name, version, ARCH))
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb])
    return deb


def index_entry(deb):
    control = run(["dpkg-deb", "-f", deb]).rstrip("\n")
    with open(deb, "rb") as handle:
        data = handle.read()
    return "%s\nFilename: ./%s\nSize: %d\nMD5sum: %s\nSHA1: %s\nSHA256: %s\n" % (
        control, os.path.basename(deb), len(data),
        hashlib.md5(data).hexdigest(), hashlib.sha1(data).hexdigest(), hashlib.sha256(data).hexdigest())


def release(repo_dir, files, fields=None):
    """Write repo_dir/Release listing ``files`` (paths relative to repo_dir) with their hashes.

    ``fields``: header lines before the hashes, as (name, value) pairs; the default describes this
    flat toolkit repository.
    """
    if fields is None:
        fields = [("Origin", "kubegpu test repository"), ("Label", "nvidia-container-toolkit (stand-in)"),
                  ("Architectures", ARCH)]
    lines = ["%s: %s" % field for field in fields]
    lines.append("Date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()))
    for field, algo in (("MD5Sum", hashlib.md5), ("SHA1", hashlib.sha1), ("SHA256", hashlib.sha256)):
        lines.append("%s:" % field)
        for name in files:
            with open(os.path.join(repo_dir, name), "rb") as handle:
                data = handle.read()
            lines.append(" %s %d %s" % (algo(data).hexdigest(), len(data), name))
    with open(os.path.join(repo_dir, "Release"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def sign_release(work, release_dir, key_out, uid, detached=False):
    """Sign release_dir/Release (InRelease, and Release.gpg when ``detached``) with a throwaway key
    generated under ``work`` for this repository only; export its public key to ``key_out`` and its
    fingerprint to ``key_out``.fingerprint."""
    home = os.path.join(work, "gnupg")
    os.makedirs(home, mode=0o700)
    gpg = ["gpg", "--homedir", home, "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
    release_file = os.path.join(release_dir, "Release")
    run(gpg + ["--quick-gen-key", uid, "ed25519", "sign", "never"])
    run(gpg + ["--armor", "--output", key_out, "--export"])
    listing = run(gpg + ["--with-colons", "--list-keys"])
    fingerprint = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][0]
    with open(key_out + ".fingerprint", "w", encoding="utf-8") as handle:
        handle.write(fingerprint + "\n")
    run(gpg + ["--clearsign", "--digest-algo", "SHA256", "--output", os.path.join(release_dir, "InRelease"),
               release_file])
    if detached:
        run(gpg + ["--armor", "--detach-sign", "--digest-algo", "SHA256", "--output",
                   os.path.join(release_dir, "Release.gpg"), release_file])
    run(["gpgconf", "--homedir", home, "--kill", "all"])


def build(out, versions, key):
    work = tempfile.mkdtemp(prefix=".toolkit_repo.", dir=os.path.dirname(out))
    try:
        staging = os.path.join(work, "repo")
        repo_dir = os.path.join(staging, "stable", "deb", ARCH)
        os.makedirs(repo_dir)
        entries = []
        for version in versions:
            for name, depends, description, files, conffiles in packages(version):
                entries.append(index_entry(build_deb(work, repo_dir, name, version, depends, description, files,
                                                     conffiles)))
        text = "\n".join(entries)
        with open(os.path.join(repo_dir, "Packages"), "w", encoding="utf-8") as handle:
            handle.write(text)
        with gzip.GzipFile(os.path.join(repo_dir, "Packages.gz"), "wb", mtime=0) as handle:
            handle.write(text.encode())
        release(repo_dir, ["Packages", "Packages.gz"])

        sign_release(work, repo_dir, os.path.join(staging, "gpgkey"),
                     "kubegpu test repository (%s key) <repo@kubegpu.invalid>" % key, detached=True)
        os.rename(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--versions", default=",".join(DEFAULT_VERSIONS),
                        help="comma-separated package versions (default: %(default)s)")
    parser.add_argument("--key", default="primary",
                        help="name of the throwaway signing key; another name signs with another key (default: %(default)s)")
    parser.add_argument("--cache", default=os.path.join(ROOT, ".cache", "toolkit_repo"),
                        help="cache directory (default: %(default)s)")
    args = parser.parse_args()
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    for tool in ("dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            sys.exit("toolkit_repo: %s is required (apt-get install %s)" % (tool, "dpkg" if tool == "dpkg-deb" else "gnupg"))
    os.makedirs(args.cache, exist_ok=True)
    out = os.path.join(args.cache, content_hash(versions, args.key))
    if not os.path.exists(os.path.join(out, "gpgkey.fingerprint")):
        shutil.rmtree(out, ignore_errors=True)
        build(out, versions, args.key)
    print(out)


if __name__ == "__main__":
    main()
