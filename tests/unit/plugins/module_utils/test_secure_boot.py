"""Unit tests for the Secure Boot state (plugins/module_utils/secure_boot.py) over fake EFI variable folders.

The layout is the kernel's: efivarfs files are the 4 attribute bytes (little-endian
EFI_VARIABLE_NON_VOLATILE|BOOTSERVICE_ACCESS|RUNTIME_ACCESS = 0x07, or 0x06 for the read-only
SecureBoot/SetupMode) followed by the value (Documentation/filesystems/efivarfs.rst); the older sysfs
interface keeps the value alone in <name>-<guid>/data.
"""
import os

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import secure_boot as sb
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import CommandTimeout

GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
UNKNOWN = {"enabled": None, "setup_mode": None, "source": None}


def efivars(tmp_path, **values):
    """An efivarfs folder with the given variables (name=value byte, or name=raw bytes)."""
    folder = tmp_path / "efi" / "efivars"
    folder.mkdir(parents=True)
    (folder / ("PlatformLang-%s" % GUID)).write_bytes(b"\x07\x00\x00\x00en-US\x00")
    for name, value in values.items():
        data = value if isinstance(value, bytes) else b"\x06\x00\x00\x00" + bytes([value])
        (folder / ("%s-%s" % (name, GUID))).write_bytes(data)
    return str(tmp_path / "efi")


class Mokutil:
    def __init__(self, rc=0, out=b"", err=b"", hang=False):
        self.result = (rc, out, err)
        self.hang = hang
        self.argvs = []

    def __call__(self, argv):
        self.argvs.append(argv)
        if self.hang:
            raise CommandTimeout(argv, 10)
        return self.result


def which_mokutil(name):
    return "/usr/bin/mokutil" if name == "mokutil" else None


@pytest.mark.parametrize("secure_boot, setup_mode, expected", [
    (1, 0, {"enabled": True, "setup_mode": False, "source": "efivars"}),
    (0, 0, {"enabled": False, "setup_mode": False, "source": "efivars"}),
    (0, 1, {"enabled": False, "setup_mode": True, "source": "efivars"}),
])
def test_efivarfs(tmp_path, secure_boot, setup_mode, expected):
    mokutil = Mokutil()
    state, warnings = sb.secure_boot_state(efivars(tmp_path, SecureBoot=secure_boot, SetupMode=setup_mode),
                                           mokutil, which_mokutil)
    assert state == expected
    assert warnings == [] and mokutil.argvs == []


def test_firmware_without_secure_boot_has_no_variable(tmp_path):
    state, warnings = sb.secure_boot_state(efivars(tmp_path), Mokutil(), which_mokutil)
    assert state == {"enabled": False, "setup_mode": None, "source": "efivars"}
    assert warnings == []


def test_secure_boot_without_setup_mode_variable(tmp_path):
    state, dummy = sb.secure_boot_state(efivars(tmp_path, SecureBoot=1))
    assert state == {"enabled": True, "setup_mode": None, "source": "efivars"}


def test_legacy_sysfs_vars(tmp_path):
    for name, value in (("SecureBoot", b"\x01"), ("SetupMode", b"\x00")):
        folder = tmp_path / "efi" / "vars" / ("%s-%s" % (name, GUID))
        folder.mkdir(parents=True)
        (folder / "data").write_bytes(value)
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"))
    assert state == {"enabled": True, "setup_mode": False, "source": "efivars"}
    assert warnings == []


def test_empty_efivars_is_efivarfs_not_mounted_and_the_next_source_tells(tmp_path):
    # the mount point exists without efivarfs mounted on it: no variable at all, not "no Secure Boot"
    (tmp_path / "efi" / "efivars").mkdir(parents=True)
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), Mokutil(out=b"SecureBoot enabled\n"), which_mokutil)
    assert state == {"enabled": True, "setup_mode": False, "source": "mokutil"}
    assert warnings == []


# efivars_state: the one efivarfs folder the driver role's node read is given (module nvidia_driver_info)
@pytest.mark.parametrize("values, expected", [
    (dict(SecureBoot=1, SetupMode=0), {"enabled": True, "setup_mode": False, "source": "efivars"}),
    (dict(SecureBoot=0, SetupMode=1), {"enabled": False, "setup_mode": True, "source": "efivars"}),
    (dict(SecureBoot=0), {"enabled": False, "setup_mode": None, "source": "efivars"}),
    (dict(), {"enabled": False, "setup_mode": None, "source": "efivars"}),
])
def test_efivars_state(tmp_path, values, expected):
    assert sb.efivars_state(os.path.join(efivars(tmp_path, **values), "efivars")) == (expected, [])


def test_efivars_state_without_variables_is_unknown(tmp_path):
    # a BIOS boot or a container (no folder), or efivarfs not mounted (an empty folder)
    assert sb.efivars_state(str(tmp_path / "none")) == (UNKNOWN, [])
    assert sb.efivars_state(str(tmp_path)) == (UNKNOWN, [])


def test_efivars_state_with_a_truncated_variable_is_unknown_with_a_warning(tmp_path):
    folder = os.path.join(efivars(tmp_path, SecureBoot=b"\x06\x00"), "efivars")
    state, warnings = sb.efivars_state(folder)
    assert state == UNKNOWN
    assert len(warnings) == 1 and "SecureBoot-%s: 2 bytes" % GUID in warnings[0]


def test_no_efi_is_unknown_and_asks_no_command(tmp_path):
    mokutil = Mokutil(out=b"EFI variables are not supported on this system\n")
    state, warnings = sb.secure_boot_state(str(tmp_path / "absent"), mokutil, which_mokutil)
    assert state == UNKNOWN and warnings == [] and mokutil.argvs == []


@pytest.mark.parametrize("out, expected", [
    (b"SecureBoot enabled\n", {"enabled": True, "setup_mode": False, "source": "mokutil"}),
    (b"SecureBoot disabled\nPlatform is in Setup Mode\n", {"enabled": False, "setup_mode": True, "source": "mokutil"}),
    (b"SecureBoot enabled\nSecureBoot validation is disabled in shim\n",
     {"enabled": True, "setup_mode": False, "source": "mokutil"}),
    (b"This system doesn't support Secure Boot\n", {"enabled": False, "setup_mode": None, "source": "mokutil"}),
    (b"EFI variables are not supported on this system\n", UNKNOWN),
])
def test_mokutil_when_the_variables_cannot_be_read(tmp_path, out, expected):
    (tmp_path / "efi").mkdir()  # UEFI firmware, but efivarfs is not mounted here
    mokutil = Mokutil(out=out, rc=0 if b"SecureBoot" in out else 255)
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), mokutil, which_mokutil)
    assert state == expected
    assert mokutil.argvs == [["/usr/bin/mokutil", "--sb-state"]]
    assert warnings == []


def test_mokutil_messages_on_stderr_count_too(tmp_path):
    (tmp_path / "efi").mkdir()
    state, dummy = sb.secure_boot_state(str(tmp_path / "efi"),
                                        Mokutil(rc=255, err=b"This system doesn't support Secure Boot\n"),
                                        which_mokutil)
    assert state["enabled"] is False and state["source"] == "mokutil"


def test_mokutil_missing_leaves_it_unknown(tmp_path):
    (tmp_path / "efi").mkdir()
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), Mokutil(), lambda name: None)
    assert state == UNKNOWN and warnings == []


def test_mokutil_that_hangs_is_a_warning(tmp_path):
    (tmp_path / "efi").mkdir()
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), Mokutil(hang=True), which_mokutil)
    assert state == UNKNOWN
    assert warnings == ["Secure Boot state unknown: mokutil --sb-state did not answer within 10 s "
                        "(command_timeout) and was stopped"]


def test_mokutil_failure_is_a_warning(tmp_path):
    (tmp_path / "efi").mkdir()
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), Mokutil(rc=1, err=b"Failed to read SecureBoot\n"),
                                           which_mokutil)
    assert state == UNKNOWN
    assert warnings == ["Secure Boot state unknown: mokutil --sb-state failed (rc=1): Failed to read SecureBoot"]


def test_mokutil_output_that_is_not_utf8(tmp_path):
    (tmp_path / "efi").mkdir()
    state, warnings = sb.secure_boot_state(str(tmp_path / "efi"), Mokutil(out=b"SecureBoot enabled\n\xff\n"),
                                           which_mokutil)
    assert state["enabled"] is True
    assert warnings == ["The output of mokutil is not valid UTF-8 (\\xff); the facts show each invalid byte as U+FFFD"]


def test_a_truncated_variable_falls_through_with_a_warning(tmp_path):
    root = efivars(tmp_path, SecureBoot=b"\x06\x00\x00\x00")
    mokutil = Mokutil(out=b"SecureBoot disabled\n")
    state, warnings = sb.secure_boot_state(root, mokutil, which_mokutil)
    assert state == {"enabled": False, "setup_mode": False, "source": "mokutil"}
    path = os.path.join(root, "efivars", "SecureBoot-" + GUID)
    assert warnings == ["Secure Boot: cannot read the EFI variable %s: 4 bytes, expected the 4 attribute bytes and "
                        "a value" % path]


def test_an_unreadable_variable_falls_through_with_a_warning(tmp_path):
    root = efivars(tmp_path)
    path = os.path.join(root, "efivars", "SecureBoot-" + GUID)
    os.mkdir(path)  # unreadable as a file, also for root
    state, warnings = sb.secure_boot_state(root)
    assert state == UNKNOWN
    assert warnings == ["Secure Boot: cannot read the EFI variable %s: Is a directory" % path]


def test_parse_mokutil_says_nothing_for_other_output():
    assert sb.parse_mokutil("") is None
    assert sb.parse_mokutil("mokutil: unrecognized option\n") is None
