"""Run `ansible` / `ansible-playbook` as a subprocess with the JSON stdout callback and read its results.

    result = run_playbook("site.yml", "inventory.json", extra_vars={...}, kubeconfig=kube.kubeconfig)
    assert result.rc == 0, result.stderr
    result.stats["localhost"]["changed"]; result.tasks()["Task name"]; result.events()

    result = run_module("kubegpu.nvidia.k8s_gpu_label", {"node": "n1"}, kubeconfig=kube.kubeconfig)
    result.module_result()   # the module's result dict on localhost

Task names are given without the "role : " prefix the callback puts before tasks of roles.
"""
import datetime
import json
import os
import subprocess
import sys

CALLBACK = "ansible.posix.json"


def write_cached_facts(directory, host, facts):
    """Leave `facts` (a dict of fact names) for `host` in a jsonfile fact cache (ansible-core 2.19 layout)."""
    payload = json.dumps(facts)
    with open(os.path.join(str(directory), "s1_" + host), "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"__payload__": payload}))


def task_seconds(task):
    """How long one task of the callback's output took (its ``duration``); 0.0 when it has no end."""
    duration = task["task"]["duration"]
    if "end" not in duration:
        return 0.0
    start, end = (datetime.datetime.fromisoformat(duration[key].replace("Z", "+00:00")) for key in ("start", "end"))
    return (end - start).total_seconds()


class Result:
    """One run: `.rc`, `.stdout`, `.stderr`, `.cmd`; `.data` is the callback's JSON, parsed on first use."""

    def __init__(self, cmd, proc):
        self.cmd = cmd
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self._data = None

    def _fail(self, what):
        raise AssertionError("%s from %s (rc %d)\nstdout:\n%s\nstderr:\n%s"
                             % (what, os.path.basename(self.cmd[0]), self.rc, self.stdout, self.stderr))

    @property
    def data(self):
        if self._data is None:
            try:
                self._data = json.loads(self.stdout)
            except ValueError:
                self._fail("no JSON")
        return self._data

    @property
    def stats(self):
        """{host: {"changed": n, "failures": n, ...}}."""
        return self.data["stats"]

    def events(self):
        """[(host, task name, result)] for every task of every play, in the order they ran."""
        return [(host, task["task"]["name"].split(" : ")[-1], res)
                for play in self.data["plays"] for task in play["tasks"] for host, res in task["hosts"].items()]

    def task_hosts(self):
        """{task name: {host: result}}; of tasks with the same name the last counts."""
        return dict((task["task"]["name"].split(" : ")[-1], task["hosts"])
                    for play in self.data["plays"] for task in play["tasks"])

    def tasks(self, host="localhost"):
        """{task name: result} of the tasks that ran on `host`; of tasks with the same name the last counts."""
        return dict((name, res) for h, name, res in self.events() if h == host)

    def hosts(self, task=0, play=0):
        """{host: result} of one task, by position (an ad-hoc `ansible` run has one play with one task)."""
        try:
            return self.data["plays"][play]["tasks"][task]["hosts"]
        except (KeyError, IndexError):
            return self._fail("no task result")

    def module_result(self, host="localhost"):
        """The result of an ad-hoc module run on `host`."""
        hosts = self.hosts()
        if host not in hosts:
            self._fail("no module result for %s" % host)
        return hosts[host]


def _executable(name):
    """The tool beside this Python (the venv's), else from PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.exists(beside) else name


def run(args, env=None, check=False, diff=False, kubeconfig=None, fact_cache=None, python=sys.executable,
        timeout=600, cwd=None, tool="ansible-playbook"):
    """Run `tool` with `args` and the JSON callback; returns a Result.

    env: extra environment variables (over os.environ and the ones set here). kubeconfig: sets
    K8S_AUTH_KUBECONFIG and KUBECONFIG. fact_cache: a folder used as jsonfile fact cache (see
    write_cached_facts). python: the interpreter for the managed hosts (None: Ansible's own choice,
    for remote nodes); host variables still override it.
    """
    cmd = [_executable(tool)] + [str(arg) for arg in args]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    run_env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK=CALLBACK, ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    if python:
        run_env["ANSIBLE_PYTHON_INTERPRETER"] = python
    if kubeconfig:
        run_env.update(K8S_AUTH_KUBECONFIG=str(kubeconfig), KUBECONFIG=str(kubeconfig))
    if fact_cache:
        run_env.update(ANSIBLE_CACHE_PLUGIN="ansible.builtin.jsonfile", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(fact_cache),
                       ANSIBLE_CACHE_PLUGIN_TIMEOUT="0")
    run_env.update(env or {})
    proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    return Result(cmd, proc)


def run_playbook(playbook, inventory, extra_vars=None, connection=None, **kwargs):
    """ansible-playbook; inventory is a path or a host list such as "localhost,". Keywords as run()."""
    args = ["-i", inventory, playbook]
    if extra_vars:
        args += ["-e", json.dumps(extra_vars)]
    if connection:
        args += ["-c", connection]
    return run(args, **kwargs)


def run_module(module, args=None, hosts="localhost", inventory=None, **kwargs):
    """One module with the ad-hoc `ansible` command (no inventory: the implicit localhost). Keywords as run()."""
    cmd = [hosts, "-m", module]
    if inventory:
        cmd += ["-i", inventory]
    if args:
        cmd += ["-a", args if isinstance(args, str) else json.dumps(args)]
    return run(cmd, tool="ansible", **kwargs)
