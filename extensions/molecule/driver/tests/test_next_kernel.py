"""A kernel update whose module cannot be built: the role installs the headers of the kernel that
boots next, tries to build the module for it, reports "not built for the next kernel" and does not
reboot into it.

The Pascal node gets linux-image-6.99.0-1-amd64 from the stand-in mirror (it points /boot/vmlinuz at
itself, as Debian's kernel packages keep /vmlinuz on the newest kernel); the stand-in DKMS fails for
that kernel's headers, as a real DKMS build fails for a kernel too new for the driver.
"""
import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("driver-pascal")

NEXT = "6.99.0-1-amd64"


def test_refuses_to_reboot_into_a_kernel_without_the_module(host, run_role):
    host.run_test("DEBIAN_FRONTEND=noninteractive apt-get install -y linux-image-%s" % NEXT)
    try:
        assert host.file("/boot/vmlinuz").linked_to == "/boot/vmlinuz-%s" % NEXT
        run = run_role("driver-pascal")
        assert run.rc == 0, run.failures("driver-pascal")
        # the headers of the kernel that boots next were installed, and DKMS was asked to build for it
        assert host.package("linux-headers-%s" % NEXT).is_installed
        assert "dkms autoinstall -k %s" % NEXT in host.file("/var/log/kubegpu-standin/dkms.log").content_string
        assert not host.file("/lib/modules/%s/updates/dkms/nvidia-current.ko" % NEXT).exists
        summary = run.facts("driver-pascal")["nvidia_driver_summary"]
        assert summary["not_built_for_next_kernel"] is True
        assert summary["next_kernel"]["kernel"] == NEXT
        assert summary["text"] == "535.183.01, held, proprietary, reboot pending, not built for the next kernel"
        message = run.result("driver-pascal", "Report the pending reboot")["msg"]
        assert ("the nvidia module is not built for kernel %s, which boots next (the /boot/vmlinuz symlink)" % NEXT
                in message), message
        assert "rebooting now would leave the node without a working driver" in message
        assert "NOT BUILT FOR THE NEXT KERNEL" in run.result(
            "driver-pascal", "Report a module that could not be built for the kernel that boots next")["msg"]
        # the running kernel's module is still there, and the held driver did not move
        assert host.package("nvidia-driver").version == "535.183.01-1~standin1"
    finally:
        host.run_test("DEBIAN_FRONTEND=noninteractive apt-get purge -y linux-image-%s linux-headers-%s; "
                      "rm -f /boot/vmlinuz" % (NEXT, NEXT))
