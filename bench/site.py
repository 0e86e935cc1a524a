"""Benchmark kubegpu.nvidia.site on the lab; prints its figures.

In one run, over the lab's hosts (lab/inventory.yml: four nodes and localhost as k8s_control):
1. site.yml on fresh nodes (first run: toolkit packages, runtime configuration, labels, device
   plugin, validation);
2. site.yml again (a no-op re-run: it must change nothing);
3. a one-task playbook (ansible.builtin.ping) over the same hosts, the floor of any run.
For each: wall time, tasks (distinct tasks that ran on some host), task results (tasks x hosts)
and changed results. Target: the no-op re-run takes at most 5 times the one-task playbook.

Usage: . scripts/env.sh && python bench/site.py [--keep]
The lab is recreated first (scripts/lab.sh down, then nodes and lab/cluster.yml) so the first
run starts from bare nodes; it is removed at the end unless --keep.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "lab" / "inventory.yml"
SITE_VARS = ROOT / "lab" / ".state" / "site-vars.yml"
TARGET_RATIO = 5.0
PING = """
- name: One task on every host
  hosts: gpu_nodes:k8s_control
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def sh(*cmd):
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def play(*args):
    """Run ansible-playbook with the JSON callback; return (seconds, tasks, results, changed)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    started = time.perf_counter()
    proc = subprocess.run(["ansible-playbook", "-i", str(INVENTORY)] + list(args), cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit("ansible-playbook %s failed (rc %d):\n%s\n%s"
                 % (" ".join(args), proc.returncode, proc.stdout[-4000:], proc.stderr[-2000:]))
    out = json.loads(proc.stdout)
    tasks = results = 0
    for one_play in out["plays"]:
        for task in one_play["tasks"]:
            ran = [r for r in task["hosts"].values() if not r.get("skipped")]
            tasks += 1 if ran else 0
            results += len(ran)
    changed = sum(s.get("changed", 0) for s in out["stats"].values())
    return seconds, tasks, results, changed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab running afterwards")
    args = parser.parse_args()

    print("recreating the lab (scripts/lab.sh down; nodes; lab/cluster.yml) ...", flush=True)
    sh("scripts/lab.sh", "down")
    sh("scripts/lab.sh", "nodes")
    sh("ansible-playbook", "-i", str(INVENTORY), "lab/cluster.yml")
    site = ["-e", "@%s" % SITE_VARS, "kubegpu.nvidia.site"]
    try:
        rows = [("site.yml, first run",) + play(*site),
                ("site.yml, no-op re-run",) + play(*site)]
        with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT / "lab" / ".state") as ping:
            ping.write(PING)
            ping.flush()
            rows.append(("one-task playbook (ping)",) + play(ping.name))
    finally:
        if not args.keep:
            sh("scripts/lab.sh", "down")

    print("%-26s %9s %6s %8s %8s" % ("run", "seconds", "tasks", "results", "changed"))
    for name, seconds, tasks, results, changed in rows:
        print("%-26s %9.1f %6d %8d %8d" % (name, seconds, tasks, results, changed))
    ratio = rows[1][1] / rows[2][1]
    print("no-op re-run / one-task playbook: %.1fx (target <= %.0fx): %s"
          % (ratio, TARGET_RATIO, "met" if ratio <= TARGET_RATIO else "NOT met"))
    print("no-op re-run changed results: %d (must be 0)" % rows[1][4])
    return 0 if rows[1][4] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
