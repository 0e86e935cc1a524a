"""Decisions live in Python: no Jinja statements ({% %}) in the playbooks or in the roles' tasks, vars,
defaults and handlers (manifest templates under roles/*/templates/ are templates, and may use them)."""
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PATTERNS = ("playbooks/*.yml", "roles/*/tasks/*.yml", "roles/*/vars/*.yml", "roles/*/defaults/*.yml",
            "roles/*/handlers/*.yml")


def test_no_jinja_statement_in_playbooks_and_role_logic():
    found = []
    for pattern in PATTERNS:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path) as handle:
                for number, line in enumerate(handle, 1):
                    if "{%" in line:
                        found.append("%s:%d" % (os.path.relpath(path, ROOT), number))
    assert found == [], "move these decisions into a filter or module_utils: %s" % ", ".join(found)


def test_site_yml_stays_a_short_list_of_plays():
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as handle:
        # about ten plays of a few lines each; the explanations live in docs/site.md
        assert len(handle.readlines()) <= 150
