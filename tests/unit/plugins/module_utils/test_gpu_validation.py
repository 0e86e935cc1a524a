"""Unit tests of module_utils/gpu_validation.py: results per node, when to stop waiting, and one run's flow
over a stand-in API (no server, a fake clock)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_validation as gv

LABELS = {"app.kubernetes.io/name": "gpu-validation", "app.kubernetes.io/managed-by": "kubegpu.nvidia"}
TEMPLATE = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": LABELS},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "cuda-vectoradd", "image": "sample"}]}}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}


def pod(name, phase, conditions=None, reason=None, message=None):
    status = {"phase": phase, "conditions": conditions or []}
    if reason:
        status.update(reason=reason, message=message)
    return {"metadata": {"name": name}, "status": status}


# ---------------------------------------------------------------- result per node
def test_validation_results_per_node():
    pods = {"ok": pod("gpu-validation-ok", "Succeeded"), "nolog": pod("gpu-validation-nolog", "Succeeded"),
            "full": pod("gpu-validation-full", "Pending", [UNSCHEDULABLE]),
            "rejected": pod("gpu-validation-rejected", "Failed", reason="OutOfnvidia.com/gpu",
                            message="Node didn't have enough")}
    logs = {"ok": "...\nTest PASSED\nDone\n", "nolog": "CUDA error\n"}
    table = dict((node, gv.node_result(node, pods.get(node), logs.get(node)))
                 for node in ("ok", "nolog", "full", "rejected", "missing"))
    assert table["ok"] == {"node": "ok", "pod": "gpu-validation-ok", "passed": True, "phase": "Succeeded",
                           "reason": "Test PASSED"}
    assert (table["nolog"]["passed"], table["nolog"]["reason"]) == (False, 'log lacks "Test PASSED": CUDA error')
    assert (table["full"]["passed"], table["full"]["reason"]) == (
        False, "Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert (table["rejected"]["passed"], table["rejected"]["reason"]) == (
        False, "OutOfnvidia.com/gpu: Node didn't have enough")
    assert table["missing"] == {"node": "missing", "pod": "gpu-validation-missing", "passed": False,
                                "phase": "Missing", "reason": "still Missing after 300s"}


def test_a_failed_pod_is_reported_with_its_log_tail_without_a_log_read():
    crashed = pod("gpu-validation-bad", "Failed")
    crashed["status"]["containerStatuses"] = [{"state": {"terminated": {
        "reason": "Error", "exitCode": 1, "message": "Failed to allocate device vector A (error code no CUDA device)"}}}]
    assert gv.node_result("bad", crashed, None) == {
        "node": "bad", "pod": "gpu-validation-bad", "passed": False, "phase": "Failed",
        "reason": "Error: Failed to allocate device vector A (error code no CUDA device)"}


def test_a_failed_pod_without_any_detail_is_still_named():
    assert gv.node_result("bad", pod("gpu-validation-bad", "Failed"), None)["reason"] == "Failed: "


def test_a_waiting_container_gives_its_reason():
    pulling = pod("gpu-validation-n", "Pending")
    pulling["status"]["containerStatuses"] = [{"state": {"waiting": {
        "reason": "ErrImagePull", "message": "pull access denied"}}}]
    assert gv.node_result("n", pulling, None, timeout=30)["reason"] == "ErrImagePull: pull access denied"
    assert gv.node_result("n", pod("gpu-validation-n", "Running"), None, timeout=30)["reason"] == \
        "still Running after 30s"


def test_other_expected_text_and_long_logs_are_cut_like_jinja_truncate():
    log = " ".join(["word%03d" % i for i in range(60)])  # 479 characters
    result = gv.node_result("n", pod("gpu-validation-n", "Succeeded"), log, expected_log="ALL OK")
    assert result["reason"].startswith('log lacks "ALL OK": word000 word001')
    detail = result["reason"][len('log lacks "ALL OK": '):]
    assert detail.endswith("word023...") and len(detail) <= 200
    assert gv.truncate("x" * 205) == "x" * 205  # within Jinja's leeway of 5
    assert gv.truncate("x" * 206) == "x" * 197 + "..."


def test_failure_and_success_messages():
    results = [gv.node_result("a", pod("gpu-validation-a", "Succeeded"), "Test PASSED"),
               gv.node_result("b", pod("gpu-validation-b", "Pending", [UNSCHEDULABLE]), None)]
    assert gv.failure_message(results) == ("GPU validation failed on 1 of 2 node(s): b: Unschedulable: "
                                           "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert gv.failure_message(results[:1]) is None
    assert gv.success_message(results[:1]) == "GPU validation passed on 1 node(s)"


# ---------------------------------------------------------------- when to stop waiting
def test_validation_stops_waiting_for_unschedulable_pods_after_their_grace():
    names = ["gpu-validation-a", "gpu-validation-b"]
    pods = {names[0]: pod(names[0], "Succeeded"), names[1]: pod(names[1], "Pending", [UNSCHEDULABLE])}
    assert gv.validation_done(pods, names, 4, 300, 10) is False
    assert gv.validation_done(pods, names, 10, 300, 10) is True
    running = dict(pods, **{names[1]: pod(names[1], "Running")})
    assert gv.validation_done(running, names, 10, 300, 10) is False
    assert gv.validation_done(running, names, 300, 300, 10) is True
    finished = dict(pods, **{names[1]: pod(names[1], "Failed")})
    assert gv.validation_done(finished, names, 0, 300, 10) is True
    assert gv.validation_done({names[0]: pods[names[0]]}, names, 50, 300, 10) is False  # a missing pod is waited for


def test_polls_start_short_and_double_up_to_the_interval():
    delays = []
    delay = None
    for _step in range(6):
        delay = gv.next_delay(delay, 2)
        delays.append(delay)
    assert delays == [0.2, 0.4, 0.8, 1.6, 2, 2]
    assert gv.next_delay(None, 0.1) == 0.1


# ---------------------------------------------------------------- pods
def test_the_pod_is_named_placed_in_the_namespace_and_pinned_by_the_scheduler():
    built = gv.build_pod(TEMPLATE, "gpu-2.example.com", "ns1")
    assert built["metadata"] == {"name": "gpu-validation-gpu-2.example.com", "namespace": "ns1", "labels": LABELS}
    assert "nodeName" not in built["spec"]
    terms = built["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-2.example.com"]}]}]}
    assert "affinity" not in TEMPLATE["spec"]  # the template itself is left alone


def test_node_selector_terms_of_the_template_keep_their_expressions_and_get_the_pin():
    template = {"metadata": {"labels": {"a": "b"}, "name": "ignored"},
                "spec": {"nodeName": "elsewhere", "containers": [], "affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}}}
    built = gv.build_pod(template, "n1", "ns")
    pin = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    terms = built["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert [t["matchFields"] for t in terms] == [[pin], [pin]]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    assert built["metadata"]["name"] == "gpu-validation-n1" and "nodeName" not in built["spec"]
    assert (built["apiVersion"], built["kind"]) == ("v1", "Pod")


def test_a_node_s_pod_asks_for_its_resource_instead_of_the_template_s():
    template = {"metadata": {"labels": LABELS}, "spec": {"containers": [
        {"name": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "1"}, "requests": {"nvidia.com/gpu": 1}}},
        {"name": "side", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    built = gv.build_pod(template, "n1", "ns", "nvidia.com/mig-1g.5gb")
    assert built["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-1g.5gb": 1, "cpu": "1"}, "requests": {"nvidia.com/mig-1g.5gb": 1}}
    # only the first container (the check); the template is left alone
    assert built["spec"]["containers"][1]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1, "cpu": "1"}
    assert gv.build_pod(template, "n2", "ns")["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_a_resource_for_a_template_that_asks_for_no_gpu_is_refused_before_any_pod():
    with pytest.raises(gv.ValidationError) as err:
        gv.Validation(object(), TEMPLATE, resources={"n1": "nvidia.com/mig-1g.5gb"})
    assert err.value.msg == ("resources: the first container of pod_template requests no nvidia.com/ resource to "
                             "replace with nvidia.com/mig-1g.5gb")


@pytest.mark.parametrize("template, message", [
    ({"spec": {}}, "pod_template needs metadata.labels"),
    ({"metadata": {"labels": {}}}, "pod_template needs metadata.labels"),
    ({"kind": "Job", "metadata": {"labels": {"a": "b"}}}, "not kind Job"),
    ("pod", "must be a Pod manifest"),
])
def test_a_template_the_module_cannot_find_its_pods_by_is_refused(template, message):
    with pytest.raises(gv.ValidationError) as err:
        gv.template_labels(template)
    assert message in err.value.msg


def test_the_label_selector_selects_exactly_the_template_labels():
    assert gv.label_selector(LABELS) == \
        "app.kubernetes.io/managed-by=kubegpu.nvidia,app.kubernetes.io/name=gpu-validation"


# ---------------------------------------------------------------- one run over a stand-in API
class Clock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


class FakeAPI:
    """Pods become what ``outcome(node_name, listings seen)`` says; deleted pods linger ``linger`` listings."""

    def __init__(self, nodes=("n1", "n2"), namespace_exists=True, outcome=None, linger=0, logs=None, fail=None):
        self.nodes = list(nodes)
        self.namespace_exists = namespace_exists
        self.outcome = outcome or (lambda node, seen: "Succeeded")
        self.linger = linger
        self.logs = logs or {}
        self.fail = fail or {}
        self.pods = {}
        self.deleting = {}
        self.calls = []
        self.containers = []
        self.listings = 0
        self.node_objects = {}
        self.patches = []

    def _maybe_fail(self, call):
        error = self.fail.get(call)
        if error is not None:
            raise error

    def list_nodes(self, label_selector=None):
        self.calls.append(("list_nodes", label_selector))
        return [self.node_objects.get(n) or {"metadata": {"name": n}} for n in reversed(self.nodes)]

    def patch_node(self, name, body):
        self.calls.append(("patch_node", name))
        self._maybe_fail("patch_node")
        self.patches.append((name, body))

    def get_namespace(self, name):
        self.calls.append(("get_namespace", name))
        return {"metadata": {"name": name}} if self.namespace_exists else None

    def create_namespace(self, body):
        self.calls.append(("create_namespace", body["metadata"]["name"]))
        self.namespace_exists = True

    def list_pods(self, namespace, label_selector):
        self.calls.append(("list_pods", label_selector))
        self._maybe_fail("list_pods")
        self.listings += 1
        for name in list(self.deleting):
            self.deleting[name] -= 1
            if self.deleting[name] < 0:
                del self.deleting[name]
                self.pods.pop(name, None)
        out = []
        for name, obj in sorted(self.pods.items()):
            node = obj["node"]
            phase = self.outcome(node, self.listings) if node else "Succeeded"
            status = {"phase": phase}
            if phase == "Unschedulable":
                status = {"phase": "Pending", "conditions": [UNSCHEDULABLE]}
            out.append({"metadata": {"name": name}, "status": status})
        return out

    def create_pod(self, namespace, body):
        name = body["metadata"]["name"]
        self.calls.append(("create_pod", name))
        self._maybe_fail(("create_pod", name))
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        self.pods[name] = {"node": terms[0]["matchFields"][0]["values"][0]}

    def delete_pod(self, namespace, name):
        self.calls.append(("delete_pod", name))
        self._maybe_fail("delete_pod")
        if name in self.pods and name not in self.deleting:
            self.deleting[name] = self.linger
        return name in self.pods

    def read_pod_log(self, namespace, name, container=None):
        self.calls.append(("read_pod_log", name))
        self.containers.append(container)
        return self.logs.get(name, "Test PASSED\n")


def validation(api, clock, **kwargs):
    options = dict(timeout=30, unschedulable_timeout=5, poll_interval=2)
    options.update(kwargs)
    return gv.Validation(api, TEMPLATE, clock=clock, sleep=clock.sleep, **options)


def calls(api, kind):
    return [c[1] for c in api.calls if c[0] == kind]


def test_a_run_validates_each_selected_node_and_deletes_its_pods():
    api, clock = FakeAPI(), Clock()
    run = validation(api, clock)
    results = run.run()
    assert [(r["node"], r["passed"]) for r in results] == [("n1", True), ("n2", True)]
    assert run.node_names == ["n1", "n2"]  # sorted
    assert run.changed is False
    assert api.calls[:3] == [("list_nodes", "nvidia.com/gpu.present=true"), ("get_namespace", "gpu-validation"),
                             ("list_pods", gv.label_selector(LABELS))]
    assert calls(api, "create_pod") == calls(api, "delete_pod") == ["gpu-validation-n1", "gpu-validation-n2"]
    assert calls(api, "read_pod_log") == ["gpu-validation-n1", "gpu-validation-n2"]
    # finished at once: one poll, no sleep, one listing to see them gone
    assert len(calls(api, "list_pods")) == 3 and clock.sleeps == []
    assert api.pods == {}


def test_named_nodes_are_not_listed_and_a_missing_namespace_is_created_without_a_leftover_listing():
    api, clock = FakeAPI(namespace_exists=False), Clock()
    run = validation(api, clock, nodes=["b", "a", "b"])
    run.run()
    assert run.node_names == ["b", "a"]
    assert not calls(api, "list_nodes")
    assert calls(api, "create_namespace") == ["gpu-validation"]
    assert run.changed is True
    assert run.diff == {"before": {}, "after": gv.namespace_manifest("gpu-validation", LABELS)}
    assert api.calls[2] == ("create_pod", "gpu-validation-b")


def test_check_mode_reports_the_namespace_and_runs_no_pod():
    api, clock = FakeAPI(namespace_exists=False), Clock()
    run = validation(api, clock)
    assert run.run(check_mode=True) == []
    assert run.changed is True
    assert [c[0] for c in api.calls] == ["list_nodes", "get_namespace"]


def test_no_selected_node_and_a_missing_namespace_that_may_not_be_created_fail_clearly():
    with pytest.raises(gv.ValidationError) as err:
        validation(FakeAPI(nodes=[]), Clock(), node_selector="gpu=yes").run()
    assert err.value.msg == ("No node to validate: no node matches the label selector gpu=yes "
                             "(label the GPU nodes, or name them in nodes)")
    api = FakeAPI(namespace_exists=False)
    with pytest.raises(gv.ValidationError) as err:
        validation(api, Clock(), create_namespace=False).run()
    assert err.value.msg == "namespace gpu-validation does not exist: create it, or set create_namespace"
    assert not calls(api, "create_pod")


def test_leftover_pods_are_deleted_and_waited_for_before_new_ones_are_made():
    api, clock = FakeAPI(linger=1), Clock()
    api.pods["gpu-validation-n1"] = {"node": None}
    validation(api, clock).run()
    assert calls(api, "delete_pod")[0] == "gpu-validation-n1"
    first_create = api.calls.index(("create_pod", "gpu-validation-n1"))
    # listed, deleted, listed (still there), listed (gone), then created
    assert [c[0] for c in api.calls[2:first_create]] == ["list_pods", "delete_pod", "list_pods", "list_pods"]
    assert clock.sleeps[0] == 0.2


def test_pods_of_nodes_outside_the_run_are_left_to_the_run_that_made_them():
    # two slices of one fleet validate at the same time in the same namespace: the pod of the other slice's node
    # is neither deleted as a leftover nor waited for
    api, clock = FakeAPI(), Clock()
    api.pods["gpu-validation-n3"] = {"node": "n3"}
    results = validation(api, clock, nodes=["n1", "n2"]).run()
    assert [(r["node"], r["passed"]) for r in results] == [("n1", True), ("n2", True)]
    assert "gpu-validation-n3" not in calls(api, "delete_pod")
    assert list(api.pods) == ["gpu-validation-n3"]


def test_unschedulable_pods_are_given_up_after_their_grace_with_short_polls_first():
    api, clock = FakeAPI(outcome=lambda node, seen: "Succeeded" if node == "n1" else "Unschedulable"), Clock()
    results = validation(api, clock, unschedulable_timeout=4, poll_interval=2).run()
    assert [(r["node"], r["passed"], r["reason"].split(":")[0]) for r in results] == [
        ("n1", True, "Test PASSED"), ("n2", False, "Unschedulable")]
    assert clock.sleeps == [0.2, 0.4, 0.8, 1.6, 1]  # the last pause ends at the grace
    assert calls(api, "read_pod_log") == ["gpu-validation-n1"]  # only pods that Succeeded
    assert api.pods == {}


def test_pods_still_running_at_the_timeout_are_reported():
    api, clock = FakeAPI(outcome=lambda node, seen: "Running"), Clock()
    results = validation(api, clock, timeout=7, poll_interval=2).run()
    assert [r["reason"] for r in results] == ["still Running after 7s"] * 2
    assert sum(clock.sleeps) == pytest.approx(7)
    assert not calls(api, "read_pod_log")
    assert api.pods == {}


def test_pods_are_deleted_when_a_step_fails():
    api, clock = FakeAPI(fail={("create_pod", "gpu-validation-n2"): gv.ValidationError("creating pod failed: 500")}), \
        Clock()
    with pytest.raises(gv.ValidationError) as err:
        validation(api, clock).run()
    assert err.value.msg == "creating pod failed: 500"
    # the failed create may have made its pod: both are deleted
    assert calls(api, "delete_pod") == ["gpu-validation-n1", "gpu-validation-n2"]
    assert api.pods == {}


def test_a_failed_cleanup_after_a_failure_names_both():
    api = FakeAPI(fail={("create_pod", "gpu-validation-n1"): RuntimeError("boom"),
                        "delete_pod": gv.ValidationError("deleting pod failed: 403 Forbidden")})
    with pytest.raises(gv.ValidationError) as err:
        validation(api, Clock()).run()
    assert err.value.msg == "boom; deleting the validation pods failed too: deleting pod failed: 403 Forbidden"


def test_pods_that_do_not_go_away_fail_the_run_after_the_timeout():
    api, clock = FakeAPI(linger=1000), Clock()
    with pytest.raises(gv.ValidationError) as err:
        validation(api, clock, timeout=3).run()
    assert err.value.msg == ("validation pods still present 3s after deleting them: "
                             "gpu-validation-n1, gpu-validation-n2")


def test_the_log_of_the_first_container_is_read_when_the_pod_has_several():
    api, clock = FakeAPI(nodes=["n1"]), Clock()
    validation(api, clock).run()
    sidecar = dict(TEMPLATE, spec=dict(TEMPLATE["spec"], containers=[{"name": "check", "image": "a"},
                                                                     {"name": "sidecar", "image": "b"}]))
    gv.Validation(api, sidecar, nodes=["n1"], clock=clock, sleep=clock.sleep).run()
    assert api.containers == [None, "check"]


# ---------------------------------------------------------------- records of passed validations
def gpu_node(name, boot="boot-1", labels=None, allocatable=None, annotations=None):
    base_labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.count": "8",
                   "nvidia.com/cuda.driver-version.full": "535.183.01"}
    return {"metadata": {"name": name, "labels": dict(base_labels, **(labels or {})),
                         "annotations": dict(annotations or {})},
            "status": {"allocatable": dict({"cpu": "64", "nvidia.com/gpu": "8"}, **(allocatable or {})),
                       "nodeInfo": {"bootID": boot, "kernelVersion": "6.1.0-28-amd64", "kubeletVersion": "v1.31.2",
                                    "containerRuntimeVersion": "containerd://1.7.22", "machineID": "m-" + boot}}}


def recorded(node, revision="r1", passed_at="2026-11-21T10:00:00Z"):
    node["metadata"]["annotations"][gv.RECORD_ANNOTATION] = gv.record_value(gv.node_state(node, revision), passed_at)
    return node


def test_the_state_changes_with_what_a_pass_depends_on_and_nothing_else():
    base = gv.node_state(gpu_node("n"), "r1")
    assert gv.node_state(gpu_node("n"), "r1") == base and len(base) == 64
    # another boot, driver label, allocatable GPU count or revision: another state
    assert gv.node_state(gpu_node("n", boot="boot-2"), "r1") != base
    assert gv.node_state(gpu_node("n", labels={"nvidia.com/cuda.driver-version.full": "550.54.15"}), "r1") != base
    assert gv.node_state(gpu_node("n", allocatable={"nvidia.com/gpu": "7"}), "r1") != base
    assert gv.node_state(gpu_node("n"), "r2") != base
    # other labels, other resources, the machine ID, annotations (the record itself): the same state
    assert gv.node_state(gpu_node("n", labels={"team": "ml"}, allocatable={"cpu": "63"},
                                  annotations={"x": "y"}), "r1") == base
    other = gpu_node("n")
    other["status"]["nodeInfo"]["machineID"] = "another"
    assert gv.node_state(other, "r1") == base


def test_the_state_of_a_listed_node_and_of_k8s_gpu_label_s_returned_node_is_the_same():
    node = gpu_node("n")
    returned = {"name": "n", "changed": False, "labels": node["metadata"]["labels"],
                "allocatable": node["status"]["allocatable"], "addresses": [],
                "node_info": node["status"]["nodeInfo"], "annotations": {}}
    assert gv.node_state(returned, "r1") == gv.node_state(node, "r1")
    assert gv.node_parts(returned)[0] == gv.node_parts(node)[0] == "n"


def test_recorded_results_are_the_nodes_whose_record_holds():
    held = recorded(gpu_node("held"))
    rebooted = recorded(gpu_node("rebooted"))
    rebooted["status"]["nodeInfo"]["bootID"] = "boot-2"
    other_revision = recorded(gpu_node("other"), revision="r0")
    garbled = gpu_node("garbled", annotations={gv.RECORD_ANNOTATION: "{not json"})
    foreign = gpu_node("foreign", annotations={gv.RECORD_ANNOTATION: '{"state": 1}'})
    assert gv.read_record(gpu_node("odd", annotations={gv.RECORD_ANNOTATION: {"state": "x"}})) is None
    nodes = [held, rebooted, other_revision, garbled, foreign, gpu_node("never")]
    assert gv.recorded_results(nodes, "r1") == [
        {"node": "held", "pod": None, "passed": True, "phase": "Recorded", "validated_at": "2026-11-21T10:00:00Z",
         "reason": "passed at 2026-11-21T10:00:00Z; nothing it depends on changed since"}]
    assert gv.read_record(garbled) is None and gv.read_record(foreign) is None
    assert gv.read_record(held) == {"state": gv.node_state(held, "r1"), "passed": "2026-11-21T10:00:00Z"}


def recording_api(**kwargs):
    api = FakeAPI(**kwargs)
    api.node_objects = {"n1": gpu_node("n1"), "n2": recorded(gpu_node("n2"))}
    return api


def test_a_recording_run_writes_the_records_that_changed_and_keeps_those_that_hold():
    api, clock = recording_api(), Clock()
    run = validation(api, clock, nodes=["n1", "n2"], record=True, revision="r1", now=lambda: "2026-11-22T08:00:00Z")
    results = run.run()
    # named nodes are listed once (for their state), before any pod
    assert api.calls[0] == ("list_nodes", None)
    assert [(r["node"], r["passed"], r["recorded"]) for r in results] == [("n1", True, True), ("n2", True, True)]
    # n2 holds its record already: only n1 is written
    assert api.patches == [("n1", {"metadata": {"annotations": {
        gv.RECORD_ANNOTATION: gv.record_value(gv.node_state(api.node_objects["n1"], "r1"), "2026-11-22T08:00:00Z")}}})]
    assert run.changed is True
    # the record now holds for n1 as listed
    api.node_objects["n1"]["metadata"]["annotations"].update(api.patches[0][1]["metadata"]["annotations"])
    assert [r["node"] for r in gv.recorded_results(list(api.node_objects.values()), "r1")] == ["n1", "n2"]


def test_a_recording_run_that_finds_every_record_in_place_changes_nothing():
    api, clock = recording_api(), Clock()
    recorded(api.node_objects["n1"])
    run = validation(api, clock, record=True, revision="r1")
    run.run()
    assert api.patches == [] and run.changed is False
    # with a selector the listing that selects the nodes serves: no second one
    assert calls(api, "list_nodes") == ["nvidia.com/gpu.present=true"]


def test_a_node_that_fails_loses_its_record():
    api, clock = recording_api(outcome=lambda node, seen: "Failed" if node == "n2" else "Succeeded"), Clock()
    run = validation(api, clock, nodes=["n2"], record=True, revision="r1")
    results = run.run()
    assert (results[0]["passed"], results[0]["recorded"]) == (False, False)
    assert api.patches == [("n2", {"metadata": {"annotations": {gv.RECORD_ANNOTATION: None}}})]
    assert run.changed is True


def test_a_record_that_cannot_be_written_fails_with_the_outcome_and_the_node():
    api, clock = recording_api(fail={"patch_node": RuntimeError("nodes \"n1\" is forbidden")}), Clock()
    run = validation(api, clock, nodes=["n1"], record=True, revision="r1")
    with pytest.raises(gv.ValidationError) as err:
        run.run()
    assert err.value.msg == (
        'the validation pods ran (GPU validation passed on 1 node(s)), but recording the result on node n1 failed: '
        'nodes "n1" is forbidden (recording needs the right to patch nodes; or turn record off)')
    assert api.pods == {}


def test_without_record_named_nodes_are_not_listed_and_nothing_is_written():
    api, clock = recording_api(), Clock()
    results = validation(api, clock, nodes=["n1"]).run()
    assert "recorded" not in results[0]
    assert not calls(api, "list_nodes") and api.patches == []
