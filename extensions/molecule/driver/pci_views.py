"""Write the fake PCI views the `driver` scenario's nodes mount over /sys/bus/pci/devices.

    python3 extensions/molecule/driver/pci_views.py OUT_DIR

writes OUT_DIR/<view>/devices/<domain:bus:device.function>/{vendor,device,class} for three
machines, so that GPU discovery without a driver (the PCI source of nvidia_gpu_facts) sees their GPUs
and the driver role picks the kernel module flavour from them:

    blackwell  2 x NVIDIA B200 (0x2901): open kernel modules only, branch 570 or newer
    hopper     2 x NVIDIA H100 80GB HBM3 (0x2330) and an NVSwitch: either flavour
    pascal     1 x Tesla P100-PCIE-16GB (0x15F8): proprietary kernel modules only, branch 580 or older

An unchanged view is left in place (running nodes have it mounted).
"""
import filecmp
import os
import shutil
import sys

NVIDIA = 0x10DE
DISPLAY_3D = 0x030200
# view -> [(address, vendor, device, class)]
VIEWS = {
    "blackwell": [("0000:00:00.0", 0x8086, 0x09A2, 0x088000), ("0000:1b:00.0", NVIDIA, 0x2901, DISPLAY_3D),
                  ("0000:43:00.0", NVIDIA, 0x2901, DISPLAY_3D), ("0000:52:00.0", 0x15B3, 0x1021, 0x020700)],
    "hopper": [("0000:00:00.0", 0x8086, 0x09A2, 0x088000), ("0000:05:00.0", NVIDIA, 0x22A3, 0x068000),
               ("0000:18:00.0", NVIDIA, 0x2330, DISPLAY_3D), ("0000:2a:00.0", NVIDIA, 0x2330, DISPLAY_3D)],
    "pascal": [("0000:00:00.0", 0x8086, 0x6F00, 0x060000), ("0000:04:00.0", NVIDIA, 0x15F8, DISPLAY_3D)],
}


def write_view(out, view):
    root = os.path.join(out, view)
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for address, vendor, device, pci_class in VIEWS[view]:
        entry = os.path.join(tmp, "devices", address)
        os.makedirs(entry)
        for name, value in (("vendor", "0x%04x" % vendor), ("device", "0x%04x" % device),
                            ("class", "0x%06x" % pci_class)):
            with open(os.path.join(entry, name), "w", encoding="ascii") as handle:
                handle.write(value + "\n")
    if os.path.isdir(root) and _same(tmp, root):
        shutil.rmtree(tmp)
    else:
        shutil.rmtree(root, ignore_errors=True)
        os.rename(tmp, root)


def _same(left, right):
    compared = filecmp.dircmp(left, right)
    if compared.left_only or compared.right_only or compared.funny_files:
        return False
    _match, mismatch, errors = filecmp.cmpfiles(left, right, compared.common_files, shallow=False)
    return not mismatch and not errors and all(
        _same(os.path.join(left, name), os.path.join(right, name)) for name in compared.common_dirs)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: pci_views.py OUT_DIR\n")
        return 2
    for view in VIEWS:
        write_view(argv[1], view)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
