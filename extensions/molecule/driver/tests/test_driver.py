"""What the driver scenario proves on a Debian 12 lab node (a container).

The role installs the driver stack by Debian's package names, pinned to the wanted
version, from a mirror given through the air-gapped variables; blacklists nouveau and
has the initramfs rebuilt once; enables nvidia-persistenced; and, since a container can
neither load a kernel module nor be rebooted by the role, reports a pending reboot and
does not reboot. The kernel module itself is out of reach here.
"""

WANTED = "535.183.01-1~standin1"


def test_driver_packages_at_the_wanted_version(host):
    for name in ("nvidia-driver", "nvidia-kernel-dkms"):
        package = host.package(name)
        assert package.is_installed, name
        assert package.version == WANTED, (name, package.version)
    # the mirror also holds 535.216.01: the pin, not the newest, decides
    assert host.file("/usr/src/nvidia-current-535.183.01/dkms.conf").exists
    assert not host.file("/usr/src/nvidia-current-535.216.01").exists


def test_firmware_headers_and_persistenced_installed(host):
    for name in ("firmware-misc-nonfree", "linux-headers-amd64", "nvidia-persistenced"):
        assert host.package(name).is_installed, name
    assert not host.package("nvidia-open-kernel-dkms").is_installed


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


def test_initramfs_rebuilt_once(host):
    # converge + idempotence ran the role twice; the handler fired only on the change
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
