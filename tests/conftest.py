"""Make the collection importable as ansible_collections.kubegpu.nvidia in every test."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
SUPPORT = os.path.join(ROOT, "tests", "support")

for path in (COLLECTIONS, SUPPORT):
    if path not in sys.path:
        sys.path.insert(0, path)

# Ansible's collection loader owns the ansible_collections package from the start, as in a play: the
# tests import the collection's plugins through it, and templates that name the collection's filters
# (role variables rendered by tests/unit/roles/role_render.py) find them in the same process.
from ansible.plugins.loader import init_plugin_loader  # noqa: E402  pylint: disable=wrong-import-position

init_plugin_loader([COLLECTIONS])
