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

    python bench/mig_plan.py [--repeat 5]
"""
import argparse
import os
import sys
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
        t_all, _ = best(args.repeat, lambda: [attempt(gpus, configs, name) for name in names])
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
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
