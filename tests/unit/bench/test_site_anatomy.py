"""bench/site.py: how a run's wall time is split between module runs, controller tasks and the rest."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location("bench_site", os.path.join(ROOT, "bench", "site.py"))
bench_site = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_site)


def task(name, start, end, hosts):
    duration = {"start": "2026-11-24T10:00:%06.3fZ" % start, "end": "2026-11-24T10:00:%06.3fZ" % end}
    return {"task": {"name": name, "duration": duration}, "hosts": hosts}


def test_tasks_are_split_by_what_ran_on_their_hosts():
    out = {"plays": [{"tasks": [
        # a module on one host is a module run, whatever the other hosts did
        task("facts", 1.0, 2.5, {"a": {"action": "kubegpu.nvidia.nvidia_gpu_facts"}, "b": {"skipped": True}}),
        task("spec", 2.5, 2.6, {"a": {"action": "ansible.builtin.validate_argument_spec"}}),
        task("record", 2.6, 2.8, {"a": {"action": "ansible.builtin.set_fact"}, "b": {"action": "set_fact"}}),
        task("include", 2.8, 2.85, {"a": {"action": "ansible.builtin.include_tasks", "skipped": True}}),
        task("apply", 3.0, 4.0, {"localhost": {"action": "kubernetes.core.k8s"}}),
    ]}]}
    parts = bench_site.anatomy(out, 5.0)
    assert parts["module runs"] == [2, pytest.approx(2.5)]
    assert parts["controller tasks"] == [2, pytest.approx(0.3)]
    assert parts["skipped tasks"] == [1, pytest.approx(0.05)]
    assert parts["start-up and plays"] == [0, pytest.approx(5.0 - 2.85)]


def test_a_task_without_an_end_counts_no_time():
    out = {"plays": [{"tasks": [{"task": {"name": "t", "duration": {"start": "2026-11-24T10:00:01Z"}},
                                 "hosts": {"a": {"action": "ansible.builtin.ping"}}}]}]}
    assert bench_site.anatomy(out, 1.0)["module runs"] == [1, 0.0]
