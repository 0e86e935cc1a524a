"""Every task that uses one of the collection's filters loads all of its filter plugins in its worker process,
so a filter plugin must not import heavy libraries: in particular not the kubernetes client (about 0.3 s per
task on the CI machine, measured with profile_tasks), which only the modules that talk to the API need."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")

PROBE = """
import glob, importlib, os, sys
sys.path.insert(0, {collections!r})
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([{collections!r}])
for path in sorted(glob.glob(os.path.join({root!r}, "plugins", "filter", "*.py"))):
    importlib.import_module("ansible_collections.kubegpu.nvidia.plugins.filter." + os.path.basename(path)[:-3])
print(",".join(sorted(name for name in ("kubernetes", "urllib3", "tomlkit", "pynvml") if name in sys.modules)))
"""


def test_the_filter_plugins_do_not_import_the_kubernetes_client():
    out = subprocess.run([sys.executable, "-c", PROBE.format(collections=COLLECTIONS, root=ROOT)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", "filter plugins import: %s" % out.stdout.strip()
