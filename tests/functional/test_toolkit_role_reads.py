"""The toolkit role's reads of a node: none of its own in a run whose facts play read the toolkit state (site.yml's
preflight, gather_subset ``toolkit``), its own read when it runs alone, a second time, or after the driver role
installed a driver; the same plan either way.

The plays run on this machine in check mode (local connection, as test_driver_role_reads.py runs the driver role)
with the platform facts of a Debian 12 host in a jsonfile fact cache and the GPU facts from the fake NVML (one T4).
This machine has no systemd: systemctl is a stand-in on PATH that answers ``systemctl show`` for the units asked as
systemd does (containerd loaded, active and enabled; the others not found), as test_mig_module.py stands in for it.
Its dpkg-query and files are real. What is counted is the JSON callback's module runs on the GPU host, as
bench/site.py counts them.
"""
import json
import pathlib
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES
from test_driver_role_reads import DEBIAN, facts_play, module_runs

ROOT = pathlib.Path(__file__).resolve().parents[2]
READ = "Read the node's toolkit packages, repository and container runtimes"
TAKE = "Take the plan, from this run's facts or from the read, and note the container runtimes this node uses"
FACTS = "Gather the GPU facts and the host facts the roles need"
SHOW = "Show the plan"
SYSTEMCTL = r"""#!/bin/sh
# systemctl show [--property=...] [--] UNIT...: one block per unit, blank lines between
[ "$1" = show ] || exit 0
shift
first=1
for arg in "$@"; do
  case "$arg" in -*) continue ;; esac
  [ $first = 1 ] || echo
  first=0
  case "$arg" in
    containerd|containerd.service) printf 'LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n' ;;
    *) printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n' ;;
  esac
done
"""
PLAYBOOK = facts_play("toolkit") + """
- name: Toolkit
  hosts: gpu_nodes
  gather_facts: false
  environment: {env}
  vars: {play_vars}
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
      vars: &toolkit
        # nothing to install on this machine, no repository: the runtime configuration is what the plan is about
        nvidia_container_toolkit_packages: []
        nvidia_container_toolkit_install_tomlkit: false
        nvidia_container_toolkit_repo_manage: false
  tasks:
    - name: Show the plan
      ansible.builtin.debug:
        var: _nvidia_container_toolkit_node
"""
SECOND = """
- name: Toolkit again
  hosts: gpu_nodes
  gather_facts: false
  environment: {env}
  roles:
    - role: kubegpu.nvidia.nvidia_container_toolkit
      vars: *toolkit
"""


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def run(tmp_path, libdir, with_facts, second=False, play_vars=None):
    tmp_path.mkdir(exist_ok=True)
    cache = tmp_path / "facts"
    cache.mkdir()
    ansible_run.write_cached_facts(cache, "gpu-a", DEBIAN)
    (tmp_path / "inventory.json").write_text(json.dumps(
        {"gpu_nodes": {"hosts": {"gpu-a": {"ansible_connection": "local"}}}}))
    systemd = tmp_path / "systemd"
    systemd.mkdir()
    (systemd / "systemctl").write_text(SYSTEMCTL)
    (systemd / "systemctl").chmod(0o755)
    env = json.dumps({"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(PROFILES / "t4x1.conf"),
                      "PATH": "%s:/usr/bin:/bin:/usr/sbin:/sbin" % systemd})
    text = PLAYBOOK.format(env=env, with_facts=json.dumps(with_facts), play_vars=json.dumps(play_vars or {}))
    if second:
        text += SECOND.format(env=env)
    (tmp_path / "play.yml").write_text(text)
    result = ansible_run.run_playbook(tmp_path / "play.yml", tmp_path / "inventory.json", check=True,
                                      fact_cache=cache, timeout=300)
    assert result.rc == 0, result.stdout[-3000:]
    return [(name, res) for host, name, res in result.events() if host == "gpu-a"]


def plan(events):
    node = dict(dict(events)[SHOW]["_nvidia_container_toolkit_node"])
    return dict((key, value) for key, value in node.items() if key not in ("changed", "invocation", "failed", "skipped"))


def after_the_plan(events):
    names = [name for name, _res in events]
    return [(name, res.get("changed", False)) for name, res in events[names.index(TAKE):]]


def test_with_the_facts_play_the_role_reads_nothing_itself_and_decides_as_its_read_would(tmp_path, libdir):
    with_facts = run(tmp_path / "facts", libdir, with_facts=True)
    assert dict(with_facts)[READ].get("skipped") is True
    assert FACTS in module_runs(with_facts)
    alone = run(tmp_path / "alone", libdir, with_facts=False)
    assert dict(alone)[READ].get("skipped") is not True and READ in module_runs(alone)
    # the same plan from the facts' state (on the controller) and from the module's own read (on the node)
    assert plan(with_facts) == plan(alone)
    assert plan(alone)["runtimes"] == ["containerd"] and [c["name"] for c in plan(alone)["configure"]] == ["containerd"]
    # what the role then does is the same: the same tasks ran, with the same changes (check mode)
    assert after_the_plan(with_facts) == after_the_plan(alone)
    assert ("Configure the nvidia runtime in each container runtime", True) in after_the_plan(alone)


def test_a_second_run_of_the_role_in_the_playbook_reads_again(tmp_path, libdir):
    events = run(tmp_path, libdir, with_facts=True, second=True)
    reads = [res for name, res in events if name == READ]
    assert [res.get("skipped", False) for res in reads] == [True, False]


def test_after_the_driver_role_installed_a_driver_the_role_reads_again(tmp_path, libdir):
    events = run(tmp_path, libdir, with_facts=True, play_vars={"nvidia_driver_changed": True})
    assert dict(events)[READ].get("skipped") is not True and READ in module_runs(events)
