"""How GPU health signals become findings (plugins/module_utils/gpu_health.py).

Each case cites the upstream rule it is derived from:
- DCGM ``modules/health/DcgmHealthWatch.cpp`` (NVIDIA/DCGM): FAIL -> unhealthy, WARN -> degraded; the function
  that holds the rule is named per case; limits from DCGM ``common/DcgmGPUHardwareLimits.h``;
- NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) for the actions;
- k8s-device-plugin ``internal/rm/health.go`` (getDisabledHealthCheckXids) for the Xids ignored by default;
- nvml.h (NVIDIA/go-nvml ``pkg/nvml/nvml.h``) for the NVML values (clock event reason bits, fabric states,
  recovery actions).
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health as gh

DEFAULTS = gh.check_thresholds({})[0]


def only(findings):
    """(severity, action) of the one finding, or None without findings."""
    assert len(findings) <= 1, findings
    return (findings[0]["severity"], findings[0]["action"]) if findings else None


# --- ECC and memory -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    # DcgmHealthWatch.cpp MonitorMemVolatileDbes: "Fail for any volatile DBEs"; catalog Xid 48: reset the GPU
    ({"volatile_uncorrected": 1, "aggregate_uncorrected": 1}, ("unhealthy", "reset_gpu")),
    ({"volatile_uncorrected": 0, "aggregate_uncorrected": 0}, None),
    # DCGM watches the volatile count only: errors before the last reset alone are no finding
    ({"volatile_uncorrected": 0, "aggregate_uncorrected": 7}, None),
    # corrected (single-bit) errors are no health finding in DCGM's memory watch
    ({"volatile_uncorrected": 0, "volatile_corrected": 1000}, None),
])
def test_ecc(values, expected):
    assert only(gh.classify_ecc(values)) == expected


@pytest.mark.parametrize("values, expected", [
    # MonitorMemRowRemapFailures: FAIL when DCGM_FI_DEV_ROW_REMAP_FAILED > 0
    ({"corrected": 0, "uncorrected": 3, "pending": False, "failure": True}, [("unhealthy", "field_diagnostics")]),
    # nvml.h nvmlDeviceGetRemappedRows: a pending remap is applied at the next reset; catalog Xid 63
    ({"corrected": 0, "uncorrected": 1, "pending": True, "failure": False}, [("degraded", "reset_gpu")]),
    # MonitorMemRowRemapUncorrectable: WARN at DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE (512)
    ({"corrected": 0, "uncorrected": 512, "pending": False, "failure": False}, [("degraded", "field_diagnostics")]),
    ({"corrected": 0, "uncorrected": 511, "pending": False, "failure": False}, []),
    ({"corrected": 40, "uncorrected": 0, "pending": False, "failure": False}, []),
])
def test_row_remap(values, expected):
    assert [(f["severity"], f["action"]) for f in gh.classify_row_remap(values, DEFAULTS)] == expected


@pytest.mark.parametrize("values, expected", [
    # MonitorMemSbeDbeRetiredPages: FAIL when SBE + DBE retired pages >= DCGM_LIMIT_MAX_RETIRED_PAGES (63)
    ({"single_bit": 40, "double_bit": 23, "pending": False}, [("unhealthy", "field_diagnostics")]),
    ({"single_bit": 40, "double_bit": 10, "pending": False}, []),
    # MonitorMemSbeDbeRetiredPages: DBE pages above DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT (15) (DCGM also wants a weekly
    # rate this single reading cannot see: a warning here)
    ({"single_bit": 0, "double_bit": 16, "pending": False}, [("degraded", "field_diagnostics")]),
    ({"single_bit": 0, "double_bit": 15, "pending": False}, []),
    # MonitorMemRetiredPending: WARN for a pending retirement (applied at the next reset)
    ({"single_bit": 0, "double_bit": 1, "pending": True}, [("degraded", "reset_gpu")]),
])
def test_retired_pages(values, expected):
    assert [(f["severity"], f["action"]) for f in gh.classify_retired_pages(values, DEFAULTS)] == expected


def test_thresholds_move_the_limits():
    thresholds, problem = gh.check_thresholds({"retired_pages": 10, "row_remap_uncorrectable": "8"})
    assert problem is None
    assert only(gh.classify_retired_pages({"single_bit": 10, "double_bit": 0}, thresholds)) == \
        ("unhealthy", "field_diagnostics")
    assert only(gh.classify_row_remap({"uncorrected": 8}, thresholds)) == ("degraded", "field_diagnostics")


@pytest.mark.parametrize("given, message", [
    ({"retired_pages": 0}, "thresholds.retired_pages must be from 1 to 100000, got 0"),
    ({"temperature_margin": 51}, "thresholds.temperature_margin must be from 0 to 50, got 51"),
    ({"retired_pages": "many"}, "thresholds.retired_pages must be a whole number from 1 to 100000, got 'many'"),
    ({"retired_pages": True}, "thresholds.retired_pages must be a whole number"),
    ({"ecc": 1}, "thresholds.ecc is not a threshold; known: retired_pages, retired_pages_dbe, "
                 "row_remap_uncorrectable, temperature_margin"),
])
def test_bad_thresholds(given, message):
    merged, problem = gh.check_thresholds(given)
    assert merged is None
    assert problem.startswith(message)
    assert "\n" not in problem


# --- driver, clocks, PCIe, temperature, fabric --------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    # DcgmHealthWatch.cpp recovery action switch: NONE healthy, GPU_RESET / NODE_REBOOT / DRAIN_AND_RESET FAIL,
    # DRAIN_P2P WARN (nvml.h nvmlDeviceGpuRecoveryAction_t values 0..4)
    (0, None),
    (1, ("unhealthy", "reset_gpu")),
    (2, ("unhealthy", "reboot_node")),
    (3, ("degraded", "restart_application")),
    (4, ("unhealthy", "reset_gpu")),
    (None, None),
])
def test_recovery_action(value, expected):
    assert only(gh.classify_recovery_action(value)) == expected


@pytest.mark.parametrize("mask, expected", [
    # nvml.h nvmlClocksEventReason*: DCGM MonitorThermal (DCGM_FR_CLOCKS_EVENT_THERMAL) and MonitorPower
    # (DCGM_FR_CLOCKS_EVENT_POWER) WARN on thermal and power-brake slowdowns
    (0x8, ("degraded", "none")),    # HwSlowdown
    (0x20, ("degraded", "none")),   # SwThermalSlowdown
    (0x40, ("degraded", "none")),   # HwThermalSlowdown
    (0x80, ("degraded", "none")),   # HwPowerBrakeSlowdown
    (0x1, None),                    # GpuIdle: normal
    (0x4, None),                    # SwPowerCap: the power limit doing its job
    (0x0, None),
])
def test_clock_event_reasons(mask, expected):
    assert only(gh.classify_clocks(mask)) == expected


def test_clock_reason_names_every_bit():
    reason = gh.classify_clocks(0x48)[0]["reason"]
    assert "hardware slowdown" in reason and "hardware thermal slowdown" in reason and "0x48" in reason


@pytest.mark.parametrize("values, minutes, expected", [
    # a link narrower than its maximum (nvmlDeviceGetCurrPcieLinkWidth < nvmlDeviceGetMaxPcieLinkWidth)
    ({"generation": 4, "generation_max": 4, "width": 8, "width_max": 16, "replays": 0}, 60, ("degraded", "none")),
    # a lower generation alone is the idle power saving of the link, no finding
    ({"generation": 1, "generation_max": 5, "width": 16, "width_max": 16, "replays": 0}, 60, None),
    # DcgmHealthWatch.cpp MonitorPcie: Gen5 allows ceil(1.92 * 16) = 31 replays a minute; over 10 minutes 310
    ({"generation": 5, "generation_max": 5, "width": 16, "width_max": 16, "replays": 311}, 10, ("degraded", "none")),
    ({"generation": 5, "generation_max": 5, "width": 16, "width_max": 16, "replays": 310}, 10, None),
    # Gen3 x16: ceil(0.48 * 16) = 8 a minute; unknown uptime counts as one minute
    ({"generation": 3, "generation_max": 3, "width": 16, "width_max": 16, "replays": 9}, None, ("degraded", "none")),
    ({"generation": None, "generation_max": None, "width": None, "width_max": None, "replays": None}, 1, None),
])
def test_pcie(values, minutes, expected):
    assert only(gh.classify_pcie(values, minutes)) == expected


@pytest.mark.parametrize("values, margin, expected", [
    # DCGM MonitorThermal warns on thermal violations; at or above NVML's slowdown threshold the GPU slows down
    ({"current": 87, "slowdown": 87}, 0, ("degraded", "none")),
    ({"current": 86, "slowdown": 87}, 0, None),
    ({"current": 83, "slowdown": 87}, 5, ("degraded", "none")),
    ({"current": 83, "slowdown": None}, 0, None),
])
def test_temperature(values, margin, expected):
    thresholds = dict(DEFAULTS, temperature_margin=margin)
    assert only(gh.classify_temperature(values, thresholds)) == expected


@pytest.mark.parametrize("values, expected", [
    # DcgmHealthWatch.cpp MonitorFabricFields: fabric manager training in progress WARN, not started FAIL, failed
    # FAIL (nvml.h nvmlGpuFabricState_t: 1 not started, 2 in progress, 3 completed; status: the probe's error)
    ({"state": 1}, ("unhealthy", "none")),
    ({"state": 2}, ("degraded", "none")),
    ({"state": 3, "status": None, "health_mask": 0, "health_summary": 1}, None),
    ({"state": 3, "status": "Unknown Error (NVML_ERROR_UNKNOWN)", "health_summary": None}, ("unhealthy", "reset_gpu")),
    # MonitorFabricFields: FAIL for each NVML_GPU_FABRIC_HEALTH_MASK_* fault: degraded bandwidth (bits 0-1 == 1),
    # route recovery (2-3), route unhealthy (4-5), access timeout recovery (6-7), incorrect configuration (8-11 > 1)
    ({"state": 3, "health_mask": 0x1}, ("unhealthy", "reset_gpu")),
    ({"state": 3, "health_mask": 0x4}, ("unhealthy", "reset_gpu")),
    ({"state": 3, "health_mask": 0x10}, ("unhealthy", "reset_gpu")),
    ({"state": 3, "health_mask": 0x40}, ("unhealthy", "reset_gpu")),
    ({"state": 3, "health_mask": 0x300}, ("unhealthy", "reset_gpu")),
    # "false" (2) in the two-bit fields and "none" (1) for the configuration are no fault
    ({"state": 3, "health_mask": 0x2 | 0x8 | 0x20 | 0x80 | 0x100}, None),
    # nvmlGpuFabricInfo_v3_t healthSummary: 2 unhealthy, 3 limited capacity
    ({"state": 3, "status": None, "health_summary": 2}, ("unhealthy", "reset_gpu")),
    ({"state": 3, "status": None, "health_summary": 3}, ("degraded", "none")),
])
def test_fabric(values, expected):
    assert only(gh.classify_fabric(values)) == expected


@pytest.mark.parametrize("error, expected", [
    # catalog Xid 79 (fallen off the bus): reboot; nvml.h NVML_ERROR_GPU_IS_LOST
    ("NVML_ERROR_GPU_IS_LOST", ("unhealthy", "reboot_node")),
    # nvml.h NVML_ERROR_RESET_REQUIRED: "GPU requires a reset"
    ("NVML_ERROR_RESET_REQUIRED", ("unhealthy", "reset_gpu")),
    ("Unknown Error (NVML_ERROR_UNKNOWN)", ("unhealthy", "reboot_node")),
])
def test_gpu_access(error, expected):
    assert only([gh.classify_access(error)]) == expected


# --- Xids ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("xid, expected", [
    # DcgmHealthWatch.cpp BuildXidMappings, the "devastating" Xids: 48, 74, 79, 95, 119, 120, 140 FAIL; 94 WARN
    (48, ("unhealthy", "reset_gpu")),
    (74, ("unhealthy", "reset_gpu")),
    (79, ("unhealthy", "reboot_node")),   # catalog: fallen off the bus, reboot
    (94, ("degraded", "restart_application")),  # catalog: contained error, restart the application
    (95, ("unhealthy", "reset_gpu")),
    (119, ("unhealthy", "reset_gpu")),
    (120, ("unhealthy", "reset_gpu")),
    (140, ("unhealthy", "reset_gpu")),
    # BuildXidMappings, memory: 63 WARN (pending retirement/remap, reset applies it), 64 FAIL (recording failed)
    (63, ("degraded", "reset_gpu")),
    (64, ("unhealthy", "reset_gpu")),
    # BuildXidMappings, PCIe 38/39/42, thermal 60/61/62, power 54/56/57/58/78, NVLink 67/73/121/137: WARN
    (38, ("degraded", "none")),
    (42, ("degraded", "none")),
    (62, ("degraded", "none")),
    (57, ("degraded", "none")),
    (73, ("degraded", "none")),
    # BuildXidMappings, InfoROM 93: WARN; catalog: field diagnostics
    (93, ("degraded", "field_diagnostics")),
    # catalog: Xid 109 context switch timeout, reset the GPU (the device plugin ignores it by default)
    (109, ("degraded", "reset_gpu")),
    # catalog: Xid 45 is the cleanup after another error, nothing of its own
    (45, None),
])
def test_xid_table(xid, expected):
    assert only(gh.classify_xid(xid, 1, ignored=())) == expected


def test_device_plugin_ignores_application_xids_by_default():
    # k8s-device-plugin internal/rm/health.go getDisabledHealthCheckXids: 13, 31, 43, 45, 68, 109
    assert gh.DEVICE_PLUGIN_IGNORED_XIDS == (13, 31, 43, 45, 68, 109)
    for xid in gh.DEVICE_PLUGIN_IGNORED_XIDS:
        assert gh.classify_xid(xid, 3, ignored=gh.DEVICE_PLUGIN_IGNORED_XIDS) == []
    # DP_ENABLE_HEALTHCHECKS brings one back; here: leave it out of the ignored list
    assert only(gh.classify_xid(13, 1, ignored=())) == ("degraded", "restart_application")


@pytest.mark.parametrize("severity", ["healthy", "degraded", "unhealthy"])
def test_unknown_xid_gets_the_configured_severity(severity):
    found = gh.classify_xid(9999, 2, ignored=(), unknown_severity=severity)
    if severity == "healthy":
        assert found == []
    else:
        assert only(found) == (severity, "none")
        assert "Xid 9999 (2 times)" in found[0]["reason"]


def test_unknown_xid_default_is_degraded():
    assert only(gh.classify_xid(9999, 1, ignored=())) == ("degraded", "none")


@pytest.mark.parametrize("values, result", [
    ([13, "31", " 48 "], ([13, 31, 48], None)),
    ([], ([], None)),
    (["x"], (None, "ignore_xids must list Xid numbers (1 to 99999), got 'x'")),
    ([0], (None, "ignore_xids must list Xid numbers (1 to 99999), got 0")),
])
def test_check_xids(values, result):
    assert gh.check_xids(values, "ignore_xids") == result


# --- a GPU and the node -------------------------------------------------------------------------------------------

HEALTHY_SIGNALS = {
    "ecc": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0, "volatile_corrected": 0, "aggregate_corrected": 0},
    "row_remap": {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False},
    "retired_pages": gh.NOT_SUPPORTED,
    "recovery_action": {"action": 0},
    "clocks": {"reasons": 0},
    "pcie": {"generation": 5, "generation_max": 5, "width": 16, "width_max": 16, "replays": 0},
    "temperature": {"current": 40, "slowdown": 90},
    "fabric": gh.NOT_SUPPORTED,
}


def reading(index=0, **signals):
    return {"index": index, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "pci_bus_id": "00000000:18:00.0",
            "access_error": None, "signals": dict(HEALTHY_SIGNALS, **signals)}


def test_healthy_gpu_lists_what_it_does_not_support():
    gpu = gh.assess_gpu(reading(), DEFAULTS)
    assert (gpu["severity"], gpu["action"], gpu["reason"], gpu["findings"]) == ("healthy", "none", None, [])
    assert gpu["not_supported"] == ["fabric", "retired_pages"]


def test_worst_finding_decides_and_the_action_is_the_most_drastic():
    gpu = gh.assess_gpu(reading(ecc=dict(HEALTHY_SIGNALS["ecc"], volatile_uncorrected=2),
                                row_remap={"corrected": 0, "uncorrected": 2, "pending": False, "failure": True},
                                clocks={"reasons": 0x40}), DEFAULTS)
    assert gpu["severity"] == "unhealthy"
    assert gpu["action"] == "field_diagnostics"
    assert [f["signal"] for f in gpu["findings"]] == ["ecc", "row_remap", "clocks"]


def test_a_signal_nvml_failed_to_read_is_degraded_with_the_reason():
    gpu = gh.assess_gpu(reading(pcie={"error": "Unknown Error (NVML_ERROR_UNKNOWN)"}), DEFAULTS)
    assert gpu["severity"] == "degraded"
    assert gpu["reason"] == "cannot read pcie: Unknown Error (NVML_ERROR_UNKNOWN)"


def test_xids_are_counted_and_ignored_ones_kept():
    events = [{"xid": 48, "pci": "0000:18:00", "message": "a"}, {"xid": 48, "pci": "0000:18:00", "message": "b"},
              {"xid": 13, "pci": "0000:18:00", "message": "c"}]
    gpu = gh.assess_gpu(reading(), DEFAULTS, events)
    assert gpu["xids"] == [{"xid": 13, "count": 1, "ignored": True, "last_message": "c"},
                           {"xid": 48, "count": 2, "ignored": False, "last_message": "b"}]
    assert gpu["reason"] == "Xid 48 (2 times): double-bit ECC error"


def test_node_verdict_names_the_gpu_and_keeps_every_finding():
    lost = {"index": 1, "name": None, "uuid": None, "pci_bus_id": None, "access_error": "NVML_ERROR_GPU_IS_LOST",
            "signals": {}}
    gpus = [gh.assess_gpu(reading(0, clocks={"reasons": 0x8}), DEFAULTS), gh.assess_gpu(lost, DEFAULTS)]
    log = gh.finding("kernel_log", "degraded", "none", "cannot read the kernel log for Xids: denied", "x")
    verdict = gh.summarise(gpus, [log])
    assert verdict["severity"] == "unhealthy"
    assert verdict["action"] == "reboot_node"
    assert verdict["reason"] == "GPU 1: the GPU is lost (fallen off the bus)"
    assert verdict["gpus_by_severity"] == {"healthy": 0, "degraded": 1, "unhealthy": 1}
    assert [(f["gpu"], f["signal"]) for f in verdict["findings"]] == [(1, "gpu"), (None, "kernel_log"), (0, "clocks")]
    assert verdict["findings"][2]["reason"].startswith("GPU 0 (00000000:18:00.0): clocks slowed down")


def test_healthy_node():
    verdict = gh.summarise([gh.assess_gpu(reading(), DEFAULTS)], [])
    assert (verdict["severity"], verdict["action"], verdict["reason"], verdict["findings"]) == \
        ("healthy", "none", None, [])
