"""The driver role's reads of a node: one module run per node in a run whose facts play read the driver state
(site.yml's preflight, gather_subset ``driver``), its own read when it runs alone or a second time.

The plays run on this machine (local connection, check mode, as test_role_platform_checks.py runs the roles) with
the platform facts of a Debian 12 host in a jsonfile fact cache and the GPU facts from the fake NVML (one T4,
tests/support/fakenvml/profiles/t4x1.conf). What is counted is the JSON callback's module runs on the GPU host, as
bench/site.py counts them.
"""
import json
import pathlib
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEBIAN = {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12",
          "distribution_version": "12.8", "distribution_release": "bookworm", "architecture": "x86_64",
          "kernel": "6.1.0-28-amd64", "virtualization_type": "docker", "virtualization_role": "guest"}
READ = "Read the driver state of the node"
REPORT = "Check the GPUs and the options, and report what the role does"
FACTS = "Gather the GPU facts and the host facts the roles need"
# the same decision from the facts' state and from the role's own read (the T4 profile's driver is loaded)
NOTHING_TO_DO = "NVIDIA driver 535.104.05 is loaded on 1 GPU(s) of gpu-a (wanted: 535.104.05): nothing to install."


def facts_play(subset):
    """The play that gathers the facts' ``subset`` as site.yml's facts play does (the preflight role's nodes entry
    point, without the cluster), when the template's ``{with_facts}`` is true; ``{env}``: the fake NVML's settings."""
    return """
- name: Facts
  hosts: gpu_nodes
  gather_facts: false
  environment: {env}
  tasks:
    - name: The preflight's entry point nodes, without the cluster
      ansible.builtin.include_role:
        name: kubegpu.nvidia.preflight
        tasks_from: nodes
      vars:
        preflight_cluster: false
        preflight_gather_subset: [%s]
      when: {with_facts}
""" % subset


PLAYBOOK = facts_play("driver") + """
- name: Driver
  hosts: gpu_nodes
  gather_facts: false
  environment: {env}
  roles:
    - role: kubegpu.nvidia.nvidia_driver
      vars:
        nvidia_driver_version: 535.104.05
"""
SECOND = """
- name: Driver again
  hosts: gpu_nodes
  gather_facts: false
  environment: {env}
  roles:
    - role: kubegpu.nvidia.nvidia_driver
      vars:
        nvidia_driver_version: 535.104.05
"""


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def run(tmp_path, libdir, with_facts, second=False):
    cache = tmp_path / "facts"
    cache.mkdir()
    ansible_run.write_cached_facts(cache, "gpu-a", DEBIAN)
    (tmp_path / "inventory.json").write_text(json.dumps(
        {"gpu_nodes": {"hosts": {"gpu-a": {"ansible_connection": "local"}}}}))
    env = json.dumps({"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(PROFILES / "t4x1.conf")})
    text = PLAYBOOK.format(env=env, with_facts=json.dumps(with_facts))
    if second:
        text += SECOND.format(env=env)
    (tmp_path / "play.yml").write_text(text)
    result = ansible_run.run_playbook(tmp_path / "play.yml", tmp_path / "inventory.json", check=True,
                                      fact_cache=cache, timeout=300)
    assert result.rc == 0, result.stdout[-3000:]
    return [(name, res) for host, name, res in result.events() if host == "gpu-a"]


def module_runs(events):
    """Tasks that ran a module on the host (bench/site.py's count): not skipped, and not an action of the
    controller alone."""
    return [name for name, res in events
            if not res.get("skipped") and res.get("action") not in (
                "ansible.builtin.set_fact", "set_fact", "ansible.builtin.assert", "assert", "ansible.builtin.group_by",
                "group_by", "ansible.builtin.include_role", "include_role", "ansible.builtin.include_tasks",
                "include_tasks", "ansible.builtin.include_vars", "include_vars", "ansible.builtin.debug", "debug",
                "ansible.builtin.validate_argument_spec", "validate_argument_spec")]


def test_with_the_facts_play_the_role_makes_no_read_of_its_own(tmp_path, libdir):
    events = run(tmp_path, libdir, with_facts=True)
    # one module run on the GPU host: the facts, with the driver state
    assert module_runs(events) == [FACTS], [(name, res.get("action")) for name, res in events]
    assert dict(events)[READ].get("skipped") is True
    report = dict(events)[REPORT]
    assert report.get("failed") is not True
    assert report["msg"] == NOTHING_TO_DO


def test_alone_the_role_reads_the_node_itself(tmp_path, libdir):
    events = run(tmp_path, libdir, with_facts=False)
    # the role's read, and the GPU facts it gathers itself (none cached)
    assert READ in module_runs(events) and FACTS not in module_runs(events)
    assert dict(events)[REPORT]["msg"] == NOTHING_TO_DO


def test_a_second_run_of_the_role_in_the_playbook_reads_again(tmp_path, libdir):
    events = run(tmp_path, libdir, with_facts=True, second=True)
    reads = [res for name, res in events if name == READ]
    assert [res.get("skipped", False) for res in reads] == [True, False]
