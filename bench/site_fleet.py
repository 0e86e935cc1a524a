"""Benchmark the control-host plays of kubegpu.nvidia.site for a fleet of GPU hosts; prints its figures.

The plays of site.yml that run on the control host, or once for all GPU hosts (preflight, labels, device plugin,
validation, summary), for N GPU hosts (default 1000) whose GPU facts come from Ansible's fact cache (jsonfile, as
an earlier run of the facts play leaves them; tests/support/ansible_run.py write_cached_facts), against the
Kubernetes API test server (tests/support/kubeapi) with N simulated GPU nodes (1 Tesla T4 each). The facts play
(a module run on every GPU host) is skipped (--skip-tags facts,driver,toolkit); the inventory puts the hosts in
kubegpu_gpu, the group that play would build.

Two runs: the first labels and taints every node, applies the device plugin and validates every node with a pod;
the second is a no-op re-run (it must change nothing). For each: wall time, task slots (task results over all
hosts), module runs (results of tasks that ran a module), the API requests by verb, and the five slowest tasks.

Usage: . scripts/env.sh && python bench/site_fleet.py [--hosts N] [--forks F]
"""
import argparse
import importlib.util
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import ansible_run  # noqa: E402  pylint: disable=wrong-import-position
from kubeapi import KubeAPIServer  # noqa: E402  pylint: disable=wrong-import-position

# the actions bench/site.py counts as run on the control machine alone (its file name is the standard module's)
_SPEC = importlib.util.spec_from_file_location("bench_site", str(ROOT / "bench" / "site.py"))
_BENCH_SITE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_BENCH_SITE)
CONTROLLER_ACTIONS = _BENCH_SITE.CONTROLLER_ACTIONS

SIMULATED = "kubegpu.io/simulated-gpus"
T4 = {"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5", "pci_class": "0x030200",
      "mig": {"current": None, "pending": None, "devices": None}, "index": 0}
GPU_FACTS = {"present": True, "count": 1, "source": "nvml", "driver_version": "535.104.05", "cuda_driver_version": "12.2",
             "machine": "fleet", "devices": [T4]}


def setup(directory, server, count):
    """N nodes on the server, their hosts' facts in the cache, and the inventory."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(server.kubeconfig_path))
    hosts = ["gpu-%04d" % i for i in range(count)]
    facts = directory / "facts"
    facts.mkdir()
    for host in hosts:
        api.create_node({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": host, "labels": {"kubernetes.io/hostname": host},
                                      "annotations": {SIMULATED: "1"}}})
        ansible_run.write_cached_facts(facts, host, {"nvidia_gpu": GPU_FACTS})
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"children": {
        "gpu_nodes": {"hosts": dict.fromkeys(hosts, {"ansible_connection": "local"})},
        "kubegpu_gpu": {"hosts": dict.fromkeys(hosts, {})},
        "k8s_control": {"hosts": {"localhost": local}}}}}
    path = directory / "inventory.json"
    path.write_text(json.dumps(inventory))
    return path, facts


def run(server, inventory, facts, forks):
    server.reset_counts()
    extra = {"kubegpu_kubeconfig": server.kubeconfig_path, "k8s_device_plugin_wait_timeout": 600,
             "k8s_device_plugin_wait_delay": 2, "gpu_validation_timeout": 600, "gpu_validation_delay": 2}
    start = time.monotonic()
    result = ansible_run.run(["-i", inventory, "kubegpu.nvidia.site", "--skip-tags", "facts,driver,toolkit",
                              "-e", json.dumps(extra), "--forks", str(forks)],
                             fact_cache=facts, timeout=3600, env={"ANSIBLE_FORKS": str(forks)})
    wall = time.monotonic() - start
    if result.rc != 0:
        failed = [(t["task"]["name"], h, r.get("msg")) for p in result.data["plays"] for t in p["tasks"]
                  for h, r in t["hosts"].items() if r.get("failed")]
        raise SystemExit("site.yml failed: %s\n%s" % (failed[:3], result.stderr[-2000:]))
    slots = modules = 0
    durations = []
    for play in result.data["plays"]:
        for task in play["tasks"]:
            durations.append((round(ansible_run.task_seconds(task), 1), len(task["hosts"]), task["task"]["name"]))
            for res in task["hosts"].values():
                slots += 1
                action = (res.get("action") or "").rsplit(".", 1)[-1]
                if not res.get("skipped") and action not in CONTROLLER_ACTIONS:
                    modules += 1
    changed = sum(s.get("changed", 0) for s in result.data["stats"].values())
    return {"wall_s": round(wall, 1), "task_slots": slots, "module_runs": modules, "changed": changed,
            "api": dict(sorted(server.request_counts().items())), "slowest": sorted(durations, reverse=True)[:5]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--forks", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        server = KubeAPIServer(tls=True, kubeconfig_path=str(directory / "kubeconfig")).start()
        try:
            inventory, facts = setup(directory, server, args.hosts)
            first = run(server, inventory, facts, args.forks)
            again = run(server, inventory, facts, args.forks)
        finally:
            server.stop()
    print("control-host plays of site.yml, %d GPU hosts from the fact cache, forks %d, API test server"
          % (args.hosts, args.forks))
    for name, fig in (("first run", first), ("no-op re-run", again)):
        calls = sum(fig["api"].values())
        print("%-13s %7.1f s  %6d task slots  %5d module runs  changed %-5d  %6d API requests %s"
              % (name, fig["wall_s"], fig["task_slots"], fig["module_runs"], fig["changed"], calls,
                 json.dumps(fig["api"])))
        for seconds, hosts, task in fig["slowest"]:
            print("    %6.1f s  %5d host(s)  %s" % (seconds, hosts, task))
    if again["changed"]:
        raise SystemExit("the re-run changed %d result(s)" % again["changed"])


if __name__ == "__main__":
    main()
