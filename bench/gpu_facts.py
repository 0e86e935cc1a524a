"""Benchmark kubegpu.nvidia.nvidia_gpu_facts; prints its figures.

1. In-process: discover_gpus() over the fake 8-GPU library (h100x8 profile) under the real
   pynvml, each call a full NVML init/shutdown plus the label computation. Target: < 50 ms.
2. Lab: wall time of `ansible -m kubegpu.nvidia.nvidia_gpu_facts` against
   `ansible -m ansible.builtin.setup` on the 8-GPU lab node kubegpu-lab-h100, alternated,
   median of --runs each. Target: the module costs at most half of setup.

Usage: . scripts/env.sh && python bench/gpu_facts.py [--runs N] [--calls N] [--skip-lab]
The lab part starts the nodes with `scripts/lab.sh nodes` when kubegpu-lab-h100 is not running.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NODE = "kubegpu-lab-h100"
INVENTORY = ROOT / "lab" / "inventory.yml"
sys.path.insert(0, str(ROOT / "tests" / "support"))

import ansible_run  # noqa: E402  pylint: disable=wrong-import-position


def in_process(calls):
    """Run in a child whose LD_LIBRARY_PATH points at the fake library (read by the loader at start)."""
    sys.path.insert(0, str(ROOT / ".cache" / "collections"))
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery import discover_gpus

    started = time.perf_counter()
    facts, warnings = discover_gpus()
    first = time.perf_counter() - started
    assert facts["source"] == "nvml" and facts["count"] == 8, (facts, warnings)
    times = []
    for dummy in range(calls):
        started = time.perf_counter()
        discover_gpus()
        times.append(time.perf_counter() - started)
    print(json.dumps({"first_ms": first * 1000, "median_ms": statistics.median(times) * 1000,
                      "max_ms": max(times) * 1000, "calls": calls}))


def measure_in_process(calls):
    libdir = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True,
                            text=True).stdout.strip().splitlines()[-1]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(libdir, "full"),
               FAKENVML_CONFIG=str(ROOT / "tests" / "support" / "fakenvml" / "profiles" / "h100x8.conf"))
    out = subprocess.run([sys.executable, __file__, "--in-process", "--calls", str(calls)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def node_running():
    proc = subprocess.run(["docker", "container", "inspect", "--format", "{{.State.Running}}", NODE],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() == "true"


def time_ansible(module):
    started = time.perf_counter()
    run = ansible_run.run_module(module, hosts=NODE, inventory=INVENTORY, python=None, timeout=None)
    elapsed = time.perf_counter() - started
    if run.rc != 0:
        raise SystemExit("%s failed on %s:\n%s%s" % (module, NODE, run.stdout, run.stderr))
    return elapsed


def measure_lab(runs):
    if not node_running():
        print("starting the lab nodes (scripts/lab.sh nodes) ...", flush=True)
        subprocess.run([str(ROOT / "scripts" / "lab.sh"), "nodes"], check=True, stdout=subprocess.DEVNULL)
    module, setup = [], []
    time_ansible("kubegpu.nvidia.nvidia_gpu_facts")  # warm-up: connection plugin, caches
    for dummy in range(runs):
        module.append(time_ansible("kubegpu.nvidia.nvidia_gpu_facts"))
        setup.append(time_ansible("ansible.builtin.setup"))
    return statistics.median(module), statistics.median(setup)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="ansible runs of each kind on the lab node")
    parser.add_argument("--calls", type=int, default=50, help="in-process discovery calls")
    parser.add_argument("--skip-lab", action="store_true", help="only the in-process figure")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process:
        in_process(args.calls)
        return 0

    result = measure_in_process(args.calls)
    ok = result["median_ms"] < 50
    print("in-process discovery, 8 GPUs (fake NVML, real pynvml): median %.2f ms, max %.2f ms over %d calls, "
          "first call %.2f ms (loads the library)  target < 50 ms: %s"
          % (result["median_ms"], result["max_ms"], result["calls"], result["first_ms"], "OK" if ok else "MISSED"))
    if not args.skip_lab:
        module, setup = measure_lab(args.runs)
        ratio = module / setup
        print("lab node %s, median of %d runs: nvidia_gpu_facts %.2f s, ansible.builtin.setup %.2f s, "
              "ratio %.2f  target <= 0.50: %s" % (NODE, args.runs, module, setup, ratio,
                                                  "OK" if ratio <= 0.5 else "MISSED"))
        ok = ok and ratio <= 0.5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
