"""The role variable tables in docs/*.md, generated from each role's meta/argument_specs.yml.

A table sits between two markers in a docs page:

    <!-- BEGIN variables: ROLE[:ENTRY_POINT] -->
    ... generated, do not edit by hand ...
    <!-- END variables -->

    python3 scripts/docs_tables.py            rewrite every table from the argument specs
    python3 scripts/docs_tables.py --check    exit 1, naming the pages, when a table differs from its spec
                                              (tests/unit/scripts/test_docs_tables.py runs it)

Ansible's markup in the specs (C(), V(), O(), M(), I(), B(), U(), L()) becomes Markdown.
"""

import argparse
import glob
import json
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- BEGIN variables: (?P<ref>[\w.:-]+) -->\n)(?P<body>.*?)(<!-- END variables -->)", re.S)

_MARKUP = [
    (re.compile(r"RV\(([^()]*)\)"), lambda m: "`%s`" % m.group(1)),
    (re.compile(r"(?<![A-Z])[CVO]\(([^()]*(?:\([^()]*\)[^()]*)*)\)"), lambda m: "`%s`" % m.group(1).replace("`", "'")),
    (re.compile(r"M\(([^()]*)\)"), lambda m: "`%s`" % m.group(1)),
    (re.compile(r"I\(([^()]*)\)"), lambda m: "*%s*" % m.group(1)),
    (re.compile(r"B\(([^()]*)\)"), lambda m: "**%s**" % m.group(1)),
    (re.compile(r"U\(([^()]*)\)"), lambda m: "<%s>" % m.group(1)),
    (re.compile(r"L\(([^(),]*),\s*([^()]*)\)"), lambda m: "[%s](%s)" % (m.group(1), m.group(2))),
]


def markdown(text):
    """One line of Markdown from Ansible doc markup (pipes escaped for a table cell)."""
    text = " ".join(str(text).split())
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return text.replace("|", "\\|")


def default_cell(option):
    if "default" not in option:
        return "required" if option.get("required") else "unset"
    value = option["default"]
    if isinstance(value, str):
        return "`%s`" % value if value else '`""`'
    return "`%s`" % json.dumps(value, separators=(", ", ": "))


def type_cell(option):
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        kind = "list of %s" % option["elements"]
    choices = option.get("choices")
    if choices:
        kind += " (%s)" % ", ".join("`%s`" % (c if c != "" else '""') for c in choices)
    return kind


def description_cell(option):
    description = option.get("description") or []
    if isinstance(description, str):
        description = [description]
    return " ".join(markdown(part) for part in description)


def table(spec):
    """The Markdown table of one entry point's options, in the order the spec lists them."""
    rows = ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, option in (spec.get("options") or {}).items():
        rows.append("| `%s` | %s | %s | %s |" % (name, type_cell(option), default_cell(option),
                                                 description_cell(option)))
    return "\n".join(rows) + "\n"


def load_spec(ref):
    role, _sep, entry = ref.partition(":")
    path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    try:
        with open(path) as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise SystemExit("cannot read the argument specs of role %s from %s: %s" % (role, path, exc))
    entry = entry or "main"
    if entry not in specs:
        raise SystemExit("%s has no entry point %s (it has: %s)" % (path, entry, ", ".join(specs)))
    return specs[entry]


def render(text):
    return BLOCK.sub(lambda m: m.group(1) + table(load_spec(m.group("ref"))) + m.group(4), text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report pages whose tables differ; change nothing")
    args = parser.parse_args(argv)
    stale = []
    for page in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(page) as handle:
            text = handle.read()
        new = render(text)
        if new == text:
            continue
        stale.append(os.path.relpath(page, ROOT))
        if not args.check:
            with open(page, "w") as handle:
                handle.write(new)
    if args.check and stale:
        print("variable tables differ from the roles' argument specs in: %s (run python3 scripts/docs_tables.py)"
              % ", ".join(stale), file=sys.stderr)
        return 1
    for page in stale:
        print("rewrote the variable tables of %s" % page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
