"""k8s_gpu_validate against the Kubernetes API test server.

Runs go through `ansible localhost -m kubegpu.nvidia.k8s_gpu_validate` and the real `kubernetes` client
over HTTP. The test server's kubelet stand-in runs a pod with restartPolicy Never to Succeeded (exit code
and log from the annotations kubegpu.io/simulated-exit-code and kubegpu.io/simulated-log), keeps one with
restartPolicy Always Running, and leaves a pod no node can take Pending/Unschedulable with the
scheduler's message. One test drives Validation and PodAPI in-process.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import (
    RECORD_ANNOTATION, Validation, recorded_results)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError, get_api_client
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_pods import PodAPI

kubernetes = pytest.importorskip("kubernetes")

MODULE = "kubegpu.nvidia.k8s_gpu_validate"
LABELS = {"app.kubernetes.io/name": "gpu-validation-test"}
SELECTOR = "kubegpu.io/validate-test=yes"
PASSING_LOG = "[Vector addition of 50000 elements]\nTest PASSED\nDone\n"


def template(log=PASSING_LOG, restart="Never", **annotations):
    annotations = dict(annotations, **{"kubegpu.io/simulated-log": log})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": LABELS, "annotations": annotations},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "check", "image": "registry.example/check:1",
                                     "terminationMessagePolicy": "FallbackToLogsOnError"}]}}


def args(**kwargs):
    out = {"node_selector": SELECTOR, "pod_template": template(), "timeout": 20, "unschedulable_timeout": 1,
           "poll_interval": 0.5}
    out.update(kwargs)
    return out


@pytest.fixture
def nodes(kube_server, kube):
    """Two selected nodes (a, b), one tainted selected node made on demand, and one node not selected."""
    del kube_server
    made = {}

    def node(name, selected=True, taints=None):
        made[name] = kube.node(name=name, labels={"validate-test": "x", "kubegpu.io/validate-test": "yes"}
                               if selected else {}, taints=taints)
        return name
    node("node-a")
    node("node-b")
    node("node-other", selected=False)
    return node


def pods(kube, namespace="gpu-validation"):
    return sorted(p.metadata.name for p in kube.core().list_namespaced_pod(namespace).items)


def namespaces(kube):
    return [n.metadata.name for n in kube.core().list_namespace().items]


def test_check_mode_creates_nothing(kube, nodes):
    del nodes
    kube.server.reset_counts()
    result = kube.ansible(MODULE, args(), check=True, diff=True)
    assert result.get("failed") is not True, result
    assert result["changed"] is True
    assert result["nodes"] == ["node-a", "node-b"]
    assert result["results"] == []
    assert result["diff"]["before"] == {}
    assert result["diff"]["after"]["metadata"] == {"name": "gpu-validation", "labels": LABELS}
    assert "gpu-validation" not in namespaces(kube)
    assert set(kube.server.request_counts()) <= {"get", "list"}


def test_selected_nodes_pass_the_pods_are_deleted_and_a_second_run_changes_nothing(kube, nodes):
    del nodes
    result = kube.ansible(MODULE, args(), diff=True)
    assert result.get("failed") is not True, result
    assert result["changed"] is True
    assert result["passed"] is True
    assert result["msg"] == "GPU validation passed on 2 node(s)"
    assert result["results"] == [
        {"node": "node-a", "pod": "gpu-validation-node-a", "passed": True, "phase": "Succeeded",
         "reason": "Test PASSED"},
        {"node": "node-b", "pod": "gpu-validation-node-b", "passed": True, "phase": "Succeeded",
         "reason": "Test PASSED"}]
    ns = kube.core().read_namespace("gpu-validation")
    assert ns.metadata.labels["app.kubernetes.io/name"] == "gpu-validation-test"
    assert pods(kube) == []

    kube.server.reset_counts()
    result = kube.ansible(MODULE, args(), diff=True)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["diff"]["before"] == result["diff"]["after"]
    assert [r["passed"] for r in result["results"]] == [True, True]
    # nodes, namespace, leftovers, 2 creates, one poll, 2 log reads, 2 deletes, one listing until gone
    assert result["api_requests"] == {"list": 4, "get": 3, "create": 2, "delete": 2}
    assert kube.server.request_counts() == result["api_requests"]
    assert pods(kube) == []


def test_leftover_pods_are_removed_first(kube, nodes):
    # an earlier run's pod for node-a goes first; the pod of a node outside this run (another run, a slice of the
    # same fleet, may be validating it right now) and a pod without the template's labels stay
    del nodes
    kube.core().create_namespace({"metadata": {"name": "gpu-validation"}})
    for name in ("gpu-validation-node-a", "gpu-validation-node-elsewhere"):
        leftover = template(restart="Always")
        leftover["metadata"]["name"] = name
        kube.core().create_namespaced_pod("gpu-validation", leftover)
    other = {"metadata": {"name": "unrelated", "labels": {"app": "other"}},
             "spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "x"}]}}
    kube.core().create_namespaced_pod("gpu-validation", other)
    assert pods(kube) == ["gpu-validation-node-a", "gpu-validation-node-elsewhere", "unrelated"]
    result = kube.ansible(MODULE, args(nodes=["node-a"]))
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert [(r["node"], r["passed"]) for r in result["results"]] == [("node-a", True)]
    assert pods(kube) == ["gpu-validation-node-elsewhere", "unrelated"]
    assert result["api_requests"]["delete"] == 2  # the leftover and node-a's new pod
    assert "list" not in {r["verb"] for r in kube.server.requests() if r["resource"] == "nodes"}


def test_throttling_and_server_errors_are_retried(kube, nodes):
    del nodes
    pods_path = r"^/api/v1/namespaces/gpu-validation/pods$"
    kube.server.inject("POST", pods_path, status=500, times=1)
    kube.server.inject("POST", pods_path, status=429, retry_after=0, times=1)
    kube.server.inject("GET", pods_path, status=503, times=1)
    kube.server.inject("GET", r"^/api/v1/namespaces/gpu-validation/pods/[^/]+/log$", status=500, times=1)
    kube.server.reset_counts()
    result = kube.ansible(MODULE, args())
    assert result.get("failed") is not True, result
    assert [r["passed"] for r in result["results"]] == [True, True]
    # nodes, poll + 1, namespace + 2 logs + 1, namespace + 2 pods + 2, 2 deletes; the namespace was new
    assert result["api_requests"] == {"list": 3 + 1, "get": 3 + 1, "create": 3 + 2, "delete": 2}
    assert kube.server.request_counts() == result["api_requests"]
    assert all(f["fired"] == f["times"] for f in kube.server.faults())
    assert pods(kube) == []


def test_an_api_failure_mid_run_still_deletes_the_pods(kube, nodes):
    del nodes
    kube.server.inject("GET", r"^/api/v1/namespaces/gpu-validation/pods/gpu-validation-node-b/log$", status=403,
                       times=0, message="pods \"gpu-validation-node-b\" is forbidden: no log access")
    result = kube.ansible(MODULE, args())
    assert result["failed"] is True
    assert result["msg"] == ('reading the log of pod gpu-validation/gpu-validation-node-b failed: 403 Forbidden: '
                             'pods "gpu-validation-node-b" is forbidden: no log access')
    assert "\n" not in result["msg"]
    assert result["changed"] is True  # the namespace was created
    assert result["api_requests"]["delete"] == 2
    assert pods(kube) == []


def test_a_failure_while_creating_deletes_what_was_made(kube, nodes):
    del nodes
    kube.server.inject("POST", r"^/api/v1/namespaces/gpu-validation/pods$", status=500, times=0)
    kube.core().create_namespace({"metadata": {"name": "gpu-validation"}})
    result = kube.ansible(MODULE, args(nodes=["node-a"], retries=1))
    assert result["failed"] is True
    assert result["msg"].startswith("creating pod gpu-validation/gpu-validation-node-a failed after 2 attempts: "
                                    "500 Internal Server Error")
    assert result["api_requests"]["delete"] == 1  # the pod the failed create might have made
    assert pods(kube) == []


def test_pods_still_running_at_the_timeout_fail_the_node(kube, nodes):
    del nodes
    result = kube.ansible(MODULE, args(nodes=["node-a"], pod_template=template(restart="Always"), timeout=2))
    assert result["failed"] is True
    assert result["msg"] == "GPU validation failed on 1 of 1 node(s): node-a: still Running after 2s"
    assert result["results"][0]["phase"] == "Running"
    assert pods(kube) == []


def test_unschedulable_and_failing_nodes_are_reported_without_failing_when_asked(kube, nodes):
    nodes("node-tainted", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    result = kube.ansible(MODULE, args(fail_on_failure=False, expected_log="ALL GOOD",
                                       pod_template=template(log="CUDA error: no device\n")))
    assert result.get("failed") is not True, result
    assert result["passed"] is False
    reasons = dict((r["node"], r["reason"]) for r in result["results"])
    assert reasons["node-a"] == 'log lacks "ALL GOOD": CUDA error: no device'
    assert reasons["node-tainted"].startswith("Unschedulable: 0/4 nodes are available: ")
    assert "untolerated taint" in reasons["node-tainted"]
    assert result["msg"].startswith("GPU validation failed on 3 of 3 node(s): node-a: log lacks")
    assert pods(kube) == []


def test_no_selected_node_and_a_namespace_that_may_not_be_created_fail_clearly(kube, nodes):
    del nodes
    result = kube.ansible(MODULE, args(node_selector="nvidia.com/gpu.present=true"))
    assert result["failed"] is True
    assert result["msg"] == ("No node to validate: no node matches the label selector nvidia.com/gpu.present=true "
                             "(label the GPU nodes, or name them in nodes)")
    result = kube.ansible(MODULE, args(create_namespace=False))
    assert result["failed"] is True
    assert result["msg"] == "namespace gpu-validation does not exist: create it, or set create_namespace"
    result = kube.ansible(MODULE, args(pod_template={"spec": {}}))
    assert result["failed"] is True
    assert result["msg"] == "pod_template needs metadata.labels: the module finds its pods again by them"
    assert "gpu-validation" not in namespaces(kube)


@pytest.mark.parametrize("where", ["hang", "black-hole"])
def test_a_server_that_never_answers_fails_within_the_timeout(kube, nodes, where):
    import time

    from kubeapi import BlackHole

    del nodes
    hole = None
    extra = {}
    if where == "hang":
        kube.server.inject(hang=True, times=0)
        url = kube.server.url
    else:
        hole = BlackHole()
        url = extra["host"] = hole.url
    kube.server.reset_counts()
    start = time.monotonic()
    try:
        # request_timeout keeps its default (30 s): the module's timeout bounds the requests too
        result = kube.ansible(MODULE, args(timeout=3, **extra))
    finally:
        elapsed = time.monotonic() - start
        if hole:
            hole.close()
    assert result["failed"] is True
    assert result["error_kind"] == "timeout"
    assert result["msg"] == ("listing nodes with labels %s failed: the API server at %s did not answer within 3s "
                             "(request_timeout)" % (SELECTOR, url))
    assert result["api_requests"] == {"list": 1}  # no retry after the step's 3 s
    assert elapsed < 25  # not the 30 s of request_timeout, let alone its retries
    kube.server.clear_faults()


def test_a_log_read_that_never_answers_fails_the_run_and_the_pods_are_still_deleted(kube, nodes):
    del nodes
    kube.server.inject("GET", r"^/api/v1/namespaces/gpu-validation/pods/[^/]+/log$", hang=True, times=0)
    api = PodAPI(get_api_client({"kubeconfig": kube.kubeconfig}), request_timeout=30)
    run = Validation(api, template(), node_selector=SELECTOR, timeout=2, unschedulable_timeout=1, poll_interval=0.5)
    with pytest.raises(K8sError) as info:
        run.run()
    assert info.value.kind == "timeout"
    assert info.value.msg.startswith("reading the log of pod gpu-validation/gpu-validation-node-a failed: the API "
                                     "server at %s did not answer within 2s" % kube.server.url)
    assert api.counts["delete"] == 2
    assert pods(kube) == []


def test_a_pod_with_several_containers_is_judged_by_the_first_ones_log(kube, nodes):
    del nodes
    tmpl = template()
    tmpl["spec"]["containers"].append({"name": "sidecar", "image": "registry.example/sidecar:1"})
    result = kube.ansible(MODULE, args(nodes=["node-a"], pod_template=tmpl))
    assert result.get("failed") is not True, result
    assert result["results"][0]["passed"] is True
    log_reads = [r["path"] for r in kube.server.requests() if r["resource"] == "pods/log"]
    assert log_reads == ["/api/v1/namespaces/gpu-validation/pods/gpu-validation-node-a/log"]


def listed(kube, *names):
    """The nodes as the API lists them (plain dicts, as a module or kubernetes.core.k8s_info returns them)."""
    core = kube.core()
    return [core.api_client.sanitize_for_serialization(core.read_node(name)) for name in names]


def test_passes_are_recorded_on_the_nodes_kept_while_their_state_holds_and_removed_on_a_failure(kube, nodes):
    del nodes
    result = kube.ansible(MODULE, args(record=True, revision="pod-1"))
    assert result.get("failed") is not True, result
    assert [(r["node"], r["passed"], r["recorded"]) for r in result["results"]] == [
        ("node-a", True, True), ("node-b", True, True)]
    assert result["changed"] is True
    assert result["api_requests"]["patch"] == 2
    # the records hold for the nodes as they are now, with the same revision only
    assert [r["node"] for r in recorded_results(listed(kube, "node-a", "node-b"), "pod-1")] == ["node-a", "node-b"]
    assert recorded_results(listed(kube, "node-a", "node-b"), "pod-2") == []
    first = listed(kube, "node-a")[0]["metadata"]["annotations"][RECORD_ANNOTATION]

    # the pods run again; the records hold already: nothing is written, nothing changed
    result = kube.ansible(MODULE, args(record=True, revision="pod-1"))
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert "patch" not in result["api_requests"]
    assert listed(kube, "node-a")[0]["metadata"]["annotations"][RECORD_ANNOTATION] == first

    # a relabelled node's record no longer holds
    kube.core().patch_node("node-b", {"metadata": {"labels": {"nvidia.com/gpu.count": "2"}}})
    assert [r["node"] for r in recorded_results(listed(kube, "node-a", "node-b"), "pod-1")] == ["node-a"]

    # a node that fails loses its record; the one that passes keeps it
    result = kube.ansible(MODULE, args(nodes=["node-a"], record=True, revision="pod-1", fail_on_failure=False,
                                       pod_template=template(log="CUDA error: no device\n")))
    assert result.get("failed") is not True, result
    assert (result["results"][0]["passed"], result["results"][0]["recorded"]) == (False, False)
    assert result["changed"] is True
    assert RECORD_ANNOTATION not in (listed(kube, "node-a")[0]["metadata"].get("annotations") or {})
    assert pods(kube) == []


def test_a_node_s_pod_requests_the_resource_named_for_it(kube, nodes):
    """resources: the pod of node-a asks for a MIG device instead of the template's nvidia.com/gpu, node-b's keeps
    it; neither node advertises either, so the scheduler names what each pod asked for."""
    gpu_template = template()
    gpu_template["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    result = kube.ansible(MODULE, args(fail_on_failure=False, pod_template=gpu_template,
                                       resources={"node-a": "nvidia.com/mig-1g.5gb"}))
    assert result.get("failed") is not True, result
    reasons = dict((r["node"], r["reason"]) for r in result["results"])
    assert reasons["node-a"].startswith("Unschedulable: ") and "Insufficient nvidia.com/mig-1g.5gb" in reasons["node-a"]
    assert "nvidia.com/gpu" not in reasons["node-a"]
    assert reasons["node-b"].startswith("Unschedulable: ") and "Insufficient nvidia.com/gpu" in reasons["node-b"]
    assert pods(kube) == []


def test_a_resource_for_a_template_without_a_gpu_request_fails_in_one_line(kube, nodes):
    result = kube.ansible(MODULE, args(resources={"node-a": "nvidia.com/mig-1g.5gb"}))
    assert result["failed"] is True
    assert result["msg"] == ("resources: the first container of pod_template requests no nvidia.com/ resource to "
                             "replace with nvidia.com/mig-1g.5gb")
    assert pods(kube) == []
