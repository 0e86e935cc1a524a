"""nvidia_gpu_facts' toolkit subset, decided by the filter toolkit_plan, gives what nvidia_container_toolkit_info
returns on the same host (one read, one plan), run by ansible-playbook as test_node_state_facts.py runs the driver
subset.

This machine's dpkg-query and files are what they are; both reads see the same ones in the same run. It has no
systemd, so systemctl is a stand-in on PATH that answers ``systemctl show`` for the units asked as systemd does
(one block of properties per unit, in order; containerd loaded, active and enabled, the others not found), as
tests/functional/test_mig_module.py stands in for it; a second stand-in fails as systemctl does without systemd.
"""
import json
import pathlib
import subprocess

import pytest

import ansible_run
from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYSTEMCTL = r"""#!/bin/sh
# systemctl show --property=... -- UNIT...: one block per unit, blank lines between
while [ "$1" != "--" ]; do shift; done; shift
first=1
for unit in "$@"; do
  [ $first = 1 ] || echo
  first=0
  case "$unit" in
    containerd.service) printf 'LoadState=loaded\nActiveState=active\nUnitFileState=enabled\n' ;;
    *) printf 'LoadState=not-found\nActiveState=inactive\nUnitFileState=\n' ;;
  esac
done
"""
NO_SYSTEMD = "#!/bin/sh\necho 'Failed to connect to bus: Host is down' >&2\nexit 1\n"


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def stand_in(folder, text):
    folder.mkdir()
    (folder / "systemctl").write_text(text)
    (folder / "systemctl").chmod(0o755)
    return "%s:/usr/bin:/bin:/usr/sbin:/sbin" % folder


@pytest.fixture(scope="module")
def reads(libdir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toolkit_state")
    path = stand_in(tmp / "systemd", SYSTEMCTL)
    broken = stand_in(tmp / "nosystemd", NO_SYSTEMD)
    env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(PROFILES / "t4x1.conf"), "PATH": path}
    options = {
        "defaults": {"family": "Debian"},
        # another pin, no tomlkit, CDI by nvidia-ctk with the loaded driver's version: other branches of the plan
        "pinned": {"family": "Debian", "version": "1.17.8-1", "install_tomlkit": False, "cdi_generate": True,
                   "driver_version": "550.54.15", "repo_deb_url": "https://example.invalid/stable/deb/$(ARCH)"},
    }
    tasks = [
        {"name": "facts", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["toolkit"]}, "environment": env},
        {"name": "facts-check-mode", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["health", "toolkit"]},
         "environment": env, "check_mode": True},
        {"name": "facts-no-systemd", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": "toolkit"},
         "environment": dict(env, PATH=broken)},
        {"name": "info-no-systemd", "kubegpu.nvidia.nvidia_container_toolkit_info": options["defaults"],
         "environment": dict(env, PATH=broken), "ignore_errors": True},
    ]
    for name, args in options.items():
        tasks.append({"name": "info-" + name, "kubegpu.nvidia.nvidia_container_toolkit_info": args, "environment": env})
    playbook = tmp / "toolkit_state.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    return run.tasks(), options


def toolkit_plan(state, options):
    from ansible_collections.kubegpu.nvidia.plugins.filter.toolkit_runtimes import toolkit_plan as plan
    return plan(state, options)


def info_result(result):
    assert not result.get("failed"), result.get("msg")
    return dict((key, value) for key, value in result.items()
                if key not in ("invocation", "warnings", "deprecations", "_ansible_no_log", "action"))


@pytest.mark.parametrize("facts", ["facts", "facts-check-mode"])
@pytest.mark.parametrize("name", ["defaults", "pinned"])
def test_the_plan_from_the_toolkit_subset_is_what_nvidia_container_toolkit_info_returns(reads, facts, name):
    found, options = reads
    result = found[facts]
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    state = result["ansible_facts"]["nvidia_gpu"]["toolkit_state"]
    assert state["family"] == "Debian" and "error" not in state
    expected = info_result(found["info-" + name])
    assert expected["runtimes"] == ["containerd"]
    assert toolkit_plan(state, options[name]) == expected
    # the GPU facts are there too, from the fake NVML, in the same module run
    assert result["ansible_facts"]["nvidia_gpu"]["source"] == "nvml"


def test_the_state_is_small_and_says_what_it_read(reads):
    found, _options = reads
    state = found["facts"]["ansible_facts"]["nvidia_gpu"]["toolkit_state"]
    assert state["options"] == {"packages": ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                             "libnvidia-container-tools", "libnvidia-container1", "python3-tomlkit"],
                                "record_path": "/var/lib/kubegpu-nvidia-container-runtimes.record",
                                "cdi_spec_path": "/etc/cdi/nvidia.yaml"}
    assert len(json.dumps(state)) < 8192


def test_a_node_the_toolkit_read_fails_on_keeps_its_facts_and_leaves_the_read_to_the_module(reads):
    found, options = reads
    result = found["facts-no-systemd"]
    assert not result.get("failed"), result.get("msg")
    state = result["ansible_facts"]["nvidia_gpu"]["toolkit_state"]
    failed = found["info-no-systemd"]
    assert failed["failed"] is True and "\n" not in failed["msg"]
    assert state == {"family": "Debian", "error": failed["msg"]}
    assert failed["msg"].startswith("Cannot read the services of the container runtimes (systemctl show, rc 1)")
    # the role then runs the module, which stops with that line
    assert toolkit_plan(state, options["defaults"]) is None
