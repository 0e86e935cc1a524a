"""Benchmark: the health gate (kubegpu.nvidia.k8s_gpu_health_gate) over 1,000 GPU nodes, and print the figures.

Against the Kubernetes API test server (tests/support/kubeapi, run as its own process over HTTPS) with N nodes,
one `ansible-playbook` run of a play with the one module task (Ansible start-up included) per step:

  first run   every node gets its health label, 2 % of them unhealthy are tainted: one write per node
  re-run      the same health: no write
  change      the unhealthy nodes recover, another 2.5 % turn unhealthy: one write per node whose health changed
  guard       40 % of the nodes read unhealthy: refused before any write

Printed per step: wall time and the server's request counts per verb. Targets, printed as "met" or "MISSED"
(exit status 1 when one is missed): the LIST pages (ceil(N/500)) and at most one write per node whose health
changed, none on the re-run and the guard.

    python bench/gpu_health_gate.py [--nodes 1000]
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
- name: Gate the GPU nodes
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Gate the GPU nodes by their health
      kubegpu.nvidia.k8s_gpu_health_gate:
        nodes: "{{ gate_nodes }}"
      ignore_errors: true
"""
UNHEALTHY = {"severity": "unhealthy", "action": "reset_gpu",
             "reason": "GPU 1 (00000000:2A:00.0): 2 uncorrectable ECC errors since the last GPU reset"}
HEALTHY = {"severity": "healthy", "action": "none", "reason": None}


class Server(ServerProcess):
    """The API test server in its own process."""

    def nodes(self, count):
        for i in range(count):
            self.core.create_node({"metadata": {"name": "gpu%04d" % i}, "spec": {"taints": [GPU_TAINT]}})
        self.reset()


def gate_nodes(count, unhealthy):
    return [{"name": "gpu%04d" % i, "health": UNHEALTHY if i in unhealthy else HEALTHY} for i in range(count)]


def run(server, workdir, nodes):
    """One ansible-playbook run; (wall seconds, module result, server counts)."""
    server.reset()
    start = time.monotonic()
    res = ansible_run.run_playbook(os.path.join(workdir, "gate.yml"), "localhost,", {"gate_nodes": nodes},
                                   connection="local", kubeconfig=server.kubeconfig, timeout=600)
    wall = time.monotonic() - start
    result = res.tasks().get("Gate the GPU nodes by their health") or {}
    if res.rc != 0 and not result:
        raise SystemExit("the playbook failed: %s" % res.rc)
    return wall, result, server.counts()


def verbs(counts):
    return ", ".join("%s %d" % (verb, n) for verb, n in sorted(counts.items())) or "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    count = args.nodes
    print("machine: %d CPUs, load average %.1f" % (os.cpu_count(), os.getloadavg()[0]))
    lists = math.ceil(count / PAGE)
    first = set(range(0, count, 50))                      # 2 %
    later = set(range(1, count, 40))                      # 2.5 %, none of the first
    steps = [
        ("first run", first, count, False),
        ("re-run", first, 0, False),
        ("change", later, len(first) + len(later), False),
        ("guard", set(range(0, count * 2 // 5)), 0, True),
    ]
    missed = []
    with tempfile.TemporaryDirectory(prefix="bench-health-gate-") as workdir:
        with open(os.path.join(workdir, "gate.yml"), "w") as handle:
            handle.write(PLAYBOOK)
        server = Server(workdir)
        try:
            server.nodes(count)
            for name, unhealthy, max_writes, refused in steps:
                wall, result, counts = run(server, workdir, gate_nodes(count, unhealthy))
                writes = sum(n for verb, n in counts.items() if verb in WRITES)
                print("%-10s %d nodes (%d unhealthy): %.1f s, requests: %s%s"
                      % (name, count, len(unhealthy), wall, verbs(counts),
                         ", refused: %s" % result.get("msg", "")[:100] if result.get("failed") else ""))
                ok = (writes <= max_writes and counts.get("list", 0) <= lists and bool(result.get("failed")) == refused
                      and set(counts) <= {"list", "patch"})
                if not ok:
                    missed.append(name)
                print("  target: %d LIST request(s), at most %d writes%s: %s"
                      % (lists, max_writes, ", refused" if refused else "", "met" if ok else "MISSED"))
        finally:
            server.stop()
    print("targets: %s" % ("MISSED: " + ", ".join(missed) if missed else "met"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
