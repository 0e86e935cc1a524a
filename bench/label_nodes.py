"""Benchmark: label and taint 1,000 and 5,000 simulated GPU nodes three ways, and print the figures.

For each cluster size, against the Kubernetes API test server (tests/support/kubeapi, run as its own
process over HTTPS), with N nodes marked as simulated GPU nodes:

  batched     one kubegpu.nvidia.k8s_gpu_label task with `nodes:` (all N, each with its nvidia_gpu facts as
              the role k8s_gpu_node passes them: the fields the labels come from), run by `ansible-playbook`
              with its default output (Ansible start-up included; what it did is read back from the API),
              then run again with nothing to change; also the same call
              through the module's Python entry in-process (no Ansible start-up, full facts)
  per node    one module call per node, as `delegate_to` per host would: the module's Python entry driven
              in-process once per node (a fresh API client each call, no Ansible start-up or fork, so this
              is a lower bound for a real per-host loop); by default on a sample of 200 nodes,
              extrapolated to N (printed as such)
  kubectl     `kubectl label node NAME <the same labels> --overwrite`, one process per node (Debian's
              kubernetes-client package, unpacked into .cache/ when missing); by default on a sample of
              50 nodes, extrapolated to N (printed as such); taints would need one more `kubectl taint`
              process per node, not counted

The server runs as its CLI runs it (kubelet stand-in on). Each leg writes every node once (each uses
other facts, so every node differs). Request counts come from the server. Targets checked, printed per
size and summed up at the end as "met" or "MISSED" (exit status 1 when one is missed):

  re-run      the batched re-run makes one LIST (paged by 500 nodes: ceil(N/500) requests) and no write
  first run   the batched first run makes at most one write per node plus the LIST
  20x         the batched call through ansible-playbook (first run: it writes every node, as the kubectl
              leg does; Ansible start-up included) is at least 20 times faster than kubectl per node;
              the in-process figure is printed beside it for reference, but only the ansible-playbook
              figure decides the target

First it prints what importing the module's Kubernetes client costs in a fresh Python, and what importing
the kubernetes library's CoreV1Api on top would cost (every module run pays it).

    python bench/label_nodes.py [--sizes 1000,5000] [--kubectl-sample 50] [--per-node-sample 200]
"""
import argparse
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, ".cache", "collections"), os.path.join(ROOT, "tests", "support")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from ansible.module_utils.testing import patch_module_args  # noqa: E402

import ansible_run  # noqa: E402
from kubeapi.process import ServerProcess  # noqa: E402

from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_node_requests import label_facts  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.modules import k8s_gpu_label  # noqa: E402

PAGE = 500
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PROFILES = [
    ("NVIDIA H100 80GB HBM3", 8, 81559, "9.0", "hopper", {"current": 0, "pending": 0}),
    ("NVIDIA A100-SXM4-40GB", 4, 40960, "8.0", "ampere", {"current": 1, "pending": 1}),
    ("Tesla T4", 1, 15360, "7.5", "turing", {"current": None, "pending": None}),
]


def as_role_passes(facts):
    """The facts the role k8s_gpu_node passes for a host: the filter kubegpu.nvidia.gpu_node_requests's own
    ``label_facts`` (the fields the labels come from, identical neighbouring devices merged with a count)."""
    return label_facts(facts)


def facts_for(index, driver):
    name, count, memory, cc, family, mig = PROFILES[index % len(PROFILES)]
    devices = [{"index": i, "name": name, "product": name.replace(" ", "-"), "uuid": "GPU-%d-%d" % (index, i),
                "memory_mib": memory, "pci_bus_id": "00000000:%02X:00.0" % (0x18 + i), "compute_capability": cc,
                "family": family, "mig": dict(mig)} for i in range(count)]
    return {"present": True, "count": count, "source": "nvml", "driver_version": driver,
            "cuda_driver_version": "12.2", "devices": devices, "machine": "Bench Node"}


class Server(ServerProcess):
    """The API test server in its own process, exactly as its CLI runs it (kubelet stand-in on, TCP_NODELAY as
    Go's net/http)."""

    def __init__(self, workdir):
        super().__init__(workdir, pool_size=8)

    def create_nodes(self, names):
        def create(name):
            self.core.create_node({"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                                                "annotations": {"kubegpu.io/simulated-gpus": "1"}}},
                                  _preload_content=False)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, names))
        self.reset()


def run_playbook(server, workdir, nodes):
    """ansible-playbook with the one task, as a user runs it (the default stdout callback); (wall s, changed).

    The JSON callback would add the encoding of the whole result (per-node changes: megabytes for
    thousands of nodes) to the run's time, which the default output never pays; what the run did is
    read from the API server instead (request counts, the nodes' labels and taints).
    """
    nodes = [dict(item, facts=as_role_passes(item["facts"])) for item in nodes]
    # The node list reaches the task as JSON read back with from_json. (A vars_files entry of this size
    # costs seconds more with ansible-core 2.19: it is parsed again at each variable lookup, tagging every
    # string with its origin.)
    nodes_file = os.path.join(workdir, "nodes.json")
    with open(nodes_file, "w") as handle:
        json.dump(nodes, handle)
    playbook = os.path.join(workdir, "label.yml")
    with open(playbook, "w") as handle:
        handle.write("- name: Label GPU nodes\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
                     "    - name: Label and taint all nodes in one call\n"
                     "      kubegpu.nvidia.k8s_gpu_label:\n        nodes: \"{{ bench_nodes }}\"\n"
                     "        taints: [\"nvidia.com/gpu=present:NoSchedule\"]\n        remove_stale: true\n"
                     "      vars:\n        bench_nodes: \"{{ lookup('ansible.builtin.file', '%s') | from_json }}\"\n"
                     % nodes_file)
    start = time.monotonic()
    run = ansible_run.run_playbook(playbook, "localhost,", connection="local", kubeconfig=server.kubeconfig,
                                   timeout=None, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"})
    wall = time.monotonic() - start
    recap = re.search(r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0\b", run.stdout, re.M)
    if run.rc != 0 or not recap:
        raise SystemExit("batched run failed (rc %s):\n%s\n%s" % (run.rc, run.stdout[-3000:], run.stderr[-2000:]))
    return wall, recap.group(1) != "0"


def labelled_nodes(server, driver_major):
    """How many nodes carry the GPU taint and the labels of facts with this driver (read after a run)."""
    count = 0
    for node in server.core.list_node().items:
        labels = node.metadata.labels or {}
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        if (labels.get("nvidia.com/gpu.present") == "true" and labels.get("nvidia.com/cuda.driver.major") == driver_major
                and ("nvidia.com/gpu", "present", "NoSchedule") in taints):
            count += 1
    return count


def run_module(server, args):
    """The module's main() in-process; returns its result dict."""
    out = io.StringIO()
    args = dict(args, kubeconfig=server.kubeconfig)
    with patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            k8s_gpu_label.main()
        except SystemExit:
            pass
    result = json.loads(out.getvalue())
    if result.get("failed"):
        raise SystemExit("module call failed: %s" % result.get("msg"))
    return result


def find_kubectl():
    """Debian's kubectl (kubernetes-client), unpacked into .cache/ with apt-get download when missing."""
    cached = os.path.join(ROOT, ".cache", "kubernetes-client", "usr", "bin", "kubectl")
    if os.path.exists(cached):
        return cached, "Debian kubernetes-client"
    if shutil.which("apt-get") and shutil.which("dpkg-deb"):
        tmp = tempfile.mkdtemp()
        try:
            subprocess.run(["apt-get", "download", "kubernetes-client"], cwd=tmp, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deb = [f for f in os.listdir(tmp) if f.endswith(".deb")][0]
            subprocess.run(["dpkg-deb", "-x", os.path.join(tmp, deb), os.path.dirname(os.path.dirname(
                os.path.dirname(cached)))], check=True)
            return cached, "Debian kubernetes-client"
        except (subprocess.CalledProcessError, IndexError, OSError):
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    found = shutil.which("kubectl")
    if found:
        return found, "kubectl from PATH (Debian's kubernetes-client could not be fetched)"
    raise SystemExit("no kubectl")


def leg_batched(server, workdir, names):
    nodes = [{"name": n, "facts": facts_for(i, "535.183.01")} for i, n in enumerate(names)]
    server.reset()
    wall, _changed = run_playbook(server, workdir, nodes)
    first = server.counts()
    changed = labelled_nodes(server, "535")
    server.reset()
    rewall, rerun_changed = run_playbook(server, workdir, nodes)
    rerun = server.counts()
    # The same batch through the module's Python entry, with other facts so every node differs again.
    nodes2 = [{"name": n, "facts": facts_for(i, "535.216.03")} for i, n in enumerate(names)]
    server.reset()
    start = time.monotonic()
    run_module(server, {"nodes": nodes2, "taints": [GPU_TAINT], "remove_stale": True})
    inproc = time.monotonic() - start
    inproc_counts = server.counts()
    return {"wall": wall, "counts": first, "changed": changed, "rerun_wall": rewall, "rerun_counts": rerun,
            "rerun_changed": rerun_changed, "inproc_wall": inproc, "inproc_counts": inproc_counts}


def leg_per_node(server, names, sample):
    chosen = names if not sample or sample >= len(names) else names[:sample]
    server.reset()
    start = time.monotonic()
    for i, name in enumerate(chosen):
        run_module(server, {"node": name, "facts": facts_for(i, "550.54.15"), "taints": [GPU_TAINT],
                            "remove_stale": True})
    wall = time.monotonic() - start
    return {"wall": wall, "counts": server.counts(), "done": len(chosen)}


def leg_kubectl(server, names, sample, kubectl):
    chosen = names[:sample] if sample and sample < len(names) else names
    server.reset()
    start = time.monotonic()
    for i, name in enumerate(chosen):
        labels = k8s_gpu_label.labels_from_facts(facts_for(i, "560.35.03"))
        cmd = [kubectl, "--kubeconfig", server.kubeconfig, "label", "node", name, "--overwrite"]
        cmd += ["%s=%s" % kv for kv in sorted(labels.items())]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - start
    return {"wall": wall, "counts": server.counts(), "done": len(chosen)}


IMPORT_PROBES = [
    ("the module's client (kubernetes, DynamicClient)",
     "from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_client"),
    ("the same plus CoreV1Api (the generated API class)",
     "from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_client\n"
     "from kubernetes.client import CoreV1Api"),
]


def client_costs(runs=5):
    """Seconds to import the module's Kubernetes client in a fresh Python, with and without CoreV1Api (best of runs).

    Every module run pays this: the reason the requests go by path through DynamicClient.request (see
    docs/k8s_gpu_label.md) rather than through CoreV1Api's methods.
    """
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"))
    costs = []
    for what, code in IMPORT_PROBES:
        timing = "import time\nstart = time.perf_counter()\n%s\nprint(time.perf_counter() - start)" % code
        best = min(float(subprocess.run([sys.executable, "-c", timing], capture_output=True, text=True, env=env,
                                        check=True).stdout) for _run in range(runs))
        costs.append((what, best))
    return costs


def fmt_counts(counts):
    return ", ".join("%s %d" % kv for kv in sorted(counts.items())) or "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--kubectl-sample", type=int, default=50,
                        help="nodes labelled with kubectl per size (0 = all), extrapolated to N")
    parser.add_argument("--per-node-sample", type=int, default=200,
                        help="nodes done one module call each (0 = all), extrapolated to N")
    args = parser.parse_args()
    kubectl, kubectl_what = find_kubectl()
    version = subprocess.run([kubectl, "version", "--client", "--short"], capture_output=True, text=True,
                             check=False).stdout.strip().splitlines()
    print("kubectl: %s (%s)" % (kubectl_what, version[0] if version else kubectl))
    print("machine: %d CPUs, load average %.1f" % (os.cpu_count(), os.getloadavg()[0]))
    for what, seconds in client_costs():
        print("import of %-52s %.2f s per module run" % (what + ":", seconds))
    ok = True
    summary = []
    for size in [int(s) for s in args.sizes.split(",")]:
        workdir = tempfile.mkdtemp(prefix="bench-label-")
        server = Server(workdir)
        try:
            names = ["gpu-node-%05d" % i for i in range(size)]
            start = time.monotonic()
            server.create_nodes(names)
            print("\n== %d simulated GPU nodes (created in %.1fs) ==" % (size, time.monotonic() - start))
            batched = leg_batched(server, workdir, names)
            per_node = leg_per_node(server, names, args.per_node_sample)
            kubectl_leg = leg_kubectl(server, names, args.kubectl_sample, kubectl)
        finally:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)

        pages = math.ceil(size / PAGE)
        per_node_total = per_node["wall"] * size / per_node["done"]
        kubectl_total = kubectl_leg["wall"] * size / kubectl_leg["done"]
        print("%-44s %10s  %s" % ("leg", "wall s", "API requests (server count)"))
        print("%-44s %10.2f  %s" % ("batched, ansible-playbook, first run", batched["wall"],
                                    fmt_counts(batched["counts"])))
        print("%-44s %10.2f  %s" % ("batched, ansible-playbook, re-run", batched["rerun_wall"],
                                    fmt_counts(batched["rerun_counts"])))
        print("%-44s %10.2f  %s" % ("batched, module entry in-process", batched["inproc_wall"],
                                    fmt_counts(batched["inproc_counts"])))
        note = "" if per_node["done"] == size else " (%d nodes done, extrapolated)" % per_node["done"]
        print("%-44s %10.2f  %s%s" % ("one module call per node, in-process", per_node_total,
                                      fmt_counts(per_node["counts"]), note))
        note = "" if kubectl_leg["done"] == size else " (%d nodes done in %.1fs, extrapolated to %d)" % (
            kubectl_leg["done"], kubectl_leg["wall"], size)
        print("%-44s %10.2f  %s%s" % ("kubectl label per node", kubectl_total, fmt_counts(kubectl_leg["counts"]),
                                      note))
        speedup = kubectl_total / batched["wall"]
        rerun_speedup = kubectl_total / batched["rerun_wall"]
        rerun_ok = batched["rerun_counts"] == {"list": pages} and batched["rerun_changed"] is False
        first_ok = (batched["counts"].get("list") == pages and batched["counts"].get("patch", 0) <= size
                    and set(batched["counts"]) <= {"list", "patch"} and batched["changed"] == size)
        checks = [
            ("re-run: one LIST (%d page%s of %d), no write" % (pages, "s" if pages > 1 else "", PAGE), rerun_ok,
             fmt_counts(batched["rerun_counts"])),
            ("first run: <= one write per node + the LIST", first_ok,
             "%s, %d nodes labelled and tainted" % (fmt_counts(batched["counts"]), batched["changed"])),
            ("batched (ansible-playbook) >= 20x faster than kubectl", speedup >= 20,
             "%.1fx first run, %.1fx re-run; in-process %.1fx (not the target's figure)" % (
                 speedup, rerun_speedup, kubectl_total / batched["inproc_wall"])),
        ]
        for what, met, detail in checks:
            print("target %-52s %-6s  %s" % (what + ":", "met" if met else "MISSED", detail))
            summary.append((size, what, met, detail))
        print("one call per node vs batched (ansible-playbook): %.1fx slower" % (per_node_total / batched["wall"]))
        ok = ok and rerun_ok and first_ok and speedup >= 20
    print("\n== targets ==")
    for size, what, met, detail in summary:
        print("%-6s %5d nodes  %-52s %s" % ("met" if met else "MISSED", size, what, detail))
    print("all targets met" if ok else "some targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
