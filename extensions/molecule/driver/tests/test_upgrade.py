"""The node's side of kubegpu.nvidia.upgrade_driver (upgrade.yml: release the hold, run the role with the new
version) on the Pascal node: the whole stack moves to the new version and is held again; a rollback the same way
goes back (a downgrade). The Kubernetes side is tested in tests/functional/test_upgrade_driver.py."""
import os

import testinfra.utils.ansible_runner

from conftest import installed_versions

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("driver-pascal")

STACK = ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-kernel-dkms"]


def upgrade(host, run_role, version):
    run = run_role("driver-pascal", playbook="upgrade.yml", nvidia_driver_version=version)
    assert run.rc == 0, run.failures("driver-pascal")
    released = run.result("driver-pascal", "Release the hold on the driver's packages")
    held = run.result("driver-pascal", "Hold the driver packages at their version")
    versions = installed_versions(host)
    assert {name: versions[name] for name in STACK} == dict((name, version + "-1~standin1") for name in STACK)
    assert sorted(host.check_output("apt-mark showhold").split()) == STACK
    assert "Pin: version %s*" % version in host.file("/etc/apt/preferences.d/kubegpu-nvidia-driver").content_string
    kernel = host.check_output("uname -r")
    assert host.check_output("dkms status").splitlines() == ["nvidia-current/%s, %s, x86_64: installed" % (version, kernel)]
    summary = run.facts("driver-pascal")["nvidia_driver_summary"]
    assert summary["text"] == "%s, held, proprietary, reboot pending" % version
    return released, held


def test_upgrade_releases_and_takes_the_hold_again_and_rolls_back(host, run_role):
    released, held = upgrade(host, run_role, "535.216.01")
    assert released["removed"] == STACK
    assert held["added"] == STACK
    # the rollback: a downgrade to the version before, held again
    released, held = upgrade(host, run_role, "535.183.01")
    assert released["changed"] is True and held["changed"] is True
