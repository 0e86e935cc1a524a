"""Make the collection importable as ansible_collections.kubegpu.nvidia in every test."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
SUPPORT = os.path.join(ROOT, "tests", "support")

for path in (COLLECTIONS, SUPPORT):
    if path not in sys.path:
        sys.path.insert(0, path)
