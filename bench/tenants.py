"""Benchmark: apply 200 GPU tenants with kubegpu.nvidia.k8s_gpu_tenants, then again with nothing to change.

Against the Kubernetes API test server (tests/support/kubeapi, run as its own process over HTTPS) with two GPU
nodes advertising 256 nvidia.com/gpu and 64 nvidia.com/gpu.shared between them, one `ansible-playbook` run of a
play with the one module task (Ansible start-up included), for N tenants (each a namespace, a ResourceQuota, a
Role and a RoleBinding; one tier). Printed per run: wall time and the server's request counts per verb.

Targets, printed as "met" or "MISSED" (exit status 1 when one is missed):

  first run   at most one write per object (N x 4 + the PriorityClass) and six listings (more only per 500
              objects of one kind)
  re-run      no write, and the same bounded listings: one per kind, independent of N

    python bench/tenants.py [--tenants 200]
"""
import argparse
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, ".cache", "collections"), os.path.join(ROOT, "tests", "support")):
    if _path not in sys.path:
        sys.path.insert(0, _path)


import ansible_run  # noqa: E402
from kubeapi.process import ServerProcess  # noqa: E402

PAGE = 500
WRITES = ("create", "update", "patch", "delete", "deletecollection")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PLAYBOOK = """
- name: Apply the GPU tenants
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Apply the GPU tenants
      kubegpu.nvidia.k8s_gpu_tenants:
        tenants: "{{ tenants }}"
        tiers: [{name: gpu-workload, value: 100000}]
        taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
"""


class Server(ServerProcess):
    """The API test server in its own process, with PodTolerationRestriction on."""

    def __init__(self, workdir):
        super().__init__(workdir, admission_plugins=("PodTolerationRestriction",))

    def gpu_nodes(self):
        for name, allocatable in (("h100", {"nvidia.com/gpu": "256"}), ("t4", {"nvidia.com/gpu.shared": "64"})):
            self.core.create_node({"metadata": {"name": name}, "spec": {"taints": [GPU_TAINT]}})
            self.core.patch_node_status(name, {"status": {"capacity": allocatable, "allocatable": allocatable}},
                                        _content_type="application/strategic-merge-patch+json")
        self.reset()


def tenants(count):
    out = []
    for i in range(count):
        resource = "nvidia.com/gpu" if i % 4 else "nvidia.com/gpu.shared"
        out.append({"namespace": "team-%03d" % i, "quota": {resource: 1},
                    "subjects": [{"kind": "Group", "name": "team-%03d" % i}], "tier": "gpu-workload"})
    return out


def run(server, workdir, declared):
    """One ansible-playbook run; (wall seconds, module result, server counts)."""
    server.reset()
    start = time.monotonic()
    res = ansible_run.run_playbook(os.path.join(workdir, "tenants.yml"), "localhost,", {"tenants": declared},
                                   connection="local", kubeconfig=server.kubeconfig, timeout=600)
    wall = time.monotonic() - start
    result = res.tasks().get("Apply the GPU tenants") or {}
    if res.rc != 0 or result.get("failed"):
        raise SystemExit("the playbook failed: %s" % (result.get("msg") or res.rc))
    return wall, result, server.counts()


def verbs(counts):
    return ", ".join("%s %d" % (verb, n) for verb, n in sorted(counts.items())) or "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=200)
    args = parser.parse_args()
    print("machine: %d CPUs, load average %.1f" % (os.cpu_count(), os.getloadavg()[0]))
    declared = tenants(args.tenants)
    objects = args.tenants * 4 + 1
    # namespaces (the tenants' plus default, kube-system, ...), PCs, quotas, roles, bindings, nodes: pages of 500
    lists = 2 + 3 * math.ceil(args.tenants / PAGE) + math.ceil((args.tenants + 4) / PAGE)
    missed = []
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as workdir:
        with open(os.path.join(workdir, "tenants.yml"), "w") as handle:
            handle.write(PLAYBOOK)
        server = Server(workdir)
        try:
            server.gpu_nodes()
            wall, result, counts = run(server, workdir, declared)
            writes = sum(n for verb, n in counts.items() if verb in WRITES)
            print("first run  %d tenants: %.1f s, requests: %s (%d objects written)"
                  % (args.tenants, wall, verbs(counts), len(result.get("changes") or [])))
            if writes > objects or counts.get("list", 0) > lists:
                missed.append("first run")
            print("  target: at most %d writes and %d listings: %s"
                  % (objects, lists, "MISSED" if "first run" in missed else "met"))

            wall, result, counts = run(server, workdir, declared)
            writes = sum(n for verb, n in counts.items() if verb in WRITES)
            print("re-run     %d tenants: %.1f s, requests: %s, changed: %s"
                  % (args.tenants, wall, verbs(counts), result.get("changed")))
            if writes or result.get("changed") or counts.get("list", 0) > lists or set(counts) - {"list"}:
                missed.append("re-run")
            print("  target: no write, at most %d listings: %s" % (lists, "MISSED" if "re-run" in missed else "met"))
        finally:
            server.stop()
    print("targets: %s" % ("MISSED: " + ", ".join(missed) if missed else "met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
