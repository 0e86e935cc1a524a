"""Benchmark: the MIG geometry plan of an 8-GPU node for every shipped config, in-process, and print the figures.

For an 8 x H100 80GB HBM3 node and an 8 x A100-SXM4-40GB node (profile tables from tests/support/mig_profiles.py,
MIG off, no instances), plan every config the collection ships (module_utils/mig_plan.plan over
module_utils/mig_configs): a config whose profiles the GPU lacks is refused (InputError), as the module would
refuse it; that check is timed like a plan. Then, for all-balanced, the same node already at its geometry
(the no-op a second run does).

  parse      the shipped configs parsed (once per process; what the first plan of a module run pays)
  per config the slowest plan of one config, the median, and all configs one after the other

Each figure is the best of --repeat runs (wall clock, one process, no Ansible start-up). Target: every config
planned in under 50 ms on both nodes, printed as "met" or "MISSED" (exit status 1 when missed).

Then the module's work (module_utils/mig_module.work, what nvidia_mig runs) against the fake NVML
(tests/support/fakenvml, 4 x A100-SXM4-40GB of profiles/a100x4-mig.conf, its MIG state in a temporary
FAKENVML_STATE), in a child process whose LD_LIBRARY_PATH points at the fake library: all-balanced applied once,
then applied again --repeat times on the node already at its geometry. Printed: the NVML sessions and the NVML
writes (the state's write counter) of a re-run, and its time. Target: one NVML session (reads only) and no
write.

    python bench/mig_plan.py [--repeat 5]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (os.path.join(ROOT, ".cache", "collections"), os.path.join(ROOT, "tests", "support")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import mig_profiles  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_config, mig_configs, mig_plan  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError  # noqa: E402

TARGET_S = 0.050
NODES = (("8 x H100 80GB HBM3", "H100-80GB"), ("8 x A100-SXM4-40GB", "A100-40GB"))


def best(repeat, work):
    times = []
    result = None
    for _i in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def attempt(gpus, configs, name):
    try:
        node_plan = mig_plan.plan(gpus, configs, name)
    except InputError:
        return "refused"
    return "planned" if node_plan["changed"] else "no change"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t_parse, configs = best(args.repeat, lambda: mig_config.parse(mig_configs.SHIPPED))
    names = sorted(configs)
    print("MIG plan, 8-GPU nodes, %d shipped configs, best of %d, in-process:" % (len(names), args.repeat))
    print("  parse the shipped configs          %8.2f ms" % (t_parse * 1000))
    met = True
    for label, model in NODES:
        gpus = mig_profiles.node(model, 8)
        times, outcomes = {}, {}
        for name in names:
            times[name], outcomes[name] = best(args.repeat, lambda: attempt(gpus, configs, name))
        ordered = sorted(times.values())
        slowest = max(times, key=times.get)
        t_all, _result = best(args.repeat, lambda: [attempt(gpus, configs, name) for name in names])
        done = mig_plan.plan(gpus, configs, "all-balanced")
        at_geometry = [dict(gpu, mode={"current": True, "pending": True},
                            instances=mig_profiles.instances_from(p["create"])) for gpu, p in zip(gpus, done["gpus"])]
        t_noop, noop = best(args.repeat, lambda: mig_plan.plan(at_geometry, configs, "all-balanced"))
        counts = {}
        for outcome in outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print("  %s:" % label)
        print("    slowest config: %-17s %8.2f ms" % (slowest, times[slowest] * 1000))
        print("    median config                    %8.2f ms" % (ordered[len(ordered) // 2] * 1000))
        print("    all %d configs in turn           %8.2f ms  (%s)" % (
            len(names), t_all * 1000, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
        print("    all-balanced, already there      %8.2f ms  (changed: %s)" % (t_noop * 1000, noop["changed"]))
        met = met and times[slowest] < TARGET_S and not noop["changed"]
    print("target: every config planned for an 8-GPU node under %.0f ms: %s" % (TARGET_S * 1000, "met" if met else "MISSED"))
    at_rest = module_rerun(args.repeat)
    print("nvidia_mig work on 4 x A100-SXM4-40GB (fake NVML), all-balanced:")
    print("  first apply                        %8.2f ms  (%d NVML sessions, %d NVML writes)" % (
        at_rest["first_s"] * 1000, at_rest["first_sessions"], at_rest["first_writes"]))
    print("  re-run at its geometry, best of %d  %8.2f ms  (%d NVML session, %d NVML writes, changed: %s)" % (
        args.repeat, at_rest["rerun_s"] * 1000, at_rest["rerun_sessions"], at_rest["rerun_writes"],
        at_rest["changed"]))
    quiet = at_rest["rerun_sessions"] == 1 and at_rest["rerun_writes"] == 0 and not at_rest["changed"]
    print("target: a node already at its geometry costs one NVML read and no write: %s" % ("met" if quiet else "MISSED"))
    return 0 if met and quiet else 1


CHILD = r"""
import json, sys, time
sys.path[:0] = json.loads(sys.argv[1])
from ansible_collections.kubegpu.nvidia.plugins.module_utils import mig_module
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_nvml import run_nvml

class Module(object):
    check_mode = False
    _diff = False
    params = {"config": "all-balanced", "configs": None, "configs_file": None, "nvidia_smi": "nvidia-smi",
              "nvml_timeout": 60}
    def get_bin_path(self, name):
        return None
    def run_command(self, argv):
        raise AssertionError("no command expected: %r" % argv)

def writes():
    with open(sys.argv[2]) as handle:
        return int([l for l in handle if l.startswith("writes = ")][0].split("=")[1])

sessions = []
def session(work):
    sessions.append(1)
    return run_nvml(work)

start = time.perf_counter()
mig_module.work(Module(), session=session)
first = {"first_s": time.perf_counter() - start, "first_sessions": len(sessions), "first_writes": writes()}
times, changed = [], False
before = writes()
for _ in range(int(sys.argv[3])):
    del sessions[:]
    start = time.perf_counter()
    result = mig_module.work(Module(), session=session)
    times.append(time.perf_counter() - start)
    changed = changed or result["changed"]
first.update(rerun_s=min(times), rerun_sessions=len(sessions), rerun_writes=writes() - before, changed=changed)
print(json.dumps(first))
"""


def module_rerun(repeat):
    """The child's figures (see the docstring)."""
    libdir = subprocess.run([os.path.join(ROOT, "scripts", "build-fakenvml.sh")], check=True, capture_output=True,
                            text=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "mig.state")
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(libdir, "full"), FAKENVML_STATE=state,
                   FAKENVML_CONFIG=os.path.join(ROOT, "tests", "support", "fakenvml", "profiles", "a100x4-mig.conf"))
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sys.path[:2]), state, str(repeat)], env=env,
                             check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


if __name__ == "__main__":
    sys.exit(main())
