"""The build context of the execution environment for the lab: meta/execution-environment.yml on a local Debian base.

    python3 scripts/ee_local.py OUT COLLECTION_TARBALL COLLECTIONS_DIR BASE_IMAGE TAG [CA_BUNDLE]

writes OUT/execution-environment.yml, OUT/requirements.txt, OUT/bindep.txt, OUT/requirements.yml and
OUT/collections/*.tar.gz, for ``ansible-builder build -f OUT/execution-environment.yml`` (scripts/ee.sh).

The definition is the production one (meta/execution-environment.yml) with what a machine that reaches neither a
container registry nor Galaxy needs changed: the base image is BASE_IMAGE (the lab's Debian 12 image), Python is
Debian's python3 with apt-get as the package manager, and the Galaxy requirements are the same collections as
tarballs in the context: this collection's built tarball, and every other one (the production definition's, the
lab's connection community.docker, and what their MANIFEST.json depends on) packed from its installed copy in
COLLECTIONS_DIR (an ``ansible_collections`` folder, e.g. the one the ``ansible`` package installs). The Python
and system requirements are copied, never repeated: requirements.txt and bindep.txt stay the single source.
CA_BUNDLE (the certificates this machine's pip trusts, $PIP_CERT) goes into the image and pip uses it, for a
network whose proxy re-signs PyPI's TLS certificate.
"""

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFINITION = os.path.join(ROOT, "meta", "execution-environment.yml")
# the lab's nodes are reached through the Docker connection (lab/inventory.yml)
LAB_COLLECTIONS = ("community.docker",)
# Debian disables ensurepip for its system python3 (so the definition skips ansible-builder's pip_install step) and
# ships pip as python3-pip, venv as python3-venv (the assemble step makes a venv); the lab image is built without
# package lists (lab/image/build.sh)
CA_PATH = "/etc/ssl/kubegpu-build-ca.pem"
DEBIAN_PIP = "RUN apt-get update && apt-get install -y --no-install-recommends python3-pip python3-venv"


class LocalError(Exception):
    pass


def manifest(collections_dir, name):
    """The collection_info of an installed collection's MANIFEST.json."""
    namespace, short = name.split(".")
    path = os.path.join(collections_dir, namespace, short, "MANIFEST.json")
    if not os.path.isfile(path):
        raise LocalError("collection %s is not installed in %s" % (name, collections_dir))
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["collection_info"]


def needed(collections_dir, names):
    """The names and every collection they depend on (MANIFEST.json), sorted."""
    found = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        todo.extend(manifest(collections_dir, name).get("dependencies") or {})
    return sorted(found)


def pack(collections_dir, name, out):
    """A collection artifact from an installed copy: the files of its FILES.json that are there (the ``ansible``
    package leaves some out), with FILES.json and MANIFEST.json's checksum of it written again to match."""
    namespace, short = name.split(".")
    src = os.path.join(collections_dir, namespace, short)
    with open(os.path.join(src, "MANIFEST.json"), encoding="utf-8") as handle:
        meta = json.load(handle)
    with open(os.path.join(src, "FILES.json"), encoding="utf-8") as handle:
        files = json.load(handle)
    files["files"] = [entry for entry in files["files"]
                      if entry["name"] == "." or os.path.lexists(os.path.join(src, entry["name"]))]
    files_json = json.dumps(files, indent=4).encode()
    meta["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
    path = os.path.join(out, "%s-%s-%s.tar.gz" % (namespace, short, meta["collection_info"]["version"]))
    with tarfile.open(path, "w:gz") as tar:
        for member, data in (("MANIFEST.json", json.dumps(meta, indent=4).encode()), ("FILES.json", files_json)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for entry in files["files"]:
            if entry["name"] != ".":
                tar.add(os.path.join(src, entry["name"]), arcname=entry["name"], recursive=False)
    return os.path.basename(path)


def local_definition(spec, base_image, tag, ca_bundle=False):
    """The production definition (parsed) turned into the local one; the Galaxy requirements become requirements.yml.
    With ca_bundle, the context's ca/ca-certificates.crt is pip's CA bundle in every stage."""
    files = [{"src": "collections", "dest": "collections"}]
    steps = [DEBIAN_PIP]
    if ca_bundle:
        files.append({"src": "ca", "dest": "ca"})
        steps = ["COPY _build/ca/ca-certificates.crt %s" % CA_PATH, "ENV PIP_CERT=%s" % CA_PATH] + steps
    deps = dict(spec["dependencies"])
    deps["python_interpreter"] = {"package_system": "python3", "python_path": "/usr/bin/python3"}
    deps["galaxy"] = "requirements.yml"
    return {
        "version": 3,
        "images": {"base_image": {"name": base_image}},
        "dependencies": deps,
        "additional_build_files": files,
        "additional_build_steps": {"prepend_base": steps},
        "build_arg_defaults": {
            # apt-get has no "clean all"; the package lists stay for install-from-bindep in the final stage
            "PKGMGR_PRESERVE_CACHE": "always",
            # every collection is a tarball in the context: never ask Galaxy
            "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS": "--offline",
        },
        "options": {"package_manager_path": "/usr/bin/apt-get", "skip_pip_install": True, "tags": [tag]},
    }


def write(out, tarball, collections_dir, base_image, tag, ca_bundle=""):
    with open(DEFINITION, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        galaxy = yaml.safe_load(handle)
    own = "%s.%s" % (galaxy["namespace"], galaxy["name"])
    if not os.path.isfile(tarball):
        raise LocalError("no collection tarball %s (ansible-galaxy collection build)" % tarball)
    names = [entry["name"] for entry in spec["dependencies"]["galaxy"]["collections"]]
    if own not in names:
        raise LocalError("%s does not install %s" % (DEFINITION, own))
    others = needed(collections_dir, [name for name in names if name != own] + list(LAB_COLLECTIONS))
    if ca_bundle and not os.path.isfile(ca_bundle):
        raise LocalError("no CA bundle %s" % ca_bundle)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "collections"))
    if ca_bundle:
        os.makedirs(os.path.join(out, "ca"))
        shutil.copy(ca_bundle, os.path.join(out, "ca", "ca-certificates.crt"))
    for name in ("requirements.txt", "bindep.txt"):
        shutil.copy(os.path.join(ROOT, name), out)
    shutil.copy(tarball, os.path.join(out, "collections"))
    artifacts = [os.path.basename(tarball)] + [pack(collections_dir, name, os.path.join(out, "collections"))
                                               for name in others]
    requirements = {"collections": [{"name": "/build/collections/%s" % artifact, "type": "file"}
                                    for artifact in artifacts]}
    with open(os.path.join(out, "requirements.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(requirements, handle, sort_keys=False)
    with open(os.path.join(out, "execution-environment.yml"), "w", encoding="utf-8") as handle:
        handle.write("# generated by scripts/ee_local.py from meta/execution-environment.yml\n")
        yaml.safe_dump(local_definition(spec, base_image, tag, bool(ca_bundle)), handle, sort_keys=False)
    return artifacts


def main(argv):
    if len(argv) not in (6, 7):
        raise SystemExit("usage: ee_local.py OUT COLLECTION_TARBALL COLLECTIONS_DIR BASE_IMAGE TAG [CA_BUNDLE]")
    try:
        artifacts = write(*argv[1:])
    except LocalError as exc:
        print("execution environment: %s" % exc, file=sys.stderr)
        return 1
    print("execution environment context: %s (%s)" % (argv[1], ", ".join(artifacts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
