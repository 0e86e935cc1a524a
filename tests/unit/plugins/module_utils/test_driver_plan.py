"""The driver role's decisions (plugins/module_utils/driver_plan.py): flavour, branches, holds, Secure Boot,
module parameters, the one version, the summary. Each bad input gives one message before anything changes."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_plan as dp

B200 = {"name": None, "pci_device_id": "0x290110DE", "compute_capability": None}      # PCI source, no driver
H100 = {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x233010DE", "compute_capability": None}
P100 = {"name": None, "pci_device_id": "0x15F810DE", "compute_capability": None}


def facts(*devices, driver=None):
    return {"present": bool(devices), "count": len(devices), "driver_version": driver, "devices": list(devices)}


def plan(gpu_facts, **settings):
    settings.setdefault("default_flavour", "proprietary")
    settings.setdefault("branch", "580")
    settings.setdefault("check_files", False)
    return dp.plan(gpu_facts, settings)


# ------------------------------------------------------------------ flavour
@pytest.mark.parametrize("gpus,default,flavour,why", [
    ([B200, B200], "proprietary", "open", "NVIDIA B200 (0x2901, blackwell) is driven by them only"),
    ([P100], "open", "proprietary", "Tesla P100-PCIE-16GB (0x15F8, pascal) is driven by them only"),
    ([H100], "proprietary", "proprietary", "the distribution's default (the GPUs take either)"),
    ([H100], "open", "open", "the distribution's default (the GPUs take either)"),
    ([], "open", "open", "no GPU model known"),
])
def test_auto_flavour_from_the_hardware(gpus, default, flavour, why):
    result = plan(facts(*gpus), default_flavour=default, kernel_module_type="auto", branch="570")
    assert result["error"] == ""
    assert result["flavour"] == flavour
    assert why in result["flavour_reason"]


def test_the_users_choice_between_turing_and_hopper():
    assert plan(facts(H100), kernel_module_type="open")["flavour"] == "open"
    assert plan(facts(H100), kernel_module_type="proprietary", default_flavour="open")["flavour"] == "proprietary"


@pytest.mark.parametrize("gpus,requested,message", [
    ([B200], "proprietary", "nvidia_driver_kernel_module_type=proprietary cannot drive NVIDIA B200 (0x2901, blackwell): "
                            "it needs the open kernel modules"),
    ([P100], "open", "nvidia_driver_kernel_module_type=open cannot drive Tesla P100-PCIE-16GB (0x15F8, pascal): "
                     "it needs the proprietary kernel modules"),
    ([{"pci_device_id": "0x234210DE"}], "proprietary", "NVIDIA GH200 120GB (0x2342, hopper): it needs the open kernel "
                                                       "modules (Grace Hopper needs the open kernel modules)"),
    ([B200, P100], "auto", "no kernel module flavour drives every GPU of this node: NVIDIA B200 (0x2901, blackwell) "
                           "needs the open modules and Tesla P100-PCIE-16GB (0x15F8, pascal) the proprietary ones"),
    ([H100], "nouveau", "nvidia_driver_kernel_module_type must be auto, open or proprietary (got 'nouveau')"),
])
def test_a_flavour_that_cannot_drive_the_gpus_is_refused(gpus, requested, message):
    result = plan(facts(*gpus), kernel_module_type=requested, branch="575")
    assert message in result["error"]
    assert set(result) == {"error"}


# ------------------------------------------------------------------ branches
@pytest.mark.parametrize("gpus,branch,version,message", [
    ([B200], "535", None, "driver branch 535 cannot drive NVIDIA B200 (0x2901, blackwell): "
                          "the lowest branch that supports it is 570"),
    ([B200], "570", "570.124.06", "driver 570.124.06 cannot drive NVIDIA B200 (0x2901, blackwell): "
                                  "HGX B200 needs 570.133.20 or later"),
    ([P100], "590", None, "driver branch 590 cannot drive Tesla P100-PCIE-16GB (0x15F8, pascal): "
                          "the last branch that supports it is 580"),
    ([{"name": None, "pci_device_id": "0x302110DE"}], "565", None,
     "driver branch 565 cannot drive GPU 0x3021 (rubin): the lowest branch that supports it is at least 570 "
     "(no source this collection cites gives rubin's first branch; 570 is the previous architecture's)"),
    ([{"name": "Tesla T4", "pci_device_id": "0x1EB810DE"}], "510", None,
     "driver branch 510 has no open kernel modules (they start with branch 515)"),
    ([H100], "abc", None, "driver branch 'abc' is not a number"),
    ([H100], "580", "580.x", "nvidia_driver_version '580.x' is not a driver version such as 570.195.03"),
])
def test_a_branch_that_cannot_drive_the_gpus_is_refused(gpus, branch, version, message):
    result = plan(facts(*gpus), branch=branch, version=version, kernel_module_type="open" if branch == "510" else "auto")
    assert result["error"] == message


@pytest.mark.parametrize("gpus,branch,version", [
    ([B200], "570", "570.133.20"), ([B200], "580", None), ([P100], "580", "580.95.05"), ([P100], "535", None),
    ([H100], "535", "535.183.01")])
def test_branches_that_drive_the_gpus(gpus, branch, version):
    assert plan(facts(*gpus), branch=branch, version=version)["error"] == ""


# ------------------------------------------------------------------ install or not
@pytest.mark.parametrize("loaded,version,branch,install", [
    ("535.183.01", "535.183.01", "535", False), ("535.183.01", "535.216.01", "535", True),
    ("535.183.01", None, "535", False), ("535.183.01", None, "550", True), (None, None, "535", True)])
def test_install_when_the_wanted_driver_is_not_loaded(loaded, version, branch, install):
    result = plan(facts(H100, driver=loaded), version=version, branch=branch)
    assert result["install"] is install, result["install_reason"]


def test_no_gpu_means_install():
    assert plan({"present": False, "count": 0}, branch="535")["install"] is True


def test_an_explicit_flavour_other_than_the_loaded_one_installs_again():
    state = {"loaded": {"version": "570.195.03", "flavour": "proprietary"}}
    result = plan(facts(H100, driver="570.195.03"), branch="570", kernel_module_type="open", state=state)
    assert result["install"] is True
    assert "loaded with the proprietary kernel modules, open ones are wanted" in result["install_reason"]
    # auto leaves a loaded flavour alone
    assert plan(facts(H100, driver="570.195.03"), branch="570", state=state)["install"] is False


# ------------------------------------------------------------------ holds
STATE = {"package_manager": "apt", "installed": {"nvidia-driver": "535.183.01-1", "libcuda1": "535.183.01-1"},
         "held": ["nvidia-driver", "libcuda1"]}


def test_a_held_package_at_another_version_is_refused():
    result = plan(facts(H100), branch="535", version="535.216.01", state=STATE, packages=["nvidia-driver"])
    assert result["error"] == (
        "libcuda1 is held at 535.183.01-1 but driver 535.216.01 is asked (2 held package(s) of the driver in all): "
        "upgrade with kubegpu.nvidia.upgrade_driver (it releases and re-takes the hold), or release the hold "
        "(apt-mark unhold) first")
    dnf = dict(STATE, package_manager="dnf")
    assert "(dnf versionlock delete)" in plan(facts(H100), branch="550", state=dnf, packages=["nvidia-driver"])["error"]


def test_held_at_the_asked_version_or_branch_is_fine():
    assert plan(facts(H100), branch="535", version="535.183.01", state=STATE, packages=["nvidia-driver"])["error"] == ""
    assert plan(facts(H100), branch="535", state=STATE, packages=["nvidia-driver"])["error"] == ""


# ------------------------------------------------------------------ Secure Boot
ON = {"enabled": True, "setup_mode": False, "source": "efivars"}
OFF = {"enabled": False, "setup_mode": False, "source": "efivars"}
NONE = {"enabled": None, "setup_mode": None, "source": None}
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
CERT = "-----BEGIN CERTIFICATE-----\nMIID\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("secure_boot,offered,precompiled,mok,result", [
    # Ubuntu ships signed precompiled modules: taken when Secure Boot is on
    (ON, ["open", "proprietary"], "auto", False, (True, False, "the distribution's signed precompiled modules")),
    (OFF, ["open", "proprietary"], "auto", False, (False, False, "DKMS builds the module (Secure Boot is off)")),
    (NONE, ["open"], "auto", False, (False, False, "DKMS builds the module (Secure Boot is not known)")),
    (OFF, ["open"], "true", False, (True, False, "precompiled modules, as nvidia_driver_precompiled asks")),
    # Debian: none; a MOK key signs the DKMS build
    (ON, [], "auto", True, (False, True, "DKMS builds the module and signs it with the MOK key (Secure Boot is on)")),
    (ON, ["open"], "false", True, (False, True, "signs it with the MOK key")),
])
def test_secure_boot_module_source(secure_boot, offered, precompiled, mok, result):
    settings = {"precompiled": precompiled, "precompiled_offered": offered, "kernel_module_type": "open",
                "state": {"secure_boot": secure_boot}}
    if mok:
        settings.update(mok_key=KEY, mok_cert=CERT)
    decided = plan(facts(H100), **settings)
    assert decided["error"] == ""
    assert (decided["precompiled"], decided["sign"]) == result[:2]
    assert result[2] in decided["module_reason"]


def test_secure_boot_state_from_the_facts_when_the_node_read_none():
    gpu = dict(facts(H100), secure_boot={"enabled": True, "setup_mode": False, "source": "mokutil"})
    result = plan(gpu, state={"secure_boot": NONE}, mok_key=KEY, mok_cert=CERT)
    assert result["secure_boot"] == {"enabled": True, "setup_mode": False, "source": "mokutil"}


@pytest.mark.parametrize("settings,message", [
    ({"state": {"secure_boot": ON}, "distribution": "Debian 12.8"},
     "Secure Boot is on and the NVIDIA module would be built by DKMS unsigned on Debian 12.8: give "
     "nvidia_driver_mok_key and nvidia_driver_mok_cert"),
    ({"state": {"secure_boot": ON}, "precompiled": "false", "precompiled_offered": ["proprietary"]},
     "or leave nvidia_driver_precompiled at auto for the distribution's signed precompiled modules"),
    ({"precompiled": "true", "precompiled_offered": [], "distribution": "Debian 12.8"},
     "nvidia_driver_precompiled is true but Debian 12.8 ships no precompiled NVIDIA modules"),
    ({"precompiled": "sometimes"}, "nvidia_driver_precompiled must be auto, true or false (got 'sometimes')"),
    ({"mok_key": KEY}, "nvidia_driver_mok_key is set without nvidia_driver_mok_cert"),
    ({"mok_cert": CERT}, "nvidia_driver_mok_cert is set without nvidia_driver_mok_key"),
    ({"mok_key": CERT, "mok_cert": CERT}, "nvidia_driver_mok_key holds PEM text that is not a private key"),
    ({"mok_key": KEY, "mok_cert": KEY}, "nvidia_driver_mok_cert holds PEM text that is not a certificate"),
])
def test_secure_boot_and_mok_refusals(settings, message):
    result = plan(facts(H100), kernel_module_type="proprietary", **settings)
    assert message in result["error"]


def test_secure_boot_without_a_key_is_fine_when_nothing_is_installed():
    result = plan(facts(H100, driver="580.95.05"), state={"secure_boot": ON})
    assert result["error"] == "" and result["install"] is False


def test_mok_paths_on_the_controller(tmp_path):
    key, cert, vaulted = tmp_path / "mok.key", tmp_path / "mok.der", tmp_path / "vaulted.key"
    key.write_text(KEY)
    cert.write_bytes(b"\x30\x82\x03\x00")
    vaulted.write_text("$ANSIBLE_VAULT;1.1;AES256\n6638\n")
    base = {"check_files": True}
    assert plan(facts(H100), mok_key=str(key), mok_cert=str(cert), **base)["mok"] == {
        "key": "path", "cert": "path", "key_path": "/var/lib/dkms/mok.key", "cert_path": "/var/lib/dkms/mok.pub"}
    # a vault-encrypted file cannot be looked into here: accepted as it is
    assert plan(facts(H100), mok_key=str(vaulted), mok_cert=str(cert), **base)["error"] == ""
    assert plan(facts(H100), mok_key=str(tmp_path / "nope.key"), mok_cert=str(cert), **base)["error"] == (
        "nvidia_driver_mok_key: %s does not exist on the controller" % (tmp_path / "nope.key"))
    assert plan(facts(H100), mok_key=str(cert), mok_cert=str(cert), **base)["error"] == (
        "nvidia_driver_mok_key: %s is not a PEM private key" % cert)
    assert plan(facts(H100), mok_key=str(key), mok_cert=str(key), **base)["error"] == (
        "nvidia_driver_mok_cert: %s is not a certificate (PEM or DER)" % key)


# ------------------------------------------------------------------ module parameters
def test_module_parameters():
    parameters = {"NVreg_EnableGpuFirmware": 0, "NVreg_OpenRmEnableUnsupportedGpus": True,
                  "NVreg_RegistryDwords": "RMFoo=1"}
    result = plan(facts(H100), module_parameters=parameters)
    assert result["modprobe_conf"].splitlines()[1] == (
        "options nvidia NVreg_EnableGpuFirmware=0 NVreg_OpenRmEnableUnsupportedGpus=1 NVreg_RegistryDwords=RMFoo=1")
    assert plan(facts(H100))["modprobe_conf"] == ""


@pytest.mark.parametrize("parameters,message", [
    ({"modeset": 1}, "'modeset' is not an NVreg_* parameter of the nvidia module"),
    ({"NVreg_X": "a b"}, "NVreg_X='a b' is not a value modprobe takes"),
    ({"NVreg_X": None}, "NVreg_X=None is not a value modprobe takes"),
    (["NVreg_X=1"], "nvidia_driver_module_parameters must be a mapping"),
])
def test_bad_module_parameters(parameters, message):
    assert message in plan(facts(H100), module_parameters=parameters)["error"]


# ------------------------------------------------------------------ the one version
OFFERED = {"nvidia-driver": ["535.216.01-1", "535.183.01-1"], "nvidia-kernel-dkms": ["535.216.01-1", "535.183.01-1"],
           "nvidia-fabricmanager-535": ["535.183.01-1"]}


def test_fabric_manager_and_driver_resolve_to_one_version():
    resolved = dp.resolve_version(OFFERED, ["nvidia-driver", "nvidia-kernel-dkms"], "535")
    assert (resolved["version"], resolved["error"]) == ("535.216.01", "")
    # the mirror has no Fabric Manager at 535.216.01: both go in at 535.183.01
    resolved = dp.resolve_version(OFFERED, ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-fabricmanager-535"], "535")
    assert (resolved["version"], resolved["error"]) == ("535.183.01", "")
    assert "Pin: version 535.183.01*" in resolved["apt_preferences"]
    assert dp.resolve_version(OFFERED, ["nvidia-driver"], "535", "535.183.01")["version"] == "535.183.01"


def test_no_common_version_is_one_message():
    result = dp.resolve_version(OFFERED, ["nvidia-driver", "nvidia-fabricmanager-535"], "535", "535.216.01")
    assert result == {"version": None, "error": "driver 535.216.01 is not offered for nvidia-fabricmanager-535 "
                                                "(offered: nvidia-fabricmanager-535: 535.183.01)"}
    result = dp.resolve_version(OFFERED, ["nvidia-driver", "nvidia-fabricmanager-570"], "570")
    assert result["error"] == ("no version of branch 570 is offered for all of nvidia-driver, nvidia-fabricmanager-570 "
                               "(offered: nvidia-driver: 535.183.01, 535.216.01; nvidia-fabricmanager-570: none); "
                               "the driver and Fabric Manager must be at one version")


# ------------------------------------------------------------------ the summary
def node_state(next_built=True, next_version="535.183.01", mok=None, loaded=None, installed=None):
    return {"kernel": {"running": "6.1.0-28-amd64", "next": "6.1.0-31-amd64", "next_source": "the /vmlinuz symlink"},
            "modules": {"6.1.0-31-amd64": {"built": next_built, "version": next_version if next_built else None}},
            "mok": mok or {}, "loaded": loaded or {},
            "installed": {"nvidia-driver": "535.183.01-1", "nvidia-kernel-dkms": "535.183.01-1"}
            if installed is None else installed}


def test_summary_of_a_held_loaded_driver():
    decided = plan(facts(H100, driver="535.183.01"), branch="535")
    got = dp.summary("535.183.01", decided, node_state(loaded={"flavour": "open"}), held=True)
    assert got["text"] == "535.183.01, held, open"
    assert got["reboot_blockers"] == [] and not got["not_built_for_next_kernel"] and not got["secure_boot_blocking"]


def test_summary_not_built_for_the_next_kernel():
    decided = plan(facts(H100), branch="535")
    got = dp.summary("535.183.01", decided, node_state(next_built=False), reboot_pending=True, held=True)
    assert got["text"] == "535.183.01, held, proprietary, reboot pending, not built for the next kernel"
    assert got["reboot_blockers"] == [
        "the nvidia module is not built for kernel 6.1.0-31-amd64, which boots next (the /vmlinuz symlink)"]
    # the option only takes it out of the summary's text, not out of the facts' kernel status
    quiet = dp.summary("535.183.01", decided, node_state(next_built=False), check_next_kernel=False)
    assert "not built" not in quiet["text"] and quiet["next_kernel"]["built"] is False


@pytest.mark.parametrize("installed,loaded,flavour", [
    ({"nvidia-driver": "535.183.01-1", "nvidia-open-kernel-dkms": "535.183.01-1"}, {}, "open"),
    ({"nvidia-driver-580-server-open": "580.95.05-0ubuntu1"}, {}, None),         # another version than reported
    ({"nvidia-driver-535-server": "535.183.01-0ubuntu1"}, {}, "proprietary"),
    ({"libcuda1": "535.183.01-1"}, {}, None),                                       # no package tells the flavour
    ({}, {"flavour": "open"}, "open"),                                              # the loaded module tells
    ({}, {}, None),                                                                 # a driver installed otherwise
])
def test_summary_flavour_is_the_loaded_or_the_installed_one(installed, loaded, flavour):
    got = dp.summary("535.183.01", plan(facts(H100), branch="535"), node_state(installed=installed, loaded=loaded))
    assert got["flavour"] == flavour
    assert got["text"] == "535.183.01" + (", " + flavour if flavour else "")


def test_summary_module_of_another_version_for_the_next_kernel():
    got = dp.summary("535.216.01", plan(facts(H100), branch="535"), node_state(next_version="535.183.01"))
    assert got["not_built_for_next_kernel"] is True
    assert got["reboot_blockers"] == [
        "the nvidia module built for kernel 6.1.0-31-amd64, which boots next, is 535.183.01, not 535.216.01"]


@pytest.mark.parametrize("mok,blocking,words", [
    ({"certificate": "/var/lib/dkms/mok.pub", "enrolled": True, "pending": False}, False, None),
    ({"certificate": "/var/lib/dkms/mok.pub", "enrolled": False, "pending": False, "format": "der"}, True,
     "run 'mokutil --import /var/lib/dkms/mok.pub' on the node, reboot it at its console and enroll the key"),
    ({"certificate": "/var/lib/dkms/mok.pub", "enrolled": False, "pending": True}, True,
     "waits for enrollment: confirm it in MOK Manager at the node's console during the next boot"),
    ({"certificate": "/var/lib/dkms/mok.pub", "enrolled": None, "pending": False}, True, "is not enrolled"),
])
def test_summary_secure_boot_blocking(mok, blocking, words):
    decided = plan(facts(H100), branch="535", mok_key=KEY, mok_cert=CERT, state={"secure_boot": ON})
    got = dp.summary("535.183.01", decided, node_state(mok=mok), reboot_pending=True)
    assert got["secure_boot_blocking"] is blocking
    assert ("Secure Boot blocking" in got["text"]) is blocking
    if words:
        assert words in got["reboot_blockers"][0]


def test_no_secure_boot_blocking_when_secure_boot_is_off():
    decided = plan(facts(H100), branch="535", mok_key=KEY, mok_cert=CERT, state={"secure_boot": OFF})
    assert dp.summary("535.183.01", decided, node_state(mok={"enrolled": False}))["secure_boot_blocking"] is False


# ------------------------------------------------------------------ holds
from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_packages as pkgs  # noqa: E402


def held_state(held, conf=True, **installed):
    packages = {"nvidia-driver": "535.183.01-1", "libcuda1": "535.183.01-1", "nvidia-persistenced": "535.171.04-1"}
    packages.update(installed)
    stack = ["libcuda1", "nvidia-driver"]
    files = {pkgs.UNATTENDED_UPGRADES_CONF: pkgs.unattended_upgrades_conf(stack) if conf else None}
    return {"package_manager": "apt", "installed": packages, "held": held, "files": files}


@pytest.mark.parametrize("state,held,needed", [
    (held_state(["libcuda1", "nvidia-driver"]), True, False),                 # nothing to do: the module is skipped
    (held_state(["nvidia-driver"]), False, True),                             # a library not held
    (held_state(["libcuda1", "nvidia-driver"], conf=False), True, True),      # the blacklist drop-in is missing
    (held_state(["libcuda1", "nvidia-driver", "nvidia-fabricmanager-525"],    # a hold left from another version
                **{"nvidia-fabricmanager-525": "525.147.05-1"}), True, True),
    (held_state(["libcuda1", "nvidia-driver", "nvidia-persistenced"]), True, False),   # its own version: left alone
    ({"package_manager": "apt", "installed": {}, "held": []}, False, False),           # no driver package installed
])
def test_hold_check(state, held, needed):
    check = dp.hold_check(state, ["nvidia-driver", "nvidia-kernel-dkms"], "535.183.01")
    assert (check["held"], check["needed"]) == (held, needed)


def test_hold_check_takes_the_installed_version_and_dnf_needs_no_drop_in():
    state = dict(held_state(["libcuda1", "nvidia-driver"]), package_manager="dnf", files={})
    assert dp.hold_check(state, ["nvidia-driver"]) == {"stack": ["libcuda1", "nvidia-driver"], "held": True,
                                                       "needed": False}
