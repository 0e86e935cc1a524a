"""The driver stack is held at its version: apt-mark holds, the unattended-upgrades blacklist, the
apt preferences pin; an apt-get upgrade afterwards changes nothing although the mirror has newer
versions of the 535 packages."""
import os

import testinfra.utils.ansible_runner

from conftest import installed_versions

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

STACK = {
    "driver-blackwell": ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-open-kernel-dkms"],
    "driver-hopper": ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-fabricmanager-535",
                      "nvidia-open-kernel-dkms"],
    "driver-pascal": ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-kernel-dkms"],
}


def test_the_stack_is_held(host):
    held = host.check_output("apt-mark showhold").split()
    stack = STACK[host.backend.get_hostname()]
    assert sorted(held) == stack
    # the image's real Debian packages of another version (nvidia-alternative 535.261.03, ...) and
    # nvidia-persistenced (a version of its own, as in Debian) are not held
    assert "nvidia-alternative" not in held and "nvidia-persistenced" not in held


def test_kept_out_of_unattended_upgrades(host):
    conf = host.file("/etc/apt/apt.conf.d/51kubegpu-nvidia-driver")
    stack = STACK[host.backend.get_hostname()]
    assert conf.exists
    # apt reads it: the blacklist is in apt's configuration
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for name in stack:
        assert '"^%s$"' % name in dump, (name, dump)


def test_apt_preferences_pin_the_version(host):
    pin = host.file("/etc/apt/preferences.d/kubegpu-nvidia-driver")
    version = host.package("nvidia-driver").version.split("-")[0]
    assert "Pin: version %s*" % version in pin.content_string.splitlines()
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "Candidate: %s" % host.package("nvidia-driver").version in policy


def test_an_apt_get_upgrade_changes_nothing(host):
    before = installed_versions(host)
    simulated = host.check_output("apt-get -s -o Debug::NoLocking=1 upgrade")
    assert "0 upgraded" in simulated, simulated
    host.run_test("DEBIAN_FRONTEND=noninteractive apt-get -y upgrade")
    assert installed_versions(host) == before
