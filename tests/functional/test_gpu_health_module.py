"""kubegpu.nvidia.nvidia_gpu_health run by ansible-playbook over the real pynvml and the fake libnvidia-ml.so.1.

As in test_gpu_facts_module.py, one playbook run covers every case: each task points LD_LIBRARY_PATH at the fake
library and FAKENVML_CONFIG at a profile through its `environment:`. Kernel logs are files of Xid lines, or the
output of a stand-in `journalctl` put first on PATH (it records its arguments). What each GPU should read comes
from the profiles themselves (tests/support/fakenvml/profile.py).
"""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

import ansible_run
from fakenvml import xidlog
from fakenvml.profile import PROFILES, load_profile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAT = shutil.which("cat")  # the stand-in journalctl runs with a PATH that lacks the folders of the real one

HEADER = "driver_version = 570.86.15\ncuda_driver_version = 12080\n"


def gpu_section(name, uuid_tail, bus, device_id, cc, extra=""):
    return ("[gpu]\nname = %s\nuuid = GPU-3b041641-1788-44f2-a60d-%012x\nmemory_total_mib = 40960\n"
            "pci_bus_id = 00000000:%s:00.0\npci_device_id = %s\ncompute_capability = %s\n%s"
            % (name, uuid_tail, bus, device_id, cc, extra))


PROFILE_TEXTS = {
    # retired pages (Turing) and the driver's recovery action (Ampere), PCIe replays, a signal not supported
    "memory": HEADER
    + gpu_section("Tesla T4", 1, "1E", "0x1EB810DE", "7.5", "retired_pages_dbe = 16\nretired_pages_pending = 1\n")
    + gpu_section("NVIDIA A100-SXM4-40GB", 2, "07", "0x20B010DE", "8.0",
                  "recovery_action = node_reboot\npcie_replay_counter = 100000000\n"
                  "not_supported = nvmlDeviceGetTemperatureThreshold\n")
    + gpu_section("Tesla T4", 3, "0A", "0x1EB810DE", "7.5", "retired_pages_sbe = 70\n"),
    # one GPU waits for a reset, the other is read all the same
    "reset": HEADER
    + gpu_section("NVIDIA A100-SXM4-40GB", 4, "07", "0x20B010DE", "8.0", "gpu_state = reset_required\n")
    + gpu_section("NVIDIA A100-SXM4-40GB", 5, "0A", "0x20B010DE", "8.0", "clocks_event_reasons = 0x80\n"),
}

KERNEL_LOG = (
    "2026-11-27T00:10:00+0000 node1 kernel: NVRM: Xid (PCI:0000:2a:00): 48, pid=1234, name=python3, DBE (0x1)\n"
    "2026-11-27T00:10:01+0000 node1 kernel: NVRM: Xid (PCI:0000:2a:00): 48, pid=1234, name=python3, DBE (0x2)\n"
    "2026-11-27T00:11:00+0000 node1 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=99, Graphics Exception\n"
    "2026-11-27T00:12:00+0000 node1 kernel: NVRM: Xid (PCI:0000:18:00): 9999, pid=1, a future Xid\n"
    "2026-11-27T00:13:00+0000 node1 kernel: NVRM: Xid (PCI:0000:c1:00): 79, pid=1, GPU has fallen off the bus.\n"
    "2026-11-27T00:14:00+0000 node1 kernel: eth0: link up\n"
)

# name -> (profile name or text key, module arguments, extra: journal output / check mode / PATH stand-ins)
CASES = {
    "healthy": ("h100x8", {"kernel_log": "none"}, {}),
    "healthy-t4": ("t4x1", {"kernel_log": "none"}, {}),
    # the lab's T4 node after `scripts/lab.sh xid kubegpu-lab-t4 79` (tests/support/fakenvml/xidlog.py)
    "lab-t4-xid79": ("t4x1", {"kernel_log": "file", "kernel_log_path": "@lab-t4.log"}, {}),
    "faults": ("h100x8-faults", {"kernel_log": "file", "kernel_log_path": "@kernel.log"}, {}),
    "faults-check-mode": ("h100x8-faults", {"kernel_log": "file", "kernel_log_path": "@kernel.log"},
                          {"check_mode": True}),
    "count-every-xid": ("h100x8", {"kernel_log": "file", "kernel_log_path": "@kernel.log", "ignore_xids": []}, {}),
    "unknown-xid-unhealthy": ("h100x8", {"kernel_log": "file", "kernel_log_path": "@kernel.log",
                                         "unknown_xid_severity": "unhealthy"}, {}),
    "memory": ("@memory", {"kernel_log": "none"}, {}),
    "reset": ("@reset", {"kernel_log": "none"}, {}),
    "journal-xids": ("h100x8", {"kernel_log": "journal", "since": "2026-11-27T00:00:00Z"}, {"journal": "xids"}),
    "journal-absent": ("h100x8", {"kernel_log": "journal"}, {"journal": "absent"}),
    "journal-not-installed": ("h100x8", {"kernel_log": "journal"}, {"journal": "none"}),
    "log-unreadable": ("h100x8", {"kernel_log": "file", "kernel_log_path": "@"}, {}),
    "driver-not-loaded": ("driver-not-loaded", {"kernel_log": "none"}, {}),
    "hang": ("hang", {"kernel_log": "none", "nvml_timeout": 1}, {}),
    "stricter-thresholds": ("@memory", {"kernel_log": "none", "thresholds": {"retired_pages": 16}}, {}),
    "bad-threshold": ("h100x8", {"thresholds": {"retired_pages": 0}}, {}),
    "unknown-threshold": ("h100x8", {"thresholds": {"ecc": 1}}, {}),
    "bad-since": ("h100x8", {"since": "yesterday"}, {}),
    "bad-xid": ("h100x8", {"ignore_xids": ["thirteen"]}, {}),
    "file-without-path": ("h100x8", {"kernel_log": "file"}, {}),
    "path-without-file": ("h100x8", {"kernel_log": "journal", "kernel_log_path": "/var/log/kern.log"}, {}),
    "bad-timeout": ("h100x8", {"nvml_timeout": 0}, {}),
    "bad-severity": ("h100x8", {"unknown_xid_severity": "grave"}, {}),
}

JOURNAL_SCRIPTS = {
    "xids": "#!/bin/sh\necho \"$@\" > %(marker)s\n%(cat)s %(log)s\n",
    "absent": "#!/bin/sh\necho \"$@\" > %(marker)s\necho 'No journal files were found.' >&2\nexit 0\n",
}


@pytest.fixture(scope="session")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def results(libdir, tmp_path_factory):
    """Run the playbook once; return {case: task result} and what the journalctl stand-ins were called with."""
    tmp = tmp_path_factory.mktemp("gpu_health")
    log = tmp / "kernel.log"
    log.write_text(KERNEL_LOG)
    markers = {}
    tasks = []
    clean_path = ":".join(p for p in os.environ["PATH"].split(":") if not (pathlib.Path(p) / "journalctl").exists())
    for name, (profile, args, extra) in CASES.items():
        if profile.startswith("@"):
            config = tmp / ("%s.conf" % profile[1:])
            config.write_text(PROFILE_TEXTS[profile[1:]])
        else:
            config = PROFILES / ("%s.conf" % profile)
        args = dict(args)
        if args.get("kernel_log_path") == "@kernel.log":
            args["kernel_log_path"] = str(log)
        elif args.get("kernel_log_path") == "@lab-t4.log":
            args["kernel_log_path"] = str(tmp / "lab-t4.log")
            (tmp / "lab-t4.log").write_text(xidlog.render("t4x1", [79]))
        elif args.get("kernel_log_path") == "@":
            args["kernel_log_path"] = str(tmp)  # a folder: cannot be read as a log
        env = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(config), "PATH": clean_path}
        journal = extra.get("journal")
        if journal in JOURNAL_SCRIPTS:
            folder = tmp / ("bin-" + name)
            folder.mkdir()
            markers[name] = folder / "called"
            script = folder / "journalctl"
            script.write_text(JOURNAL_SCRIPTS[journal] % {"marker": markers[name], "log": log, "cat": CAT})
            script.chmod(0o755)
            env["PATH"] = "%s:%s" % (folder, clean_path)
        task = {"name": name, "kubegpu.nvidia.nvidia_gpu_health": args, "environment": env, "ignore_errors": True}
        if extra.get("check_mode"):
            task["check_mode"] = True
        tasks.append(task)
    playbook = tmp / "health.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    found = run.tasks()
    assert set(found) == set(CASES), run.stderr
    return {"tasks": found, "markers": markers, "stderr": run.stderr}


def health_of(results, name):
    result = results["tasks"][name]
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    return result["health"]


def by_signal(gpu):
    return {finding["signal"]: (finding["severity"], finding["action"]) for finding in gpu["findings"]}


# --- healthy GPUs -------------------------------------------------------------------------------------------------

def test_healthy_node_reads_every_signal(results):
    health = health_of(results, "healthy")
    profile = load_profile("h100x8")
    assert (health["severity"], health["action"], health["reason"], health["findings"]) == ("healthy", "none", None, [])
    assert health["gpus_by_severity"] == {"healthy": 8, "degraded": 0, "unhealthy": 0}
    assert health["driver_version"] == profile["driver_version"]
    for gpu, expected in zip(health["gpus"], profile["gpus"]):
        assert (gpu["uuid"], gpu["pci_bus_id"], gpu["name"]) == (expected["uuid"], expected["pci_bus_id"],
                                                                 expected["name"])
        assert gpu["signals"]["ecc"] == {"volatile_uncorrected": 0, "aggregate_uncorrected": 0,
                                         "volatile_corrected": 0, "aggregate_corrected": 0}
        assert gpu["signals"]["row_remap"] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
        assert gpu["signals"]["pcie"] == {"generation": 5, "generation_max": 5, "width": 16, "width_max": 16,
                                          "replays": 0}
        assert gpu["signals"]["temperature"] == {"current": 40, "slowdown": 90}
        assert gpu["signals"]["clocks"] == {"reasons": 0}
        assert gpu["signals"]["recovery_action"] == {"action": 0}
        # Hopper remaps rows instead of retiring pages; no NVSwitch in this profile
        assert gpu["not_supported"] == ["fabric", "retired_pages"]
        assert gpu["signals"]["retired_pages"] == "not supported"
    assert health["kernel_log"]["source"] == "none"


def test_turing_retires_pages_and_has_no_row_remapper(results):
    gpu = health_of(results, "healthy-t4")["gpus"][0]
    assert gpu["severity"] == "healthy"
    assert gpu["signals"]["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpu["not_supported"] == ["fabric", "row_remap"]


def test_the_lab_xid_line_reaches_its_gpu(results):
    health = health_of(results, "lab-t4-xid79")
    assert (health["severity"], health["action"]) == ("unhealthy", "reboot_node")
    assert health["reason"].startswith("GPU 0 (00000000:00:1E.0): Xid 79")
    assert health["gpus"][0]["xids"] == [{"xid": 79, "count": 1, "ignored": False,
                                          "last_message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."}]
    assert (health["kernel_log"]["xid_events"], health["kernel_log"]["stray_xids"]) == (1, [])


# --- one fault per GPU --------------------------------------------------------------------------------------------

def test_each_fault_is_found_on_its_gpu(results):
    health = health_of(results, "faults")
    gpus = health["gpus"]
    assert [gpu["severity"] for gpu in gpus] == ["degraded", "unhealthy", "degraded", "unhealthy", "unhealthy",
                                                 "degraded", "degraded", "degraded"]
    # GPU 0: healthy signals, but an Xid this collection does not know (9999) in the log; Xid 13 ignored
    assert by_signal(gpus[0]) == {"xid": ("degraded", "none")}
    assert [(x["xid"], x["ignored"]) for x in gpus[0]["xids"]] == [(13, True), (9999, False)]
    # GPU 1: volatile uncorrectable ECC errors and Xid 48 twice
    assert by_signal(gpus[1]) == {"ecc": ("unhealthy", "reset_gpu"), "xid": ("unhealthy", "reset_gpu")}
    assert gpus[1]["xids"] == [{"xid": 48, "count": 2, "ignored": False,
                                "last_message": "pid=1234, name=python3, DBE (0x2)"}]
    assert gpus[1]["signals"]["ecc"]["volatile_uncorrected"] == 2
    # GPU 2: pending remap; GPU 3: remap failure
    assert by_signal(gpus[2]) == {"row_remap": ("degraded", "reset_gpu")}
    assert by_signal(gpus[3]) == {"row_remap": ("unhealthy", "field_diagnostics")}
    # GPU 4: lost; nothing else could be read, the others were
    assert gpus[4]["signals"] == {} and gpus[4]["uuid"] is None
    assert by_signal(gpus[4]) == {"gpu": ("unhealthy", "reboot_node")}
    assert gpus[4]["reason"] == "the GPU is lost (fallen off the bus)"
    # GPU 5: x8 link of x16
    assert by_signal(gpus[5]) == {"pcie": ("degraded", "none")}
    assert gpus[5]["reason"] == "PCIe link x8 of x16 (Gen3 of Gen5)"
    # GPU 6: thermal slowdown at 91 C (slowdown at 87 C)
    assert by_signal(gpus[6]) == {"clocks": ("degraded", "none"), "temperature": ("degraded", "none")}
    # GPU 7: NVSwitch fabric registration still in progress; the others completed
    assert by_signal(gpus[7]) == {"fabric": ("degraded", "none")}
    assert gpus[0]["signals"]["fabric"] == {"state": 3, "status": None, "health_mask": 0, "health_summary": 1}
    # the node: worst finding first, every finding kept, the stray Xid 79 of a PCI address no GPU has
    assert (health["severity"], health["action"]) == ("unhealthy", "field_diagnostics")
    assert health["reason"] == "GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left)"
    assert health["gpus_by_severity"] == {"healthy": 0, "degraded": 5, "unhealthy": 3}
    stray = [f for f in health["findings"] if f["gpu"] is None]
    assert [(f["signal"], f["severity"], f["action"]) for f in stray] == [("xid", "unhealthy", "reboot_node")]
    assert stray[0]["reason"].startswith("PCI 0000:c1:00 (no GPU NVML lists): Xid 79")
    assert health["kernel_log"] == {"source": "file", "read": True, "problem": None, "since": "boot",
                                    "xid_events": 5, "stray_xids": [
                                        {"xid": 79, "count": 1, "ignored": False, "pci": "0000:c1:00",
                                         "last_message": "pid=1, GPU has fallen off the bus."}]}
    for finding in health["findings"]:
        assert finding["source"] and "\n" not in finding["reason"]


def test_check_mode_reads_the_same(results):
    assert health_of(results, "faults-check-mode") == health_of(results, "faults")


def test_ignore_xids_empty_counts_application_errors(results):
    gpu = health_of(results, "count-every-xid")["gpus"][0]
    assert [f["reason"] for f in gpu["findings"]] == [
        "Xid 13: graphics engine exception (an application error)",
        "Xid 9999: not in this collection's Xid table, see NVIDIA's Xid catalog"]
    assert health_of(results, "count-every-xid")["ignored_xids"] == []


def test_unknown_xid_severity_is_configurable(results):
    gpu = health_of(results, "unknown-xid-unhealthy")["gpus"][0]
    assert by_signal(gpu) == {"xid": ("unhealthy", "none")}


def test_retired_pages_recovery_action_and_replays(results):
    gpus = health_of(results, "memory")["gpus"]
    t4, a100, worn = gpus
    assert t4["signals"]["retired_pages"] == {"single_bit": 0, "double_bit": 16, "pending": True}
    assert [(f["signal"], f["severity"], f["action"]) for f in t4["findings"]] == [
        ("retired_pages", "degraded", "field_diagnostics"), ("retired_pages", "degraded", "reset_gpu")]
    assert by_signal(a100)["recovery_action"] == ("unhealthy", "reboot_node")
    assert by_signal(a100)["pcie"] == ("degraded", "none")
    # the slowdown threshold is not supported: the temperature is still read, and no temperature finding
    assert a100["signals"]["temperature"] == {"current": 40, "slowdown": None}
    assert worn["signals"]["retired_pages"]["single_bit"] == 70
    assert by_signal(worn) == {"retired_pages": ("unhealthy", "field_diagnostics")}


def test_thresholds_change_the_verdict(results):
    t4 = health_of(results, "stricter-thresholds")["gpus"][0]
    assert ("retired_pages", "unhealthy", "field_diagnostics") in [
        (f["signal"], f["severity"], f["action"]) for f in t4["findings"]]
    assert health_of(results, "stricter-thresholds")["thresholds"]["retired_pages"] == 16


def test_a_gpu_waiting_for_a_reset_does_not_hide_the_other(results):
    health = health_of(results, "reset")
    first, second = health["gpus"]
    assert first["pci_bus_id"] == "00000000:07:00.0"  # identity still readable
    assert by_signal(first) == {"gpu": ("unhealthy", "reset_gpu")}
    assert by_signal(second) == {"clocks": ("degraded", "none")}
    assert "hardware power brake slowdown" in second["reason"]
    assert second["signals"]["ecc"]["volatile_uncorrected"] == 0


# --- kernel logs --------------------------------------------------------------------------------------------------

def test_journal_xids_since_a_time(results):
    health = health_of(results, "journal-xids")
    assert results["markers"]["journal-xids"].read_text().split() == [
        "-k", "-o", "short-iso", "--no-pager", "-q", "--since", "@1795737600"]
    assert health["kernel_log"]["source"] == "journal" and health["kernel_log"]["since"] == "2026-11-27T00:00:00Z"
    assert health["gpus"][1]["xids"][0]["xid"] == 48
    assert by_signal(health["gpus"][1]) == {"xid": ("unhealthy", "reset_gpu")}


@pytest.mark.parametrize("name, problem", [
    ("journal-absent", "journalctl -k: No journal files were found."),
    ("journal-not-installed", "journalctl is not installed (no systemd journal)"),
    ("log-unreadable", "Is a directory"),
])
def test_unreadable_kernel_log_is_a_degraded_finding(results, name, problem):
    health = health_of(results, name)
    assert health["severity"] == "degraded"
    assert health["gpus_by_severity"] == {"healthy": 8, "degraded": 0, "unhealthy": 0}
    assert problem in health["kernel_log"]["problem"]
    assert health["kernel_log"]["read"] is False
    (finding,) = health["findings"]
    assert (finding["signal"], finding["severity"], finding["action"], finding["gpu"]) == (
        "kernel_log", "degraded", "none", None)
    assert finding["reason"].startswith("cannot read the kernel log for Xids: ") and problem in finding["reason"]


# --- NVML unusable ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, reason, action", [
    ("driver-not-loaded", "NVML could not be initialised: Driver Not Loaded", "none"),
    ("hang", "NVML did not answer within 1 s (nvml_timeout)", "reboot_node"),
])
def test_nvml_that_cannot_be_used_is_an_unhealthy_finding(results, name, reason, action):
    health = health_of(results, name)
    assert health["gpus"] == [] and health["driver_version"] is None
    assert (health["severity"], health["action"]) == ("unhealthy", action)
    assert health["reason"].startswith(reason)


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("bad-threshold", "thresholds.retired_pages must be from 1 to 100000, got 0"),
    ("unknown-threshold", "thresholds.ecc is not a threshold; known: retired_pages, retired_pages_dbe, "
                          "row_remap_uncorrectable, temperature_margin"),
    ("bad-since", "since must be an ISO 8601 time such as 2026-11-27T01:00:00Z, got 'yesterday'"),
    ("bad-xid", "ignore_xids must list Xid numbers (1 to 99999), got 'thirteen'"),
    ("file-without-path", "kernel_log is file but all of the following are missing: kernel_log_path"),
    ("path-without-file", "kernel_log_path is only read with kernel_log=file (kernel_log is journal)"),
    ("bad-timeout", "nvml_timeout must be at least 1 (seconds), got 0"),
    ("bad-severity", "value of unknown_xid_severity must be one of: healthy, degraded, unhealthy, got: grave"),
])
def test_bad_input_is_one_line(results, name, message):
    result = results["tasks"][name]
    assert result["failed"] is True
    assert result["msg"] == message
    assert result["error_kind"] == "input"
    assert "Traceback" not in str(result.get("exception", "")) and "health" not in result


# --- the same read as a facts subset (nvidia_gpu_facts, gather_subset health) ------------------------------------

@pytest.fixture(scope="module")
def facts_runs(libdir, tmp_path_factory):
    """nvidia_gpu_health and nvidia_gpu_facts with gather_subset [health] on the same profiles, in one playbook."""
    tmp = tmp_path_factory.mktemp("gpu_health_facts")
    log = tmp / "kernel.log"
    log.write_text(KERNEL_LOG)
    options = {"kernel_log": "file", "kernel_log_path": str(log)}
    faults = {"LD_LIBRARY_PATH": str(libdir / "full"), "FAKENVML_CONFIG": str(PROFILES / "h100x8-faults.conf")}
    no_driver = dict(faults, FAKENVML_CONFIG=str(PROFILES / "driver-not-loaded.conf"))
    tasks = [
        {"name": "module", "kubegpu.nvidia.nvidia_gpu_health": options, "environment": faults},
        {"name": "facts", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["health"], "health_options": options},
         "environment": faults},
        {"name": "facts-and-host-facts", "kubegpu.nvidia.nvidia_gpu_facts": {
            "gather_subset": ["!all", "!min", "distribution", "health"], "health_options": options},
         "environment": faults},
        {"name": "no-driver", "kubegpu.nvidia.nvidia_gpu_facts": {"gather_subset": ["health"]},
         "environment": no_driver},
        {"name": "without-health", "kubegpu.nvidia.nvidia_gpu_facts": {"health_options": options},
         "environment": faults, "ignore_errors": True},
        {"name": "bad-option", "kubegpu.nvidia.nvidia_gpu_facts": {
            "gather_subset": ["health"], "health_options": {"kernel_log": "dmesg"}},
         "environment": faults, "ignore_errors": True},
    ]
    playbook = tmp / "facts.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", timeout=300, cwd=str(tmp),
                                   env={"ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".cache" / "collections"),
                                        "ANSIBLE_NOCOLOR": "1"})
    return run.tasks()


def test_the_facts_subset_reads_what_the_module_reads(facts_runs):
    module = facts_runs["module"]["health"]
    for name in ("facts", "facts-and-host-facts"):
        facts = facts_runs[name]["ansible_facts"]
        assert facts["nvidia_gpu"]["health"] == module, name
    # the lost GPU 4 of the profile makes the GPU facts fall back from NVML; the health still reads every GPU and
    # says it (a lost GPU must not read as "no GPU, health unknown")
    facts = facts_runs["facts"]["ansible_facts"]["nvidia_gpu"]
    assert facts["source"] != "nvml"
    assert facts["health"]["severity"] == "unhealthy"
    assert ("gpu", 4) in [(f["signal"], f["gpu"]) for f in facts["health"]["findings"]]
    # host facts beside it in the same module run; the health entry is not a host fact subset
    assert facts_runs["facts-and-host-facts"]["ansible_facts"]["ansible_distribution"]
    assert "ansible_distribution" not in facts_runs["facts"]["ansible_facts"]


def test_no_nvml_means_unknown_not_unhealthy(facts_runs):
    # no driver loaded (as before the first driver install): not a reason to taint the node
    facts = facts_runs["no-driver"]["ansible_facts"]["nvidia_gpu"]
    health = facts["health"]
    assert health["severity"] == "unknown" and health["findings"] == []
    if facts["present"]:  # GPUs on the PCI bus
        assert health["reason"].startswith("NVML cannot be used (")
    else:
        assert health["reason"] == "no GPU found"


@pytest.mark.parametrize("name, message", [
    ("without-health", "health_options is only read when gather_subset lists health"),
    ("bad-option", "health_options: value of kernel_log must be one of: auto, journal, kmsg, file, none, got: dmesg"),
])
def test_health_options_refused_in_one_line(facts_runs, name, message):
    result = facts_runs[name]
    assert result["failed"] is True and result["msg"] == message and result["error_kind"] == "input"
