"""Write the fake PCI and DMI views that lab nodes mount over their sysfs.

    python3 tests/support/fakenvml/sysfs.py OUT_DIR

writes, for each lab profile (h100x8, a100x4-mig, t4x1 and cpu):

    OUT_DIR/<profile>/pci/devices/<domain:bus:device.function>/{vendor,device,class,...}
    OUT_DIR/<profile>/dmi/product_name

A node container gets ``<profile>/pci/devices`` bind-mounted read-only over
``/sys/bus/pci/devices`` (and ``dmi/product_name`` over
``/sys/class/dmi/id/product_name`` where the host has that file), so GPU
discovery without a driver sees the profile's NVIDIA GPUs next to the other
devices such a machine has. The GPUs come from the profile's [gpu] sections, with
the PCI class of their ``pci_class`` key (default 0x030200, a 3D controller);
the other devices are fixed per profile below. The cpu profile has no NVIDIA device.
Tests write the views of the other profiles (MACHINES and OTHER_MACHINES) with
``write_profile(out, name)``.
"""
import filecmp
import os
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from fakenvml.profile import load_profile  # noqa: E402  pylint: disable=wrong-import-position

NVIDIA = 0x10DE
DISPLAY_3D = 0x030200

# profile -> (DMI product name, [(address, vendor, device, class, subsystem vendor, subsystem device)])
MACHINES = {
    "h100x8": ("DGX H100", [
        ("0000:00:00.0", 0x8086, 0x09A2, 0x088000, 0x8086, 0x0000),   # Sapphire Rapids IIO
        ("0000:00:17.0", 0x8086, 0x1BA2, 0x010601, 0x10DE, 0x1899),   # SATA controller
        ("0000:05:00.0", NVIDIA, 0x22A3, 0x068000, 0x10DE, 0x1796),   # NVSwitch (not a GPU)
        ("0000:06:00.0", NVIDIA, 0x22A3, 0x068000, 0x10DE, 0x1796),
        ("0000:07:00.0", NVIDIA, 0x22A3, 0x068000, 0x10DE, 0x1796),
        ("0000:08:00.0", NVIDIA, 0x22A3, 0x068000, 0x10DE, 0x1796),
        ("0000:1a:00.0", 0x15B3, 0x1021, 0x020700, 0x15B3, 0x0041),   # ConnectX-7
    ]),
    "a100x4-mig": ("DGX Station A100", [
        ("0000:00:00.0", 0x1022, 0x1480, 0x060000, 0x10DE, 0x145F),   # AMD Starship root complex
        ("0000:c1:00.0", 0x8086, 0x1533, 0x020000, 0x10DE, 0x145F),   # I210 Ethernet
    ]),
    "t4x1": ("g4dn.xlarge", [
        ("0000:00:00.0", 0x8086, 0x1237, 0x060000, 0x1D0F, 0x1237),   # host bridge
        ("0000:00:04.0", 0x1D0F, 0x8061, 0x010802, 0x1D0F, 0x8061),   # EBS NVMe
        ("0000:00:05.0", 0x1D0F, 0xEC20, 0x020000, 0x1D0F, 0xEC20),   # ENA
    ]),
    "cpu": ("m6i.large", [
        ("0000:00:00.0", 0x8086, 0x1237, 0x060000, 0x1D0F, 0x1237),
        ("0000:00:04.0", 0x1D0F, 0x8061, 0x010802, 0x1D0F, 0x8061),
        ("0000:00:05.0", 0x1D0F, 0xEC20, 0x020000, 0x1D0F, 0xEC20),
    ]),
}
# The profiles that no lab node uses: written only when a test asks for them.
OTHER_MACHINES = {
    "b200x8": ("DGX B200", [
        ("0000:00:00.0", 0x8086, 0x09A2, 0x088000, 0x8086, 0x0000),   # Emerald Rapids IIO
        ("0000:05:00.0", NVIDIA, 0x22A3, 0x068000, 0x10DE, 0x1999),   # NVSwitch (not a GPU)
    ]),
    "gb200x4": ("GB200 NVL", [
        ("0000:00:00.0", 0x10DE, 0x22B2, 0x060400, 0x10DE, 0x0000),   # Grace root port
        ("0000:01:00.0", 0x15B3, 0x1021, 0x020700, 0x15B3, 0x0041),   # ConnectX-7
    ]),
    "h100x2-mig": ("PowerEdge XE9680", [
        ("0000:00:00.0", 0x8086, 0x09A2, 0x088000, 0x8086, 0x0000),
    ]),
    "rtx6000ada-vga": ("Precision 7960 Tower", [
        ("0000:00:00.0", 0x8086, 0x09A2, 0x088000, 0x8086, 0x0000),
        ("0000:17:00.1", NVIDIA, 0x22BA, 0x040300, 0x10DE, 0x16A1),   # the GPUs' HDMI audio function
    ]),
    "non-utf8": ("DGX Station A100", [
        ("0000:00:00.0", 0x1022, 0x1480, 0x060000, 0x10DE, 0x145F),
    ]),
}


def _sysfs_address(nvml_bus_id):
    """``00000000:18:00.0`` (NVML) -> ``0000:18:00.0`` (sysfs)."""
    domain, bus, rest = nvml_bus_id.split(":")
    return "%04x:%s:%s" % (int(domain, 16), bus.lower(), rest.lower())


def devices(profile_name):
    """Return the PCI devices of a profile, GPUs included, as tuples like MACHINES has."""
    found = list(_machine(profile_name)[1])
    if profile_name != "cpu":
        for gpu in load_profile(profile_name)["gpus"]:
            subsystem = gpu.get("pci_subsystem_id", 0)
            found.append((_sysfs_address(gpu["pci_bus_id"]), NVIDIA, gpu["pci_device_id"] >> 16,
                          gpu.get("pci_class", DISPLAY_3D), subsystem & 0xFFFF, subsystem >> 16))
    return sorted(found)


def _machine(profile_name):
    return MACHINES[profile_name] if profile_name in MACHINES else OTHER_MACHINES[profile_name]


def write_profile(out, profile_name):
    """Write (replacing) ``out/<profile_name>``."""
    root = pathlib.Path(out) / profile_name
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for address, vendor, device, pci_class, sub_vendor, sub_device in devices(profile_name):
        entry = tmp / "pci" / "devices" / address
        entry.mkdir(parents=True)
        for name, value in (("vendor", "0x%04x" % vendor), ("device", "0x%04x" % device),
                            ("class", "0x%06x" % pci_class), ("subsystem_vendor", "0x%04x" % sub_vendor),
                            ("subsystem_device", "0x%04x" % sub_device), ("revision", "0xa1")):
            (entry / name).write_text(value + "\n", encoding="ascii")
    (tmp / "dmi").mkdir(parents=True)
    (tmp / "dmi" / "product_name").write_text(_machine(profile_name)[0] + "\n", encoding="ascii")
    for path in [tmp] + sorted(tmp.rglob("*")):
        os.chmod(path, 0o755 if path.is_dir() else 0o444)
    if root.is_dir() and _same_tree(tmp, root):
        # Unchanged: keep the folder running nodes have mounted.
        shutil.rmtree(tmp)
    else:
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return root


def _same_tree(left, right):
    compared = filecmp.dircmp(left, right)
    if compared.left_only or compared.right_only or compared.funny_files:
        return False
    _match, mismatch, errors = filecmp.cmpfiles(left, right, compared.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(_same_tree(left / name, right / name) for name in compared.common_dirs)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: sysfs.py OUT_DIR\n")
        return 2
    for name in MACHINES:
        write_profile(argv[1], name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
