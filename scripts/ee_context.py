"""The execution environment's build context: made by ansible-builder from meta/execution-environment.yml, checked.

    python3 scripts/ee_context.py OUT     put the definition beside requirements.txt and bindep.txt in OUT/definition
                                          (its files are named relative to the collection root), run
                                          ``ansible-builder create`` into OUT/context and check what it wrote

The context must build the image the definition describes: its Containerfile starts from the definition's base
image and installs the pinned ansible-core and ansible-runner and the Galaxy requirements; the Python and system
requirements it carries are this collection's requirements.txt and bindep.txt, and the Galaxy requirements name
this collection and every collection galaxy.yml depends on. Exits 1 with one line per problem.
"""

import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFINITION = os.path.join(ROOT, "meta", "execution-environment.yml")


def lines(path):
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]


def create(out):
    """Run ansible-builder create; returns the context directory."""
    definition = os.path.join(out, "definition")
    context = os.path.join(out, "context")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(definition)
    for path in (DEFINITION, os.path.join(ROOT, "requirements.txt"), os.path.join(ROOT, "bindep.txt")):
        shutil.copy(path, definition)
    builder = shutil.which("ansible-builder")
    if not builder:
        raise SystemExit("ansible-builder is not installed: run scripts/bootstrap.sh (requirements/test.txt)")
    subprocess.run([builder, "create", "--file", os.path.join(definition, "execution-environment.yml"),
                    "--context", context, "--output-filename", "Containerfile"], check=True,
                   stdout=subprocess.DEVNULL)
    return context


def problems(context):
    """What is wrong with the context (an empty list: nothing)."""
    with open(DEFINITION, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        galaxy = yaml.safe_load(handle)
    found = []
    containerfile = os.path.join(context, "Containerfile")
    if not os.path.isfile(containerfile):
        return ["no Containerfile in %s" % context]
    with open(containerfile, encoding="utf-8") as handle:
        text = handle.read()
    base = spec["images"]["base_image"]["name"]
    if 'ARG EE_BASE_IMAGE="%s"' % base not in text:
        found.append("the Containerfile does not start from the base image %s" % base)
    deps = spec["dependencies"]
    for key in ("ansible_core", "ansible_runner"):
        pin = deps[key]["package_pip"]
        if pin not in text:
            found.append("the Containerfile does not install %s" % pin)
    for built, source in (("requirements.txt", "requirements.txt"), ("bindep.txt", "bindep.txt")):
        path = os.path.join(context, "_build", built)
        if not os.path.isfile(path):
            found.append("the context has no _build/%s" % built)
        elif lines(path) != lines(os.path.join(ROOT, source)):
            found.append("_build/%s is not the collection's %s" % (built, source))
    if "ansible-galaxy collection install" not in text or "-r requirements.yml" not in text:
        found.append("the Containerfile does not install the Galaxy requirements")
    path = os.path.join(context, "_build", "requirements.yml")
    if not os.path.isfile(path):
        found.append("the context has no _build/requirements.yml")
    else:
        with open(path, encoding="utf-8") as handle:
            names = [entry["name"] for entry in (yaml.safe_load(handle) or {}).get("collections") or []]
        wanted = ["%s.%s" % (galaxy["namespace"], galaxy["name"])] + sorted(galaxy.get("dependencies") or {})
        for name in wanted:
            if name not in names:
                found.append("_build/requirements.yml does not install %s" % name)
    return found


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: ee_context.py OUT")
    context = create(argv[1])
    found = problems(context)
    for problem in found:
        print("execution environment: %s" % problem, file=sys.stderr)
    if found:
        return 1
    print("ansible-builder create: ok (%s)" % context)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
