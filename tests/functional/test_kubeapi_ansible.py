"""kubernetes.core modules (k8s, k8s_info, k8s_drain) against the cluster, as subprocesses."""

import json

import pytest

import ansible_run

pytest.importorskip("kubernetes")

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def run_playbook(kube, tmp_path, tasks, extra_vars=None):
    """Run tasks on localhost; return {task name: result}."""
    path = tmp_path / "play.yml"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return ansible_run.run_playbook(path, "localhost,", extra_vars, connection="local", kubeconfig=kube.kubeconfig,
                                    timeout=300).tasks()


def test_k8s_and_k8s_info(kube, tmp_path):
    ns = kube.namespace()
    node = kube.node(labels={"kubegpu.io/test": "ansible"}, taints=[
        {"key": "example.com/other", "value": "x", "effect": "NoSchedule"}])
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "nvdp-configs", "namespace": ns, "labels": {"app": "nvdp"}},
          "data": {"default": "version: v1\n"}}
    cm_changed = json.loads(json.dumps(cm))
    cm_changed["data"]["default"] = "version: v1\nflags:\n  migStrategy: single\n"
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvdp", "namespace": ns},
          "spec": {"selector": {"matchLabels": {"app": "nvdp"}},
                   "template": {"metadata": {"labels": {"app": "nvdp"}},
                                "spec": {"nodeSelector": {"kubegpu.io/test-no-such-node": "true"},
                                         "tolerations": [GPU_TOLERATION],
                                         "containers": [{"name": "p", "image": "registry.example/p:1"}]}}}}
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": kube.unique("nvidia")},
          "handler": "nvidia"}
    taint = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
             "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}}
    k8s = "kubernetes.core.k8s"
    tasks = [
        {"name": "apply", k8s: {"definition": [cm, ds, rc, taint], "wait": True, "wait_timeout": 30}},
        {"name": "again", k8s: {"definition": [cm, ds, rc, taint], "wait": True, "wait_timeout": 30}},
        {"name": "check", k8s: {"definition": cm_changed}, "check_mode": True},
        {"name": "info", "kubernetes.core.k8s_info": {"kind": "ConfigMap", "namespace": ns,
                                                      "label_selectors": ["app in (nvdp)"]}},
        {"name": "nodes", "kubernetes.core.k8s_info": {"kind": "Node", "label_selectors": ["kubegpu.io/test=ansible"]}},
        {"name": "delete", k8s: {"definition": [cm, rc], "state": "absent"}},
        {"name": "delete again", k8s: {"definition": [cm, rc], "state": "absent"}},
    ]
    res = run_playbook(kube, tmp_path, tasks)
    for name, result in res.items():
        assert not result.get("failed"), (name, result)
    assert res["apply"]["changed"] is True
    assert [r["changed"] for r in res["apply"]["result"]["results"]] == [True] * 4
    assert res["again"]["changed"] is False
    assert res["check"]["changed"] is True
    assert [i["metadata"]["name"] for i in res["info"]["resources"]] == ["nvdp-configs"]
    assert res["info"]["resources"][0]["data"] == cm["data"]  # check mode stored nothing
    # atomic list: the other taint is gone (the node controller of a real cluster may add its own)
    taints = [t for t in res["nodes"]["resources"][0]["spec"]["taints"] if not t["key"].startswith("node.kubernetes.io/")]
    assert taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert res["delete"]["changed"] is True and res["delete again"]["changed"] is False


def test_k8s_drain_skips_daemonset_pods_and_honours_disruption_budgets(kube, kube_server, tmp_path):
    core = kube.core()
    ns = kube.namespace()
    node = kube.node()
    other = kube.node()
    kube.apps().create_namespaced_daemon_set(ns, {
        "metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
            "metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}})
    for name, app in (("free", "free"), ("guarded", "guarded")):
        core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": {"app": app}}, "spec": {
            "nodeName": node, "containers": [{"name": "c", "image": "nginx:1.27"}]}})
    from kubernetes import client

    client.PolicyV1Api(kube.api_client()).create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "guarded"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}})
    drain = "kubernetes.core.k8s_drain"
    tasks = [
        {"name": "blocked", "failed_when": False, drain: {
            "name": node, "delete_options": {"force": True, "ignore_daemonsets": True, "wait_timeout": 5}}},
        {"name": "drain other", drain: {"name": other, "delete_options": {"ignore_daemonsets": True}}},
        {"name": "uncordon", drain: {"name": other, "state": "uncordon"}},
    ]
    res = run_playbook(kube, tmp_path, tasks)
    assert "disruption budget" in res["blocked"]["msg"], res["blocked"]
    assert res["drain other"]["changed"] is True, res["drain other"]
    assert res["uncordon"]["changed"] is True
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
    assert "free" not in pods and "guarded" in pods  # evicted / kept by its budget
    assert sum(1 for p in pods.values() if p.spec.node_name == node
               and p.metadata.owner_references and p.metadata.owner_references[0].kind == "DaemonSet") == 1
    # as with kubectl drain, a drain that could not evict everything leaves the node cordoned
    assert core.read_node(node).spec.unschedulable is True
    assert not core.read_node(other).spec.unschedulable
