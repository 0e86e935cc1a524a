"""Benchmark kubegpu.nvidia.container_runtime_nvidia on a 2,000-line containerd config; prints its figures.

The config is containerd 1.7's `config default` (Debian 13) padded with registry
mirror and runtime tables to 2,000 lines. Timed in-process, median of --runs, with the
module's own plan/apply functions on a temp file (what the module does between reading
its arguments and returning):

1. no-change path, one runtime: the file already holds it.
2. no-change path, three managed runtimes (nvidia default, nvidia-cdi, nvidia-legacy). Target: < 100 ms.
   The standard library's tomllib parses the file and the plan is empty: tomlkit never runs.
3. the same in drop-in mode (main file and drop-in both read and planned).
4. no-change path without tomllib (Python < 3.11 nodes): tomlkit parse + plan.
5. change path: add the three runtimes (plan, tomlkit edit, render, check the result loads as
   planned, atomic write).

--appended puts the padding at the end of the file instead (tables out of order):
tomlkit's handling of out-of-order tables is quadratic, so paths 2 and 3 take tens
of seconds there; path 1 is unaffected.

Usage: . scripts/env.sh && python bench/runtime_config.py [--runs N] [--lines N]
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
from unittest import mock

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.modules import container_runtime_nvidia as mod  # noqa: E402

FIXTURE = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "runtime" / "containerd-1.7-default.toml"
NV = "/usr/bin/nvidia-container-runtime"


def big_config(lines, appended=False):
    """containerd 1.7's default config padded to ``lines`` lines with registry mirrors and
    runtimes, placed inside their sections (``appended``: all at the end of the file, which
    makes them out-of-order tables)."""
    text = FIXTURE.read_text()
    runtimes, mirrors = [], []
    index = 0
    while text.count("\n") + sum(x.count("\n") for x in runtimes + mirrors) < lines:
        index += 1
        mirrors.append(
            '\n      [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry-%d.example.internal"]\n'
            '        endpoint = ["https://mirror-a.example.internal/v2/%d", "https://mirror-b.example.internal"]\n'
            % (index, index))
        runtimes.append(
            '\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.extra-%d]\n'
            '          runtime_type = "io.containerd.runc.v2"\n'
            '          privileged_without_host_devices = false\n'
            '          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.extra-%d.options]\n'
            '            BinaryName = "/usr/local/bin/runc-%d"\n'
            '            SystemdCgroup = true\n' % (index, index, index))
    if appended:
        text += "".join(mirrors + runtimes)
    else:
        lines_ = text.split("\n")
        at_runtime = next(i for i, l in enumerate(lines_) if l.strip().endswith("untrusted_workload_runtime]"))
        at_mirror = next(i for i, l in enumerate(lines_) if l.strip().endswith("x509_key_pair_streaming]"))
        lines_[at_mirror:at_mirror] = "".join(mirrors).split("\n")
        lines_[at_runtime:at_runtime] = "".join(runtimes).split("\n")
        text = "\n".join(lines_)
    return "\n".join(text.split("\n")[:lines]) + "\n"


THREE = [{"name": "nvidia", "path": None, "mode": None, "default": True},
         {"name": "nvidia-cdi", "path": None, "mode": "cdi", "default": False},
         {"name": "nvidia-legacy", "path": None, "mode": "legacy", "default": False}]


class FakeModule:
    """The parts of AnsibleModule the plan/apply functions use."""

    check_mode = False
    _diff = True

    def __init__(self, params):
        self.params = params

    def atomic_move(self, src, dest, unsafe_writes=False):
        os.rename(src, dest)

    def backup_local(self, path):
        return None

    def run_command(self, argv, **kwargs):
        return 0, "", ""

    def selinux_enabled(self):
        return False

    def warn(self, msg):
        print("warning:", msg)


def params(path, three=False, mode="in_place", drop_in=containerd_config.DEFAULT_DROP_IN):
    return dict(runtime="containerd", path=path, mode=mode, drop_in_path=drop_in,
                flavor="containerd", runtime_name=None if three else "nvidia", runtime_path=None if three else NV,
                runtimes=THREE if three else None, set_as_default=not three, cdi=True, state="present", backup=False,
                validate=None, config_source="file", config_command=None)


def plan(values):
    module = FakeModule(values)
    return module, mod.plan(module, values, mod.managed_runtimes(values))[0]


def timed(func, runs):
    samples = []
    for _unused in range(runs):
        start = time.perf_counter()
        func()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--appended", action="store_true",
                        help="put the padding tables at the end of the file (out-of-order tables; "
                             "tomlkit is slow on those: expect tens of seconds per edit)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kubegpu-bench-") as tmp:
        path = os.path.join(tmp, "config.toml")
        three_path = os.path.join(tmp, "three.toml")
        main_path = os.path.join(tmp, "main.toml")
        drop_path = os.path.join(tmp, "conf.d", "99-nvidia.toml")
        source = big_config(args.lines, args.appended)
        runtimes = mod.managed_runtimes(params(three_path, three=True))
        configured, _v = containerd_config.edit_text(source, path, "present", "nvidia", NV, True, True)
        three, _v = containerd_config.edit_text(source, three_path, "present", runtimes, cdi=True)
        main, drop, _v = containerd_config.edit_drop_in(source, main_path, None, drop_path, "present", runtimes, cdi=True)
        print("config: %d lines (%d bytes, tables %s); with one runtime: %d lines, with three: %d lines" % (
            source.count("\n"), len(source), "appended out of order" if args.appended else "in their sections",
            configured.count("\n"), three.count("\n")))
        os.makedirs(os.path.dirname(drop_path))
        for name, text in ((path, configured), (three_path, three), (main_path, main), (drop_path, drop)):
            with open(name, "w") as handle:
                handle.write(text)

        def no_change(values):
            def run():
                _module, changes = plan(values)
                assert not any(c.changed for c in changes)
            return run

        def no_change_tomlkit():
            with mock.patch.object(containerd_config, "tomllib", None):
                no_change(params(three_path, three=True))()

        def change():
            with open(three_path, "w") as handle:
                handle.write(source)
            module, changes = plan(params(three_path, three=True))
            assert any(c.changed for c in changes)
            mod.apply_changes(module, changes)

        slow = 1 if args.appended else 3
        rows = [
            ("no-change path, one runtime", timed(no_change(params(path)), args.runs), None),
            ("no-change path, three runtimes", timed(no_change(params(three_path, three=True)), args.runs), 100),
            ("no-change, three runtimes, drop-in", timed(no_change(params(main_path, True, "drop_in", drop_path)),
                                                         args.runs), 100),
            ("no-change path without tomllib", timed(no_change_tomlkit, slow), None),
            ("change path, three runtimes", timed(change, slow), None),
        ]
        for label, (median, low, high), target in rows:
            verdict = ""
            if target is not None:
                verdict = "  target < %d ms: %s" % (target, "met" if median < target else "MISSED")
            print("%-36s median %8.1f ms  (min %.1f, max %.1f)%s" % (label, median, low, high, verdict))


if __name__ == "__main__":
    main()
