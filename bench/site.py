"""Benchmark kubegpu.nvidia.site on the lab; prints its figures.

In one run, over the lab's hosts (lab/inventory.yml: four nodes and localhost as k8s_control):
1. site.yml on fresh nodes (first run: toolkit packages, runtime configuration, labels, device
   plugin, validation);
2. site.yml again (a no-op re-run: it must change nothing);
3. a one-task playbook (ansible.builtin.ping) over the same hosts, the floor of any run.
For each: wall time, tasks (distinct tasks that ran on some host), task results (tasks x hosts)
and changed results. Target: the no-op re-run takes at most 4 times the one-task playbook.

It also prints where the median no-op re-run's time goes, from the task durations of the JSON
callback: the module runs (tasks that ran a module on a node or the control host), the tasks Ansible
runs on the control machine alone (set_fact, assert, argument specs, includes, group_by, debug), the
tasks skipped on every host, and the rest of the wall time (start-up, loading the playbook and roles,
play changes). The module runs' share against the whole one-task playbook is what a no-op re-run of
the same reads would cost with every other task gone.

Steps 2 and 3 run --repeat times (default 3), one after the other in turn, and the figures are the
medians (every sample is printed): a run takes some 10 s on a shared 2-core machine whose speed
drifts by a tenth or more from one minute to the next, and a ratio of two single runs moves with it.
Every no-op re-run must change nothing.

Per GPU host (the lab's hosts whose lab_gpu_profile is not cpu) it prints the no-op re-run's module runs
(results of tasks that ran a module on that host; a task delegated to the control host counts for the
host it ran for) and task slots (every result the host got, skipped ones included).

With --nodes 4 8 it does all this for the four-node lab, then again for the eight-node one (LAB_NODES=8:
lab/inventory-8.yml, one more node of each profile), and prints what the four added nodes cost.

Usage: . scripts/env.sh && python bench/site.py [--keep] [--repeat N] [--nodes 4 [8]]
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
INVENTORIES = {4: ROOT / "lab" / "inventory.yml", 8: ROOT / "lab" / "inventory-8.yml"}
SITE_VARS = ROOT / "lab" / ".state" / "site-vars.yml"
TARGET_RATIO = 4.0
sys.path.insert(0, str(ROOT / "tests" / "support"))

import ansible_run  # noqa: E402  pylint: disable=wrong-import-position

# actions that run in the controller's worker process and send nothing to a host
CONTROLLER_ACTIONS = frozenset(["add_host", "assert", "debug", "fail", "group_by", "import_role", "import_tasks",
                                "include_role", "include_tasks", "include_vars", "meta", "set_fact", "set_stats",
                                "validate_argument_spec"])
PING = """
- name: One task on every host
  hosts: gpu_nodes:k8s_control
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def sh(nodes, *cmd):
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, LAB_NODES=str(nodes)))


def gpu_hosts(nodes):
    """The lab's GPU hosts (lab_gpu_profile other than cpu) in the inventory of ``nodes`` nodes."""
    import yaml  # pylint: disable=import-outside-toplevel

    hosts = yaml.safe_load(INVENTORIES[nodes].read_text())["gpu_nodes"]["hosts"]
    return [name for name, hostvars in hosts.items() if hostvars.get("lab_gpu_profile") != "cpu"]


def per_host(out, hosts):
    """{host: (module runs, task slots)} of a run's JSON callback output ``out``, for ``hosts``."""
    found = dict((host, [0, 0]) for host in hosts)
    for one_play in out["plays"]:
        for task in one_play["tasks"]:
            for host, result in task["hosts"].items():
                if host not in found:
                    continue
                found[host][1] += 1
                if not result.get("skipped") and result.get("action", "").rsplit(".", 1)[-1] not in CONTROLLER_ACTIONS:
                    found[host][0] += 1
    return dict((host, tuple(counts)) for host, counts in found.items())


def play(inventory, *args):
    """Run ansible-playbook with the JSON callback; return (seconds, tasks, results, changed, anatomy, out)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    started = time.perf_counter()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory)] + list(args), cwd=ROOT, env=env,
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
    return seconds, tasks, results, changed, anatomy(out, seconds), out


def anatomy(out, wall):
    """Where a run's wall time went, from the JSON callback's output ``out``.

    {kind: [tasks, seconds]} for "module runs" (some host ran a module), "controller tasks" (only actions of
    CONTROLLER_ACTIONS ran), "skipped tasks" (skipped on every host) and "start-up and plays" (``wall``
    less the tasks' durations: start-up, loading the playbook, roles and plugins, moving between plays).
    """
    parts = {"module runs": [0, 0.0], "controller tasks": [0, 0.0], "skipped tasks": [0, 0.0]}
    for one_play in out["plays"]:
        for task in one_play["tasks"]:
            seconds = ansible_run.task_seconds(task)
            ran = [r for r in task["hosts"].values() if not r.get("skipped")]
            if not ran:
                kind = "skipped tasks"
            elif any(r.get("action", "").rsplit(".", 1)[-1] not in CONTROLLER_ACTIONS for r in ran):
                kind = "module runs"
            else:
                kind = "controller tasks"
            parts[kind][0] += 1
            parts[kind][1] += seconds
    parts["start-up and plays"] = [0, wall - sum(seconds for _n, seconds in parts.values())]
    return parts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the (last) lab running afterwards")
    parser.add_argument("--repeat", type=int, default=3, help="no-op re-runs and one-task runs, in turn (median)")
    parser.add_argument("--nodes", type=int, nargs="+", choices=sorted(INVENTORIES), default=[4],
                        help="lab sizes to measure, one after the other")
    args = parser.parse_args()
    sizes = {}
    for index, nodes in enumerate(args.nodes):
        sizes[nodes] = measure(nodes, args.repeat, keep=args.keep and index == len(args.nodes) - 1)
        if sizes[nodes] is None:
            return 1
    if len(sizes) > 1:
        compare(sizes)
    return 0


def measure(nodes, repeat, keep=False):
    """Measure the lab of ``nodes`` nodes; print its figures; return (no-op median, one-task median, GPU hosts)."""
    inventory = INVENTORIES[nodes]
    print("recreating the %d-node lab (scripts/lab.sh down; nodes; lab/cluster.yml) ..." % nodes, flush=True)
    sh(nodes, "scripts/lab.sh", "down")
    sh(nodes, "scripts/lab.sh", "nodes")
    sh(nodes, "ansible-playbook", "-i", str(inventory), "lab/cluster.yml")
    site = ["-e", "@%s" % SITE_VARS, "kubegpu.nvidia.site"]
    try:
        first = play(inventory, *site)
        noops, pings = [], []
        with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=ROOT / "lab" / ".state") as ping:
            ping.write(PING)
            ping.flush()
            for _round in range(max(repeat, 1)):
                noops.append(play(inventory, *site))
                pings.append(play(inventory, ping.name))
    finally:
        if not keep:
            sh(nodes, "scripts/lab.sh", "down")

    rows = [("site.yml, first run",) + first,
            ("site.yml, no-op re-run",) + median(noops),
            ("one-task playbook (ping)",) + median(pings)]
    print("%d-node lab (%s)" % (nodes, inventory.relative_to(ROOT)))
    print("%-26s %9s %6s %8s %8s" % ("run", "seconds", "tasks", "results", "changed"))
    for name, seconds, tasks, results, changed, _parts, _out in rows:
        print("%-26s %9.1f %6d %8d %8d" % (name, seconds, tasks, results, changed))
    print("samples (s): no-op re-run %s; one-task playbook %s"
          % (", ".join("%.1f" % n[0] for n in noops), ", ".join("%.1f" % p[0] for p in pings)))
    ratio = rows[1][1] / rows[2][1]
    print("no-op re-run / one-task playbook (medians): %.1fx (target <= %.0fx): %s"
          % (ratio, TARGET_RATIO, "met" if ratio <= TARGET_RATIO else "NOT met"))
    noop, ping_seconds = rows[1], rows[2][1]
    print("where the median no-op re-run's %.1f s go:" % noop[1])
    for kind, (count, seconds) in noop[5].items():
        print("  %-20s %3s tasks %6.1f s  %4.1fx the one-task playbook"
              % (kind, count if kind != "start-up and plays" else "", seconds, seconds / ping_seconds))
    hosts = gpu_hosts(nodes)
    counts = [per_host(n[5], hosts) for n in noops]
    print("per GPU host, no-op re-runs (module runs, task slots): %s"
          % "; ".join("%s %s" % (host, "/".join("%d,%d" % c[host] for c in counts)) for host in hosts))
    changed = max(n[3] for n in noops)
    print("no-op re-runs' changed results: %d (must be 0)" % changed)
    return None if changed else (noop, rows[2], hosts, counts[-1])


def compare(sizes):
    """What the added nodes cost: the no-op re-run's wall time and results per added GPU host."""
    (small, (noop_s, ping_s, hosts_s, counts_s)), (large, (noop_l, ping_l, hosts_l, counts_l)) = sorted(sizes.items())
    added = len(hosts_l) - len(hosts_s)
    print("%d -> %d nodes (%d -> %d GPU hosts): no-op re-run %.1f s -> %.1f s, %+.2f s per added GPU host; "
          "one-task playbook %.1f s -> %.1f s; results %d -> %d; module runs per GPU host %s -> %s; "
          "task slots per GPU host %s -> %s"
          % (small, large, len(hosts_s), len(hosts_l), noop_s[1], noop_l[1], (noop_l[1] - noop_s[1]) / added,
             ping_s[1], ping_l[1], noop_s[3], noop_l[3],
             sorted(set(c[0] for c in counts_s.values())), sorted(set(c[0] for c in counts_l.values())),
             sorted(set(c[1] for c in counts_s.values())), sorted(set(c[1] for c in counts_l.values()))))


def median(samples):
    """The sample of median wall time (its task counts with it)."""
    ordered = sorted(samples, key=lambda sample: sample[0])
    return ordered[(len(ordered) - 1) // 2]


if __name__ == "__main__":
    sys.exit(main())
