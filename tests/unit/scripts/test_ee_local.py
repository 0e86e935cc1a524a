"""scripts/ee_local.py: the lab's execution environment definition, made from meta/execution-environment.yml.

The definition must pass ansible-builder's own schema check (ansible/ansible-builder
``src/ansible_builder/ee_schema.py``, ``validate_schema``) and keep the production dependencies as they are; a
collection packed from an installed copy must install with ``ansible-galaxy collection install --offline``, which
checks FILES.json against MANIFEST.json and every file against FILES.json (ansible/ansible
``lib/ansible/galaxy/collection/__init__.py``, ``install_artifact`` and ``_extract_tar_file``).
"""
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tarfile

import sys

import pytest
import yaml

_TRACEBACK_LIMIT = getattr(sys, "tracebacklimit", None)
from ansible_builder.ee_schema import validate_schema  # noqa: E402  pylint: disable=wrong-import-position

# ansible_builder.exceptions sets sys.tracebacklimit = 0 when it is imported: put it back, or every traceback
# formatted later in this pytest process (the modules' "bug" reports under test) loses its frames
if _TRACEBACK_LIMIT is None:
    del sys.tracebacklimit
else:
    sys.tracebacklimit = _TRACEBACK_LIMIT

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location("ee_local", os.path.join(ROOT, "scripts", "ee_local.py"))
ee_local = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ee_local)


def production():
    with open(os.path.join(ROOT, "meta", "execution-environment.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def installed(tmp_path, name, version, files, dependencies=None, listed_only=()):
    """An installed collection as the ``ansible`` package leaves it: FILES.json may list files that are not there."""
    namespace, short = name.split(".")
    src = tmp_path / "ansible_collections" / namespace / short
    src.mkdir(parents=True)
    entries = [{"name": ".", "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1}]
    for path, text in files.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    paths = sorted(set(files) | set(listed_only))
    for folder in sorted({os.path.dirname(path) for path in paths} - {""}):
        for depth in range(folder.count("/") + 1):
            parent = "/".join(folder.split("/")[:depth + 1])
            if all(entry["name"] != parent for entry in entries):
                entries.append({"name": parent, "ftype": "dir", "chksum_type": None, "chksum_sha256": None,
                                "format": 1})
    for path in paths:
        digest = hashlib.sha256((files.get(path) or "gone").encode()).hexdigest()
        entries.append({"name": path, "ftype": "file", "chksum_type": "sha256", "chksum_sha256": digest, "format": 1})
    files_json = json.dumps({"files": entries, "format": 1})
    (src / "FILES.json").write_text(files_json)
    (src / "MANIFEST.json").write_text(json.dumps({
        "collection_info": {"namespace": namespace, "name": short, "version": version,
                            "dependencies": dependencies or {}},
        "file_manifest_file": {"name": "FILES.json", "ftype": "file", "chksum_type": "sha256",
                               "chksum_sha256": hashlib.sha256(files_json.encode()).hexdigest(), "format": 1},
        "format": 1}))
    return tmp_path / "ansible_collections"


def test_the_local_definition_passes_the_schema_and_keeps_the_production_dependencies():
    spec = production()
    local = ee_local.local_definition(spec, "kubegpu-lab-node:latest", "kubegpu-nvidia-ee:lab")
    validate_schema(json.loads(json.dumps(local)))
    assert local["images"]["base_image"]["name"] == "kubegpu-lab-node:latest"
    for key in ("ansible_core", "ansible_runner", "python", "system"):
        assert local["dependencies"][key] == spec["dependencies"][key]
    assert local["dependencies"]["python_interpreter"]["python_path"] == "/usr/bin/python3"
    assert local["dependencies"]["galaxy"] == "requirements.yml"
    assert local["options"]["package_manager_path"] == "/usr/bin/apt-get"
    assert local["build_arg_defaults"]["ANSIBLE_GALAXY_CLI_COLLECTION_OPTS"] == "--offline"


def test_dependencies_are_followed_through_the_manifests(tmp_path):
    collections = installed(tmp_path, "community.docker", "4.8.5", {"README.md": "d"},
                            {"community.library_inventory_filtering_v1": ">=1.0.0"})
    installed(tmp_path, "community.library_inventory_filtering_v1", "1.1.5", {"README.md": "f"})
    installed(tmp_path, "kubernetes.core", "6.2.0", {"README.md": "k"})
    assert ee_local.needed(str(collections), ["kubernetes.core", "community.docker"]) == [
        "community.docker", "community.library_inventory_filtering_v1", "kubernetes.core"]


def test_a_collection_that_is_not_installed_is_one_line(tmp_path):
    with pytest.raises(ee_local.LocalError, match=r"^collection kubernetes\.core is not installed in "):
        ee_local.needed(str(tmp_path), ["kubernetes.core"])


def test_a_packed_installed_copy_installs_offline_without_the_files_it_lacks(tmp_path):
    collections = installed(tmp_path / "src", "kubernetes.core", "6.2.0",
                            {"README.md": "k", "plugins/modules/k8s.py": "# module\n"},
                            listed_only=["tests/unit/test_gone.py"])
    out = tmp_path / "out"
    out.mkdir()
    artifact = ee_local.pack(str(collections), "kubernetes.core", str(out))
    assert artifact == "kubernetes-core-6.2.0.tar.gz"
    with tarfile.open(out / artifact) as tar:
        assert sorted(tar.getnames()) == ["FILES.json", "MANIFEST.json", "README.md", "plugins", "plugins/modules",
                                          "plugins/modules/k8s.py"]
    subprocess.run([shutil.which("ansible-galaxy"), "collection", "install", "--offline", "--force", "-p", str(tmp_path / "dest"),
                    str(out / artifact)], check=True, capture_output=True,
                   env=dict(os.environ, ANSIBLE_GALAXY_DISABLE_GPG_VERIFY="1"))
    dest = tmp_path / "dest" / "ansible_collections" / "kubernetes" / "core"
    assert (dest / "plugins" / "modules" / "k8s.py").read_text() == "# module\n"
    assert not (dest / "tests").exists()


def built(tmp_path):
    """The folder of installed collections (kubernetes.core, community.docker) and this collection's built tarball."""
    collections = installed(tmp_path, "kubernetes.core", "6.2.0", {"README.md": "k"})
    installed(tmp_path, "community.docker", "4.8.5", {"README.md": "d"})
    tarball = tmp_path / "kubegpu-nvidia-1.0.0.tar.gz"
    tarball.write_bytes(b"built")
    return collections, tarball


def test_the_context_carries_the_collection_tarball_and_the_unchanged_requirements(tmp_path):
    collections, tarball = built(tmp_path)
    out = tmp_path / "definition"
    ee_local.write(str(out), str(tarball), str(collections), "kubegpu-lab-node:latest", "kubegpu-nvidia-ee:lab")
    for name in ("requirements.txt", "bindep.txt"):
        assert (out / name).read_text() == open(os.path.join(ROOT, name), encoding="utf-8").read()
    requirements = yaml.safe_load((out / "requirements.yml").read_text())
    assert requirements["collections"] == [
        {"name": "/build/collections/" + artifact, "type": "file"}
        for artifact in ("kubegpu-nvidia-1.0.0.tar.gz", "community-docker-4.8.5.tar.gz",
                         "kubernetes-core-6.2.0.tar.gz")]
    assert sorted(os.listdir(out / "collections")) == [
        "community-docker-4.8.5.tar.gz", "kubegpu-nvidia-1.0.0.tar.gz", "kubernetes-core-6.2.0.tar.gz"]
    definition = yaml.safe_load((out / "execution-environment.yml").read_text())
    assert definition["images"]["base_image"]["name"] == "kubegpu-lab-node:latest"
    assert definition["options"]["tags"] == ["kubegpu-nvidia-ee:lab"]


def test_a_missing_tarball_is_one_line(tmp_path):
    with pytest.raises(ee_local.LocalError, match=r"^no collection tarball .*kubegpu-nvidia-1\.0\.0\.tar\.gz "):
        ee_local.write(str(tmp_path / "out"), str(tmp_path / "kubegpu-nvidia-1.0.0.tar.gz"), str(tmp_path),
                       "kubegpu-lab-node:latest", "kubegpu-nvidia-ee:lab")


def test_a_ca_bundle_becomes_pips_in_the_base_stage(tmp_path):
    collections, tarball = built(tmp_path)
    bundle = tmp_path / "proxy.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    out = tmp_path / "definition"
    ee_local.write(str(out), str(tarball), str(collections), "kubegpu-lab-node:latest", "kubegpu-nvidia-ee:lab",
                   str(bundle))
    assert (out / "ca" / "ca-certificates.crt").read_text() == "-----BEGIN CERTIFICATE-----\n"
    definition = yaml.safe_load((out / "execution-environment.yml").read_text())
    validate_schema(definition)
    assert {"src": "ca", "dest": "ca"} in definition["additional_build_files"]
    steps = definition["additional_build_steps"]["prepend_base"]
    assert steps[:2] == ["COPY _build/ca/ca-certificates.crt " + ee_local.CA_PATH, "ENV PIP_CERT=" + ee_local.CA_PATH]
    with pytest.raises(ee_local.LocalError, match=r"^no CA bundle .*gone\.pem$"):
        ee_local.write(str(out), str(tarball), str(collections), "kubegpu-lab-node:latest", "kubegpu-nvidia-ee:lab",
                       str(tmp_path / "gone.pem"))
