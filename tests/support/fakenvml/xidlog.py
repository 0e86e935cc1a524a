"""Write the kernel log of a lab node: the Xid lines its NVIDIA driver would print for its fake GPUs.

    python3 tests/support/fakenvml/xidlog.py PROFILE XIDS_JSON

prints the log for the fake NVML profile PROFILE (a name such as ``t4x1``, a path, or ``cpu`` for a node
without GPUs) and XIDS_JSON, a JSON list whose items are an Xid number (on GPU 0), ``"<xid>"``,
``"<xid>:<gpu>"`` or ``{"xid": <xid>, "gpu": <gpu>}`` (``gpu`` the GPU's index in the profile). Each Xid is one
line as the kernel prints it (``dmesg --notime``; the driver's ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s,
name=%s, %s`` of the R535 branch), with the PCI address of that GPU from the profile, so that
``nvidia_gpu_health`` attributes the Xid to it. An empty list prints nothing (an empty log). Bad input exits
with status 2 and one line on stderr. lab/prepare.yml writes the output to the node (``lab_kernel_log_xids``).
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from fakenvml.profile import load_profile  # noqa: E402  pylint: disable=wrong-import-position

# What the driver prints after the process part, per Xid (NVIDIA's Xid catalog,
# https://docs.nvidia.com/deploy/xid-errors/, and the messages it quotes)
MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f0a_00000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    43: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Error recording row remapping, reset gpu to retry.",
    74: "NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate detected.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
}
OTHER_MESSAGE = "Xid reported by the lab."


class XidLogError(ValueError):
    """Bad input, with a one-line message."""


def _number(value, what):
    if isinstance(value, bool):
        raise XidLogError("%s must be a number, got %s" % (what, json.dumps(value)))
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise XidLogError("%s must be a number, got %s" % (what, json.dumps(value)))


def parse_item(item):
    """(xid, gpu index) of one item of lab_kernel_log_xids."""
    if isinstance(item, dict):
        unknown = sorted(set(item) - {"xid", "gpu"})
        if unknown or "xid" not in item:
            raise XidLogError("an Xid item has the keys xid and gpu, got %s" % json.dumps(item, sort_keys=True))
        xid, gpu = item["xid"], item.get("gpu", 0)
    elif isinstance(item, str) and ":" in item:
        xid, gpu = item.split(":", 1)
    else:
        xid, gpu = item, 0
    xid = _number(xid, "an Xid")
    if not 1 <= xid <= 99999:
        raise XidLogError("an Xid must be from 1 to 99999, got %d" % xid)
    return xid, _number(gpu, "the GPU index of Xid %d" % xid)


def gpu_bus_ids(profile):
    """The NVML PCI bus ids of a profile's GPUs, in index order; none for ``cpu``."""
    if str(profile) == "cpu":
        return []
    try:
        loaded = load_profile(profile)
    except (OSError, IOError) as error:
        raise XidLogError("cannot read the GPU profile %s: %s" % (profile, error.strerror or error))
    return [gpu["pci_bus_id"] for gpu in loaded["gpus"]]


def xid_address(bus_id):
    """The driver's ``PCI:dddd:bb:dd`` of an NVML bus id (``00000000:00:1E.0`` -> ``PCI:0000:00:1e``)."""
    domain, bus, rest = bus_id.split(":")
    return "PCI:%04x:%02x:%02x" % (int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16))


def xid_line(xid, bus_id):
    """One Xid line as the kernel prints it."""
    return "NVRM: Xid (%s): %d, pid='<unknown>', name=<unknown>, %s" % (
        xid_address(bus_id), xid, MESSAGES.get(xid, OTHER_MESSAGE))


def render(profile, items):
    """The kernel log text of a node with this profile and these Xid items ('' for none)."""
    if not isinstance(items, list):
        raise XidLogError("the Xids must be a list, got %s" % json.dumps(items))
    bus_ids = gpu_bus_ids(profile)
    lines = []
    for item in items:
        xid, gpu = parse_item(item)
        if not bus_ids:
            raise XidLogError("Xid %d on GPU %d: the profile %s has no GPU" % (xid, gpu, profile))
        if not 0 <= gpu < len(bus_ids):
            raise XidLogError("Xid %d on GPU %d: the profile %s has GPUs 0 to %d" % (xid, gpu, profile, len(bus_ids) - 1))
        lines.append(xid_line(xid, bus_ids[gpu]) + "\n")
    return "".join(lines)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: xidlog.py PROFILE XIDS_JSON\n")
        return 2
    try:
        try:
            items = json.loads(argv[1])
        except ValueError as error:
            raise XidLogError("the Xids are not JSON: %s" % error)
        sys.stdout.write(render(argv[0], items))
    except XidLogError as error:
        sys.stderr.write("%s\n" % error)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
