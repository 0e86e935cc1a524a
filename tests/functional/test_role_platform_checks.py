"""The node roles stop a host they cannot serve with one message, before they read or change anything on it.

Each role runs on this machine (local connection, check mode) with the host's facts left in a jsonfile
fact cache, as a play that gathered them leaves them: the roles then gather nothing themselves, so the
facts can name a platform this machine is not.
"""
import json

import ansible_run

DEBIAN = {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12",
          "distribution_version": "12.8", "distribution_release": "bookworm", "architecture": "x86_64",
          "kernel": "6.1.0-28-amd64", "virtualization_type": "docker", "virtualization_role": "guest"}
ARCH = dict(DEBIAN, distribution="Archlinux", os_family="Archlinux", distribution_major_version="NA",
            distribution_version="NA", distribution_release="NA")
GPU = {"present": True, "count": 8, "source": "nvml", "driver_version": "535.183.01"}
PLAYBOOK = """
- name: Run one role
  hosts: gpu_nodes
  gather_facts: false
  roles:
    - role: {role}
"""


def run_role(tmp_path, role, facts, extra_vars=None):
    cache = tmp_path / "facts"
    cache.mkdir()
    ansible_run.write_cached_facts(cache, "gpu-a", facts)
    (tmp_path / "inventory.json").write_text(json.dumps(
        {"gpu_nodes": {"hosts": {"gpu-a": {"ansible_connection": "local"}}}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK.format(role=role))
    run = ansible_run.run_playbook(tmp_path / "play.yml", tmp_path / "inventory.json", extra_vars, check=True,
                                   fact_cache=cache, timeout=300)
    return run, run.events()


def results(events, host="gpu-a"):
    return [(name, res) for h, name, res in events if h == host]


def test_toolkit_role_stops_a_host_of_another_os_family_before_reading_it(tmp_path):
    run, events = run_role(tmp_path, "kubegpu.nvidia.nvidia_container_toolkit", dict(ARCH, nvidia_gpu=GPU))
    assert run.rc == 2, run.stdout[-3000:]
    failed = [(name, res) for name, res in results(events) if res.get("failed")]
    # the role's first task on the node, nvidia_container_toolkit_info, checks the family before it runs
    # any command (its unit test asserts no command ran: test_nvidia_container_toolkit_info.py)
    assert [(name, res["msg"], res["error_kind"]) for name, res in failed] == [(
        "Read the node's toolkit packages, repository and container runtimes",
        "The NVIDIA Container Toolkit role supports the Debian and RedHat families, not Archlinux.", "input")]
    assert run.data["stats"]["gpu-a"]["changed"] == 0
    assert "Traceback" not in run.stdout + run.stderr


CHECK = "Check the distribution"
REPORT = "Check the GPUs and the options, and report what the role does"


def test_driver_role_stops_a_host_of_another_distribution(tmp_path):
    run, events = run_role(tmp_path, "kubegpu.nvidia.nvidia_driver", dict(ARCH, nvidia_gpu=GPU))
    assert run.rc == 2, run.stdout[-3000:]
    check = dict(results(events))[CHECK]
    assert check["failed"] is True
    assert check["msg"].startswith("nvidia_driver: Archlinux NA with source '")
    assert "is not supported (supported: Ubuntu 22.04/24.04 distro|cuda, Debian 12 distro|cuda" in check["msg"]
    # nothing ran on the node: not even the read of its driver state
    assert [name for name, res in results(events) if not res.get("skipped")][-1] == CHECK


def test_driver_role_says_it_installs_a_driver_that_is_not_loaded(tmp_path):
    """Check mode: the role reports the install before its first install task (which check mode stops at)."""
    gpu = dict(GPU, driver_version="525.147.05")
    run, events = run_role(tmp_path, "kubegpu.nvidia.nvidia_driver", dict(DEBIAN, nvidia_gpu=gpu),
                           {"nvidia_driver_version": "535.183.01"})
    check = dict(results(events))[REPORT]
    assert check.get("failed") is not True, run.stdout[-3000:]
    assert check["msg"] == ("NVIDIA driver 535.183.01 is not loaded on gpu-a (loaded: 525.147.05): installing it from "
                            "the distro packages; proprietary kernel modules, the distribution's default (no GPU model known); "
                            "DKMS builds the module (Secure Boot is not known).")
