"""nvidia_driver_info: one read-only run; the package manager stubbed at the module's boundary, EFI
variables from a fake directory (the readers themselves: test_driver_state.py, test_secure_boot.py)."""
import json

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_state
from ansible_collections.kubegpu.nvidia.plugins.module_utils.secure_boot import EFI_GLOBAL_GUID
from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_driver_info

DPKG = ("nvidia-driver\t570.195.03-1\tii \nlibcuda1\t570.195.03-1\thi \ncurl\t7.88.1-10\tii \n"
        "nvidia-container-toolkit\t1.17.8-1\tii \n")
MADISON = " nvidia-driver | 570.195.03-1 | file:/srv/mirror bookworm/non-free amd64 Packages\n"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setattr(ansible_internal, "is_controller", False)


@pytest.fixture
def apt_node(monkeypatch):
    commands = []

    def run_command(argv, **kwargs):
        commands.append(list(argv))
        if argv[0] == "dpkg-query":
            return 0, DPKG, ""
        if argv[:2] == ["apt-mark", "showhold"]:
            return 0, "libcuda1\ncurl\n", ""
        if argv[:2] == ["apt-cache", "madison"]:
            return 0, MADISON, "N: Unable to locate package nvidia-fabricmanager-570\n"
        if argv[-1] == "status":
            return 0, "nvidia-current/570.195.03, 6.1.0-28-amd64, x86_64: installed\n", ""
        raise AssertionError(argv)

    tools = ("dpkg-query", "apt-mark", "apt-cache", "dkms")
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: run_command(argv, **kw))
    monkeypatch.setattr(AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **kw: "/usr/bin/" + name if name in tools else None)
    return commands


def run(capsys, args):
    with patch_module_args(dict(args, _ansible_check_mode=True)):
        with pytest.raises(SystemExit) as caught:
            nvidia_driver_info.main()
    return caught.value.code, json.loads(capsys.readouterr().out)


def test_reads_packages_holds_offers_and_mok(capsys, apt_node, tmp_path):
    efivars = tmp_path / "efivars"
    efivars.mkdir()
    (efivars / ("SecureBoot-" + EFI_GLOBAL_GUID)).write_bytes(b"\x06\x00\x00\x00\x01")
    (efivars / ("MokListRT-" + driver_state.SHIM_GUID)).write_bytes(driver_state.mok_list_variable([b"\x30\x01\x00"]))
    cert = tmp_path / "mok.pub"
    cert.write_bytes(b"\x30\x01\x00")
    conf = tmp_path / "kubegpu-nvidia.conf"
    conf.write_text("options nvidia NVreg_X=1\n")
    rc, result = run(capsys, {"packages": ["curl"], "available": ["nvidia-driver", "nvidia-fabricmanager-570"],
                              "mok_certificate": str(cert), "efivars_dir": str(efivars),
                              "read_files": [str(conf), str(tmp_path / "none")]})
    assert rc == 0, result
    assert result["changed"] is False
    assert result["package_manager"] == "apt"
    # the driver stack and the named packages; not the toolkit
    assert result["installed"] == {"nvidia-driver": "570.195.03-1", "libcuda1": "570.195.03-1", "curl": "7.88.1-10"}
    assert result["held"] == ["curl", "libcuda1"] and result["hold_tool"] is True
    assert result["available"] == {"nvidia-driver": ["570.195.03-1"]}
    assert result["secure_boot"] == {"enabled": True, "setup_mode": None, "source": "efivars"}
    assert result["mok"] == {"certificate": str(cert), "readable": True, "format": "der", "enrolled": True,
                             "pending": False}
    assert result["files"] == {str(conf): "options nvidia NVreg_X=1\n", str(tmp_path / "none"): None}
    assert set(result["kernel"]) == {"running", "next", "next_source", "installed", "dkms"}
    assert result["kernel"]["dkms"] is True
    assert result["kernel"]["next"] in result["modules"]
    # read-only: no command that changes anything
    assert {c[0] for c in apt_node} <= {"dpkg-query", "apt-mark", "apt-cache", "/usr/bin/dkms"}
    assert ["apt-mark", "showhold"] in apt_node


def test_a_failing_package_query_is_one_message(capsys, monkeypatch):
    monkeypatch.setattr(AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **kw: "/usr/bin/" + name if name == "dpkg-query" else None)
    monkeypatch.setattr(AnsibleModule, "run_command",
                        lambda self, argv, **kw: (2, "", "dpkg-query: error: parsing file '/var/lib/dpkg/status'\n"))
    rc, result = run(capsys, {})
    assert rc == 1
    assert result["msg"] == ("listing the installed packages failed (dpkg-query -W): dpkg-query: error: parsing file "
                             "'/var/lib/dpkg/status'")
    assert result["error_kind"] == "runtime"
