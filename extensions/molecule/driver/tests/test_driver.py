"""What converge leaves on the three nodes (each a Debian 12 lab container with a machine's fake PCI view).

The role picks the kernel module flavour from the GPUs it sees on the PCI bus before any driver
exists, installs the driver stack by Debian's names at one exact version (Fabric Manager included)
from a mirror given through the air-gapped variables, holds it there, builds the module with the
stand-in DKMS for the running kernel (signed under Secure Boot), blacklists nouveau and writes the
module parameters with the initramfs rebuilt once, enables nvidia-persistenced (and Fabric
Manager), and, since a container can neither load a kernel module nor be rebooted by the role,
reports a pending reboot and does not reboot. The kernel module itself is out of reach here.
"""
import os

import testinfra.utils.ansible_runner

from conftest import installed_versions

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

# host -> (driver version, kernel module package, the other one)
EXPECTED = {
    # 2 x B200: open modules only; 570.195.03 asked
    "driver-blackwell": ("570.195.03-1~standin1", "nvidia-open-kernel-dkms", "nvidia-kernel-dkms"),
    # 2 x H100: the user's choice (open); branch 535, whose newest version with Fabric Manager is 535.183.01
    "driver-hopper": ("535.183.01-1~standin1", "nvidia-open-kernel-dkms", "nvidia-kernel-dkms"),
    # 1 x P100: proprietary modules only; 535.183.01 asked, the mirror also has 535.216.01
    "driver-pascal": ("535.183.01-1~standin1", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"),
}


def test_kernel_module_flavour_from_the_gpus(host):
    version, modules, other = EXPECTED[host.backend.get_hostname()]
    assert host.package(modules).is_installed
    assert host.package(modules).version == version
    assert not host.package(other).is_installed


def test_the_driver_stack_at_one_version(host):
    version, modules, _other = EXPECTED[host.backend.get_hostname()]
    versions = installed_versions(host)
    for name in ("nvidia-driver", "libcuda1", "libnvidia-ml1", modules):
        assert versions[name] == version, (name, versions)
    # the mirror also holds newer versions of the 535 packages: the pin, not the newest, decides
    offered = host.check_output("apt-cache madison nvidia-driver")
    assert "535.216.01-1~standin1" in offered


def test_fabric_manager_at_the_drivers_version(host):
    """The branch install took 535.183.01 although the mirror's driver goes up to 535.216.01:
    nvidia-fabricmanager-535 is only offered at 535.183.01, and the two never differ."""
    name = host.backend.get_hostname()
    fabric = host.package("nvidia-fabricmanager-535")
    if name != "driver-hopper":
        assert not fabric.is_installed
        return
    assert fabric.is_installed
    assert fabric.version == host.package("nvidia-driver").version == "535.183.01-1~standin1"
    assert host.service("nvidia-fabricmanager").is_enabled


def test_module_built_by_dkms_for_the_running_kernel(host):
    version, modules, _other = EXPECTED[host.backend.get_hostname()]
    module = "nvidia-current-open" if "open" in modules else "nvidia-current"
    kernel = host.check_output("uname -r")
    status = host.check_output("dkms status")
    assert "%s/%s, %s, x86_64: installed" % (module, version.split("-")[0], kernel) in status.splitlines()
    assert host.file("/lib/modules/%s/updates/dkms/%s.ko" % (kernel, module)).exists
    # headers of the running kernel (and of the kernel that boots next, here the same one) and the meta package
    assert host.package("linux-headers-%s" % kernel).is_installed
    assert host.package("linux-headers-amd64").is_installed


def test_firmware_and_persistenced_installed(host):
    for name in ("firmware-misc-nonfree", "nvidia-persistenced"):
        assert host.package(name).is_installed, name


def test_mirror_configured_with_its_key(host):
    sources = host.file("/etc/apt/sources.list.d/kubegpu-debian-non-free.sources")
    assert sources.exists
    assert "URIs: file:///srv/kubegpu-mirror/debian" in sources.content_string
    assert "Components: main non-free non-free-firmware" in sources.content_string
    assert "Signed-By:" in sources.content_string
    assert "Trusted" not in sources.content_string


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/blacklist-nouveau-kubegpu.conf")
    assert conf.exists
    assert conf.mode == 0o644
    lines = conf.content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_module_parameters(host):
    conf = host.file("/etc/modprobe.d/kubegpu-nvidia.conf")
    if host.backend.get_hostname() != "driver-hopper":
        assert not conf.exists
        return
    assert "options nvidia NVreg_EnableStreamMemOPs=1" in conf.content_string.splitlines()


def test_initramfs_rebuilt_once(host):
    # converge + idempotence ran the role twice; the handler fired once, for the blacklist and the parameters
    log = host.file("/var/log/kubegpu-standin/update-initramfs.log")
    assert log.exists
    assert log.content_string.splitlines() == ["-u -k all"]


def test_persistenced_enabled_not_started_without_driver(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert not service.is_running


def test_reboot_pending_reported_not_performed(host):
    assert host.file("/run/reboot-required").exists
    assert "nvidia-driver" in host.file("/run/reboot-required.pkgs").content_string.splitlines()
    # /run is a tmpfs emptied by a reboot: the mark written in prepare is still there
    assert host.file("/run/kubegpu-driver-boot-marker").exists
