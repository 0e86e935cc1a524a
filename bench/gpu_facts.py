"""Benchmark kubegpu.nvidia.nvidia_gpu_facts; prints its figures.

1. In-process: discover_gpus() over the fake 8-GPU library (h100x8 profile) under the real
   pynvml, each call a full NVML init/shutdown plus the label computation. Target: < 50 ms.
2. Payload: the size of the module as Ansible sends it (AnsiballZ: the module and every module_utils
   file it imports) for nvidia_gpu_facts, nvidia_gpu_host_facts (the module nvidia_gpu_facts' action
   plugin runs for gather_subset), ansible.builtin.ping and ansible.builtin.setup.
3. Lab, per task: one ansible-playbook run against the 8-GPU lab node kubegpu-lab-h100 whose tasks
   alternate nvidia_gpu_facts, ansible.builtin.setup and ansible.builtin.ping (--runs rounds after a
   warm-up round); the task durations from the JSON callback, medians. This is what each call costs a
   play. Target: nvidia_gpu_facts at most half of setup. Also nvidia_gpu_facts with site.yml's
   gather_subset against setup with the same subset (one run instead of setup plus the facts module).
4. Lab, whole command (--cli): wall time of `ansible -m <module>` on the same node, alternated, medians,
   ping included: every such command pays the same start-up of the ansible command (about 0.8 s on the
   2-core test machine), which the ratio cannot go below.

Usage: . scripts/env.sh && python bench/gpu_facts.py [--runs N] [--calls N] [--skip-lab] [--cli]
The lab part starts the nodes with `scripts/lab.sh nodes` when kubegpu-lab-h100 is not running.
"""
import argparse
import base64
import io
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NODE = "kubegpu-lab-h100"
INVENTORY = ROOT / "lab" / "inventory.yml"
SITE_SUBSET = ["!all", "!min", "distribution", "platform", "network", "virtual"]
FACTS = "kubegpu.nvidia.nvidia_gpu_facts"
HOST_FACTS = "kubegpu.nvidia.nvidia_gpu_host_facts"
SETUP = "ansible.builtin.setup"
PING = "ansible.builtin.ping"
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


_LOADER = []


def payload(module):
    """(bytes sent, files in the zip) of the AnsiballZ payload of ``module``; None where it cannot be built here.

    Uses ansible-core's own builder (an internal interface, so only a figure: it may change between versions).
    """
    try:
        from ansible.executor import module_common
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins.loader import init_plugin_loader, module_loader
        from ansible.template import Templar

        if not _LOADER:
            init_plugin_loader([str(ROOT / ".cache" / "collections")])
            _LOADER.append(True)
        built = module_common.modify_module(
            module_name=module, module_path=module_loader.find_plugin(module), module_args={},
            templar=Templar(loader=DataLoader()), task_vars={"ansible_python_interpreter": "/usr/bin/python3"},
            module_compression="ZIP_DEFLATED")
        data = built.b_module_data
        files = 0
        for match in re.finditer(rb"[A-Za-z0-9+/=]{2000,}", data):
            files += len(zipfile.ZipFile(io.BytesIO(base64.b64decode(match.group(0)))).namelist())
        return len(data), files
    except Exception:  # pylint: disable=broad-except  # a figure only
        return None


def node_running():
    proc = subprocess.run(["docker", "container", "inspect", "--format", "{{.State.Running}}", NODE],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() == "true"


def ensure_node():
    if not node_running():
        print("starting the lab nodes (scripts/lab.sh nodes) ...", flush=True)
        subprocess.run([str(ROOT / "scripts" / "lab.sh"), "nodes"], check=True, stdout=subprocess.DEVNULL)


CASES = (
    ("facts", FACTS, {}),
    ("setup", SETUP, {}),
    ("ping", PING, {}),
    ("facts+subset", FACTS, {"gather_subset": SITE_SUBSET}),
    ("setup+subset", SETUP, {"gather_subset": SITE_SUBSET}),
)


def measure_tasks(runs):
    """Median task duration per case over ``runs`` rounds of one playbook (after a warm-up round)."""
    tasks = []
    for round_number in range(runs + 1):
        for name, module, args in CASES:
            tasks.append({"name": "%s %d" % (name, round_number), module: args})
    playbook = [{"hosts": NODE, "gather_facts": False, "tasks": tasks}]
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "bench.yml"
        path.write_text(json.dumps(playbook))
        run = ansible_run.run_playbook(path, INVENTORY, python=None, timeout=None)
    if run.rc != 0:
        raise SystemExit("the benchmark playbook failed on %s:\n%s%s" % (NODE, run.stdout, run.stderr))
    times = dict((name, []) for name, _module, _args in CASES)
    for play in run.data["plays"]:
        for task in play["tasks"]:
            name, round_number = task["task"]["name"].rsplit(" ", 1)
            if int(round_number) > 0:
                times[name].append(ansible_run.task_seconds(task))
    return dict((name, statistics.median(values)) for name, values in times.items())


def time_ansible(module):
    started = time.perf_counter()
    run = ansible_run.run_module(module, hosts=NODE, inventory=INVENTORY, python=None, timeout=None)
    elapsed = time.perf_counter() - started
    if run.rc != 0:
        raise SystemExit("%s failed on %s:\n%s%s" % (module, NODE, run.stdout, run.stderr))
    return elapsed


def measure_cli(runs):
    times = {FACTS: [], SETUP: [], PING: []}
    time_ansible(FACTS)  # warm-up: connection plugin, caches
    for dummy in range(runs):
        for module, values in times.items():
            values.append(time_ansible(module))
    return dict((module, statistics.median(values)) for module, values in times.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds of each kind on the lab node")
    parser.add_argument("--calls", type=int, default=50, help="in-process discovery calls")
    parser.add_argument("--skip-lab", action="store_true", help="only the in-process and payload figures")
    parser.add_argument("--cli", action="store_true", help="also time whole `ansible -m` commands")
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
    for module in (FACTS, HOST_FACTS, PING, SETUP):
        size = payload(module)
        print("payload %-38s %s" % (module, "%7.1f KiB, %3d files" % (size[0] / 1024.0, size[1]) if size
                                    else "not measurable with this ansible-core"))
    if args.skip_lab:
        return 0 if ok else 1

    ensure_node()
    median = measure_tasks(args.runs)
    ratio = median["facts"] / median["setup"]
    print("lab node %s, task durations, median of %d rounds: nvidia_gpu_facts %.3f s, ansible.builtin.setup %.3f s, "
          "ansible.builtin.ping %.3f s; ratio %.2f (ping/setup %.2f: no module run costs less than ping)  "
          "target <= 0.50: %s"
          % (NODE, args.runs, median["facts"], median["setup"], median["ping"], ratio, median["ping"] / median["setup"],
             "OK" if ratio <= 0.5 else "MISSED"))
    print("with site.yml's gather_subset %s: nvidia_gpu_facts %.3f s (one run) against setup %.3f s + "
          "nvidia_gpu_facts %.3f s (two runs) = %.3f s"
          % (",".join(SITE_SUBSET), median["facts+subset"], median["setup+subset"], median["facts"],
             median["setup+subset"] + median["facts"]))
    ok = ok and ratio <= 0.5
    if args.cli:
        cli = measure_cli(args.runs)
        print("lab node %s, whole `ansible -m` commands, median of %d: nvidia_gpu_facts %.2f s, setup %.2f s, "
              "ping %.2f s; ratio nvidia_gpu_facts/setup %.2f (ping/setup %.2f: the floor of this ratio)"
              % (NODE, args.runs, cli[FACTS], cli[SETUP], cli[PING], cli[FACTS] / cli[SETUP], cli[PING] / cli[SETUP]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
