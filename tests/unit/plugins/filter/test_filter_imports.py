"""Every task that uses one of the collection's filters loads all of its filter plugins in its worker process
(Ansible looks a collection's filter up by importing each file of plugins/filter), and Ansible's collection
loader compiles the collection's module_utils from source in each of those processes (it keeps no bytecode of
them). So a filter plugin imports nothing heavy at load time: not the kubernetes client (about 0.3 s per task
on the CI machine, measured with profile_tasks), and no module_utils of the collection either; each filter
function imports the module_utils it uses when it is called. A playbook of 30 tasks each using one of the
collection's filters took 4.0 s against 2.3 s for the same tasks with a builtin filter while the filter files
imported their module_utils at load time, and the same as the builtin one once they did not."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")

PROBE = """
import glob, importlib, json, os, sys
sys.path.insert(0, {collections!r})
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([{collections!r}])
for path in sorted(glob.glob(os.path.join({root!r}, "plugins", "filter", "*.py"))):
    module = importlib.import_module("ansible_collections.kubegpu.nvidia.plugins.filter." + os.path.basename(path)[:-3])
    module.FilterModule().filters()
print(json.dumps(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def loaded():
    """The modules a Python process holds after importing every filter plugin and asking each for its filters."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(collections=COLLECTIONS, root=ROOT)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_filter_plugins_do_not_import_the_kubernetes_client(loaded):
    heavy = [name for name in loaded if name.split(".")[0] in ("kubernetes", "urllib3", "tomlkit", "pynvml")]
    assert heavy == [], "filter plugins import: %s" % ", ".join(heavy)


def test_the_filter_plugins_import_no_module_utils_of_the_collection_until_a_filter_is_called(loaded):
    module_utils = [name for name in loaded if name.startswith("ansible_collections.kubegpu.nvidia.plugins.module_utils.")]
    assert module_utils == [], "filter plugins import at load time: %s" % ", ".join(module_utils)
