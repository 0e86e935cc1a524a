"""Benchmark: DRA through the Kubernetes API test server for N nodes of 8 GPUs (default 1,000).

Against the Kubernetes API test server (tests/support/kubeapi, in this process, over HTTPS, its
controllers on), with the real kubernetes client:

  setup       N Node objects (kubegpu.io/simulated-gpus: "8", label nvidia.com/dra-kubelet-plugin=true),
              the DeviceClass gpu.nvidia.com with the NVIDIA chart's CEL selector, a ResourceClaimTemplate
              of one gpu.nvidia.com device
  publishing  the NVIDIA DRA kubelet-plugin DaemonSet is created; its pods start on every node and each
              node's plugin publishes its ResourceSlice of 8 GPUs; timed until one LIST of the driver's
              slices (a readiness check as the role makes it) returns N slices of 8 devices
  allocating  one pod per node (pinned by kubernetes.io/hostname, one claim from the template each); the
              resourceclaim controller makes N claims, the scheduler evaluates the CEL selectors and
              allocates; timed until one LIST of pods shows all N Running, then one LIST of claims checks
              each has one allocated device on its pod's node and the pod reserved
  readiness   one more LIST of the driver's slices, the call the role's readiness check makes, timed alone

It prints the time of each step and the API calls each made, by resource and verb, as the server counts
them; exit status 1 when a check fails.

    python bench/dra_api.py [--nodes 1000] [--gpus 8]
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import kubernetes  # noqa: E402
from kubernetes import dynamic  # noqa: E402

from kubeapi import KubeAPIServer  # noqa: E402

CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
NS = "dra-bench"


def counts(server):
    out = {}
    for rec in server.requests():
        if rec.get("verb"):
            key = "%s %s" % (rec["verb"], rec["resource"])
            out[key] = out.get(key, 0) + 1
    return out


def run(nodes=1000, gpus=8, out=print):
    """Run the steps; ({step: {"seconds": s, "calls": {"verb resource": n}}}, [failed checks])."""
    steps = {}

    def step(server, name, func):
        server.reset_counts()
        start = time.monotonic()
        result = func()
        took = time.monotonic() - start
        calls = counts(server)
        steps[name] = {"seconds": took, "calls": calls}
        detail = ", ".join("%s %d" % kv for kv in sorted(calls.items()))
        out("%-11s %8.2f s  %5d API calls  (%s)" % (name, took, sum(calls.values()), detail))
        return result

    args = argparse.Namespace(nodes=nodes, gpus=gpus)
    failures = []
    with KubeAPIServer(tls=True) as server:
        client = kubernetes.config.new_client_from_config(server.kubeconfig_path)
        core = kubernetes.client.CoreV1Api(client)
        apps = kubernetes.client.AppsV1Api(client)
        dyn = dynamic.DynamicClient(client)
        classes = dyn.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
        templates = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate")
        slices = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
        claims = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
        names = ["dra-%04d" % i for i in range(args.nodes)]
        out("DRA through the API test server: %d nodes x %d GPUs" % (args.nodes, args.gpus))

        def setup():
            core.create_namespace({"metadata": {"name": NS}})
            for name in names:
                core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/dra-kubelet-plugin": "true"},
                                               "annotations": {"kubegpu.io/simulated-gpus": str(args.gpus)}}})
            classes.create(body={"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                 "metadata": {"name": "gpu.nvidia.com"},
                                 "spec": {"selectors": [{"cel": {"expression": CLASS_CEL}}]}})
            templates.create(namespace=NS, body={
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})

        def list_slices():
            return slices.get(field_selector="spec.driver=gpu.nvidia.com").to_dict()["items"]

        def publish():
            apps.create_namespaced_daemon_set(NS, {
                "metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin"},
                "spec": {"selector": {"matchLabels": {"app": "dra"}}, "template": {
                    "metadata": {"labels": {"app": "dra"}},
                    "spec": {"nodeSelector": {"nvidia.com/dra-kubelet-plugin": "true"},
                             "containers": [{"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"}]}}}})
            return list_slices()

        def allocate():
            for name in names:
                core.create_namespaced_pod(NS, {"metadata": {"name": "claim-" + name}, "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": name},
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                    "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                                    "resources": {"claims": [{"name": "gpu"}]}}]}})
            pods = core.list_namespaced_pod(NS, label_selector="!app").items
            return pods, claims.get(namespace=NS).to_dict()["items"]

        step(server, "setup", setup)
        published = step(server, "publishing", publish)
        by_node = {s["spec"]["nodeName"]: len(s["spec"]["devices"]) for s in published}
        if len(by_node) != args.nodes or set(by_node.values()) != {args.gpus}:
            failures.append("publishing: %d slices, device counts %s" % (len(by_node), sorted(set(by_node.values()))))
        pods, made = step(server, "allocating", allocate)
        running = [p for p in pods if p.status.phase == "Running"]
        if len(running) != args.nodes:
            failures.append("allocating: %d of %d pods Running" % (len(running), args.nodes))
        uids = {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in pods}
        good = 0
        for claim in made:
            pod_name = claim["metadata"]["ownerReferences"][0]["name"]
            results = claim["status"]["allocation"]["devices"]["results"] if claim.get("status") else []
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if len(results) == 1 and results[0]["pool"] == uids[pod_name][1] and \
                    [r["uid"] for r in reserved] == [uids[pod_name][0]]:
                good += 1
        if good != args.nodes:
            failures.append("allocating: %d of %d claims allocated on their pod's node and reserved" % (good, args.nodes))
        items = step(server, "readiness", list_slices)
        size = len(json.dumps(items))
        out("readiness   one LIST of %d slices, %.1f MB of JSON" % (len(items), size / 1e6))
    return steps, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    _steps, failures = run(args.nodes, args.gpus)
    for failure in failures:
        print("FAILED " + failure)
    print("all checks met" if not failures else "%d check(s) failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
