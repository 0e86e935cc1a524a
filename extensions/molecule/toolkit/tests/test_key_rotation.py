"""The toolkit repository's key on a node: pinned by fingerprint, and replaced only by a trusted key on rotation.

In order: the converge's state (the older pinned release from the first key's repository), then the mirror
re-signed with a second key at the same URL (what NVIDIA did in 2022 to its CUDA repository), which a run that
trusts only the first key must refuse with one line, and a run that trusts both must take.
"""
import json
import os
import re
import subprocess

import testinfra.utils.ansible_runner
import yaml

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
STATE = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "toolkit_repo")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("rotation")
assert testinfra_hosts == ["toolkit-repo-node"], testinfra_hosts

KEY = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
PLAYBOOK = """
- name: The toolkit role with the scenario's mirror
  hosts: rotation
  gather_facts: false
  vars_files:
    - %s/vars.yml
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
""" % STATE


def scenario():
    with open(os.path.join(STATE, "vars.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def key_fingerprints(host):
    listing = host.check_output("gpg --show-keys --with-colons %s" % KEY)
    return [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")][:1]


def versions(host):
    return {package: host.package(package).version for package in PACKAGES}


def role(tmp_path, **extra):
    playbook = tmp_path / "toolkit.yml"
    playbook.write_text(PLAYBOOK)
    proc = subprocess.run(["ansible-playbook", "-i", INVENTORY, str(playbook), "-e", json.dumps(extra)],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
    return proc.returncode, proc.stdout + proc.stderr


def serve(directory):
    """Serve another build at the mirror's URL (the same address and port)."""
    info = scenario()["toolkit_repo_scenario"]
    subprocess.run(["python3", os.path.join(ROOT, "tests", "support", "toolkit_repo", "serve.py"), "start", "--dir", directory,
                    "--bind", info["bind"], "--state", STATE, "--port", str(info["port"])], check=True, capture_output=True)


def test_the_pinned_older_release_from_the_first_keys_repository(host):
    info = scenario()["toolkit_repo_scenario"]
    assert versions(host) == dict.fromkeys(PACKAGES, "1.18.1-1")  # the mirror's newer 1.20.0-1 was not taken
    assert key_fingerprints(host) == [info["fingerprints"][0]]
    key = host.file(KEY)
    assert (key.user, key.group, key.mode) == ("root", "root", 0o644)
    # 1.18 ships the CDI refresh units; the role enabled them and the spec exists
    assert host.service("nvidia-cdi-refresh.path").is_enabled
    assert host.file("/var/run/cdi/nvidia.yaml").exists


def test_a_rotated_key_that_is_not_trusted_stops_the_role_with_one_line(host, tmp_path):
    info = scenario()["toolkit_repo_scenario"]
    old, new = info["fingerprints"]
    serve(info["dirs"][1])
    before = host.file(KEY).content_string
    rc, output = role(tmp_path, nvidia_container_toolkit_version="1.20.0-1")
    assert rc == 2, output
    failed = [line for line in output.splitlines() if line.startswith("fatal: [toolkit-repo-node]")]
    assert len(failed) == 1, output
    message = json.loads(failed[0].split("=> ", 1)[1])["msg"]
    assert re.fullmatch(
        r"The repository http://[0-9.]+:%d/stable/deb/\$\(ARCH\) is signed with key [0-9A-F/]+, which the installed key "
        r"\(%s\) does not hold, and the new key cannot be trusted: the key at http://[0-9.]+:%d/gpgkey holds the key %s, "
        r"which is not one of the trusted fingerprints %s" % (info["port"], old, info["port"], new, old), message), message
    assert new[-16:] in message.split(" is signed with key ")[1].split(",")[0]
    assert "NO_PUBKEY" not in output
    # the node is as it was: the old key, the old packages
    assert host.file(KEY).content_string == before
    assert versions(host) == dict.fromkeys(PACKAGES, "1.18.1-1")


def test_a_rotated_key_that_is_trusted_replaces_the_old_one(host, tmp_path):
    info = scenario()["toolkit_repo_scenario"]
    old, new = info["fingerprints"]
    serve(info["dirs"][1])
    rc, output = role(tmp_path, nvidia_container_toolkit_version="1.20.0-1",
                      nvidia_container_toolkit_repo_gpg_key_fingerprints=[old, new])
    assert rc == 0, output
    assert key_fingerprints(host) == [new]
    assert versions(host) == dict.fromkeys(PACKAGES, "1.20.0-1")
    # apt itself verifies the repository with the new key
    update = host.run("apt-get update -o Dir::Etc::sourcelist=/etc/apt/sources.list.d/nvidia-container-toolkit.list "
                      "-o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0")
    assert update.rc == 0 and "NO_PUBKEY" not in update.stdout + update.stderr, update.stdout + update.stderr
    # and a second run has nothing to do
    rc, output = role(tmp_path, nvidia_container_toolkit_version="1.20.0-1",
                      nvidia_container_toolkit_repo_gpg_key_fingerprints=[old, new])
    assert rc == 0 and re.search(r"toolkit-repo-node +: ok=\d+ +changed=0 ", output), output
