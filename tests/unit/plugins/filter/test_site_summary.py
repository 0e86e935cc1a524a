"""The site summary: each column worked out from what the plays left, and the table it prints."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.site_summary import site_summary, table, tenants as tenant_table

H100 = {"present": True, "count": 8, "driver_version": "535.183.01",
        "devices": [{"name": "NVIDIA H100 80GB HBM3"}] * 8}
MIXED = {"present": True, "count": 2, "driver_version": "550.54.15",
         "devices": [{"name": "Tesla T4"}, {"name": "NVIDIA A100-SXM4-40GB"}]}


def hostvars(**hosts):
    return dict((name, dict(ansible_facts={"nvidia_gpu": gpu} if gpu is not None else {}, **extra))
                for name, (gpu, extra) in hosts.items())


def test_a_gpu_host_row_reads_every_play():
    hv = hostvars(gpu01=(H100, {"nvidia_container_toolkit_selected_runtimes": ["containerd"]}))
    labelled = [{"name": "gpu01", "changed": True, "added": {"a": "1", "b": "2"}, "removed": ["c"],
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}]
    capacity = [{"host": "gpu01", "allocatable": 8, "expected": 8, "ok": True}]
    validation = [{"node": "gpu01", "passed": True, "phase": "Succeeded", "reason": "Test PASSED"}]
    rows = site_summary(["gpu01"], hv, matches={"gpu01": "gpu01"}, labelled=labelled, capacity=capacity,
                        validation=validation)
    assert rows == [{"host": "gpu01", "node": "gpu01", "gpus": "8 x NVIDIA H100 80GB HBM3",
                     "driver": "535.183.01", "runtime": "containerd: nvidia", "labels": "set +2 -1, tainted",
                     "allocatable": "8", "validation": "passed", "health": "not read", "health_findings": []}]


def test_in_check_mode_labels_say_what_would_be_set():
    labelled = [{"name": "gpu01", "changed": True, "added": {"a": "1"}, "removed": [], "taints": []}]
    (row,) = site_summary(["gpu01"], hostvars(gpu01=(H100, {})), matches={"gpu01": "gpu01"}, labelled=labelled,
                          check_mode=True)
    assert row["labels"] == "would set +1 -0"


def test_a_host_whose_node_has_another_name_shows_both():
    rows = site_summary(["gpu01"], hostvars(gpu01=(H100, {})), matches={"gpu01": "ip-10-0-3-12"})
    assert rows[0]["node"] == "gpu01 (ip-10-0-3-12)"


@pytest.mark.parametrize("gpu, gpus, validation", [
    (None, "unknown (no facts)", "not run"),
    ({"present": False, "count": 0, "devices": []}, "none (CPU-only)", "skipped"),
])
def test_hosts_without_facts_or_gpus(gpu, gpus, validation):
    row = site_summary(["cpu01"], hostvars(cpu01=(gpu, {})))[0]
    assert row == {"host": "cpu01", "node": "cpu01", "gpus": gpus, "driver": "-", "runtime": "-", "labels": "-",
                   "allocatable": "-", "validation": validation, "health": "-", "health_findings": []}


ROW_REMAP = {"gpu": 3, "signal": "row_remap", "severity": "unhealthy", "action": "field_diagnostics",
             "reason": "GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left)"}
PCIE = {"gpu": 5, "signal": "pcie", "severity": "degraded", "action": "none",
        "reason": "GPU 5 (00000000:AB:00.0): PCIe link x8 of x16 (Gen3 of Gen5)"}
SICK = {"severity": "unhealthy", "action": "field_diagnostics", "reason": ROW_REMAP["reason"],
        "findings": [ROW_REMAP, PCIE]}


@pytest.mark.parametrize("health, gate, check_mode, text", [
    (SICK, [{"name": "gpu01", "taint": "added"}], False,
     "unhealthy: GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left) (run field diagnostics); tainted"),
    (SICK, [{"name": "gpu01", "taint": "added"}], True,
     "unhealthy: GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left) (run field diagnostics); "
     "would be tainted"),
    (SICK, None, False,
     "unhealthy: GPU 3 (00000000:5D:00.0): a row remap failed (no spare row left) (run field diagnostics); "
     "gate not run"),
    ({"severity": "healthy", "action": "none", "reason": None, "findings": []}, [{"name": "gpu01", "taint": "removed"}],
     False, "healthy; untainted"),
    ({"severity": "degraded", "action": "none", "reason": PCIE["reason"], "findings": [PCIE]}, [], False,
     "degraded: GPU 5 (00000000:AB:00.0): PCIe link x8 of x16 (Gen3 of Gen5)"),
    ({"severity": "unhealthy", "action": "reset_gpu", "reason": "GPU 1: ECC", "findings": []},
     [{"name": "gpu01", "taint": "foreign"}], False, "unhealthy: GPU 1: ECC (reset the GPU); not tainted: foreign taint"),
    (None, None, False, "not read"),
])
def test_health_column_says_the_first_reason_the_action_and_what_the_gate_did(health, gate, check_mode, text):
    gpu = dict(H100, health=health) if health else H100
    row = site_summary(["gpu01"], hostvars(gpu01=(gpu, {})), matches={"gpu01": "gpu01"}, health=gate,
                       check_mode=check_mode)[0]
    assert row["health"] == text
    # the JSON summary carries every finding
    assert row["health_findings"] == ((health or {}).get("findings") or [])


def test_health_column_finds_the_gate_result_by_host_without_a_match():
    # health.yml runs no labels dry run: the gate's own match (its results name the host) is what the row reads
    gpu = dict(H100, health=SICK)
    row = site_summary(["gpu01"], hostvars(gpu01=(gpu, {})), health=[{"name": "ip-10-0-3-12", "host": "gpu01",
                                                                     "taint": "kept"}])[0]
    assert row["health"].endswith("; tainted")


def test_plays_that_did_not_run_say_so():
    row = site_summary(["gpu01"], hostvars(gpu01=(H100, {})), matches={"gpu01": "gpu01"})[0]
    assert (row["runtime"], row["labels"], row["allocatable"], row["validation"]) == (
        "not run", "not run", "not checked", "not run")


def test_a_gpu_host_without_a_node_in_the_labels_result():
    row = site_summary(["gpu01"], hostvars(gpu01=(H100, {})), matches={}, labelled=[])[0]
    assert row["labels"] == "no node"


def test_unchanged_labels_and_two_gpu_models():
    hv = hostvars(gpu02=(MIXED, {"nvidia_container_toolkit_selected_runtimes": []}))
    labelled = [{"name": "gpu02", "changed": False, "taints": []}]
    row = site_summary(["gpu02"], hv, matches={"gpu02": "gpu02"}, labelled=labelled)[0]
    assert (row["gpus"], row["labels"], row["runtime"]) == ("2 x Tesla T4 + NVIDIA A100-SXM4-40GB", "up to date",
                                                            "none")


def test_allocatable_per_resource_name_as_the_device_plugin_check_words_it():
    capacity = [{"host": "a", "allocatable": {"nvidia.com/gpu": 4}, "expected": {"nvidia.com/gpu": 4}, "ok": True,
                 "allocatable_text": "4", "expected_text": "4"},
                {"host": "b", "allocatable": {}, "expected": {"nvidia.com/mig-1g.10gb": 7}, "ok": False,
                 "allocatable_text": "0", "expected_text": "nvidia.com/mig-1g.10gb: 7"}]
    rows = site_summary(["a", "b"], hostvars(a=(H100, {}), b=(H100, {})), capacity=capacity)
    assert [row["allocatable"] for row in rows] == ["4", "0 (expected nvidia.com/mig-1g.10gb: 7)"]


def test_short_allocatable_and_failed_or_recorded_validation():
    hv = hostvars(a=(H100, {}), b=(H100, {}))
    capacity = [{"host": "a", "allocatable": 4, "expected": 8, "ok": False}]
    validation = [{"node": "a", "passed": False, "reason": "Unschedulable: 0/3 nodes are available"},
                  {"node": "b", "passed": True, "phase": "Recorded", "validated_at": "2026-11-21T10:00:00Z"}]
    rows = site_summary(["a", "b"], hv, matches={"a": "a", "b": "b"}, capacity=capacity, validation=validation)
    assert rows[0]["allocatable"] == "4 (expected 8)"
    assert rows[0]["validation"] == "FAILED: Unschedulable: 0/3 nodes are available"
    assert rows[1]["validation"] == "passed (recorded, 2026-11-21T10:00:00Z)"


def test_driver_column_reads_the_driver_role_summary_else_the_facts():
    summary = {"text": "535.183.01, held, open, reboot pending, not built for the next kernel", "held": True}
    hv = hostvars(a=(H100, {"nvidia_driver_reboot_pending": True}),
                  b=(H100, {"nvidia_driver_summary": summary}),
                  c=(dict(H100, driver_version=None), {}))
    rows = site_summary(["a", "b", "c"], hv)
    assert [row["driver"] for row in rows] == ["535.183.01 (reboot pending)",
                                               "535.183.01, held, open, reboot pending, not built for the next kernel",
                                               "none"]


def test_table_pads_columns_two_spaces_apart_without_trailing_blanks():
    rows = [{"node": "gpu01", "gpus": "8 x H100", "driver": "535"}, {"node": "cpu-node-2", "gpus": "none",
                                                                     "driver": "-"}]
    assert table(rows, ["node", "gpus", "driver"]) == [
        "NODE        GPUS      DRIVER",
        "gpu01       8 x H100  535",
        "cpu-node-2  none      -",
    ]


def test_table_refuses_what_is_not_rows():
    with pytest.raises(AnsibleFilterError, match="list of rows"):
        table("not rows")


def test_tenant_table():
    tenants = [{"namespace": "team-h100", "state": "present", "tier": "gpu-workload", "quota": {"nvidia.com/gpu": 4}},
               {"namespace": "team-t4", "state": "present", "tier": None,
                "quota": {"nvidia.com/gpu": 4, "count/resourceclaims.resource.k8s.io": 2}},
               {"namespace": "old-team", "state": "absent", "tier": None, "quota": {}}]
    results = [{"namespace": "team-h100", "node": "h100", "passed": True, "quota_used": 1, "quota_hard": 4},
               {"namespace": "team-t4", "node": "", "passed": False, "reason": "Unschedulable: 0/3 nodes"}]
    assert tenant_table(tenants, results) == [
        "TENANT     QUOTA                                                     TIER          VALIDATION",
        "team-h100  nvidia.com/gpu=4                                          gpu-workload  PASS on h100 (quota used 1 of 4)",
        "team-t4    count/resourceclaims.resource.k8s.io=2, nvidia.com/gpu=4  -             FAIL: Unschedulable: 0/3 nodes",
        "old-team   absent                                                    -             not run"]
    assert tenant_table(tenants[:1], None, True)[1].endswith("gpu-workload  check mode")
    assert tenant_table([], results) == []
    with pytest.raises(AnsibleFilterError, match="tenant_table expects the tenant validation results as a list of dicts"):
        tenant_table(tenants, "team-t4")


def test_a_dra_node_says_what_its_resourceslice_offers():
    """The DRA driver role's rows (nvidia_dra_driver_nodes) come before the device plugin's in site.yml."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.site_summary import _allocatable
    assert _allocatable({"host": "h100", "ok": True, "allocatable_text": "DRA: 8 gpu",
                         "expected_text": "DRA: 8 gpu"}) == "DRA: 8 gpu"
    assert _allocatable({"host": "h100", "ok": False, "allocatable_text": "DRA: no slice",
                         "expected_text": "DRA: 8 gpu"}) == "DRA: no slice (expected DRA: 8 gpu)"
