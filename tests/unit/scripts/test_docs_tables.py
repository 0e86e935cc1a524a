"""scripts/docs_tables.py: the docs' variable tables come from the roles' argument specs."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location("docs_tables", os.path.join(ROOT, "scripts", "docs_tables.py"))
docs_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(docs_tables)


@pytest.mark.parametrize("text, markdown", [
    ("C(open) or V(proprietary)", "`open` or `proprietary`"),
    ("see O(nvidia_driver_branch)", "see `nvidia_driver_branch`"),
    ("M(kubegpu.nvidia.nvidia_gpu_facts) sets it", "`kubegpu.nvidia.nvidia_gpu_facts` sets it"),
    ("its RV(nodes) and O(x)", "its `nodes` and `x`"),
    ("C({{ template \"base\" . }})", "`{{ template \"base\" . }}`"),
    ("C(f(x)) nested", "`f(x)` nested"),
    ("I(only) B(this) U(https://x.io) L(docs, https://d.io)", "*only* **this** <https://x.io> [docs](https://d.io)"),
    ("a | b\n   c", "a \\| b c"),
])
def test_markup_becomes_one_line_of_markdown(text, markdown):
    assert docs_tables.markdown(text) == markdown


def test_a_table_lists_every_option_in_spec_order_with_type_and_default():
    spec = {"options": {
        "x_list": {"type": "list", "elements": "str", "default": [], "description": ["A list."]},
        "x_mode": {"type": "str", "choices": ["", "a"], "default": "", "description": "Mode C(a)."},
        "x_need": {"type": "str", "required": True, "description": ["Needed."]},
        "x_opt": {"type": "bool", "description": ["Unset follows the kubeconfig."]},
    }}
    assert docs_tables.table(spec).splitlines() == [
        "| variable | type | default | description |",
        "| --- | --- | --- | --- |",
        "| `x_list` | list of str | `[]` | A list. |",
        '| `x_mode` | str (`""`, `a`) | `""` | Mode `a`. |',
        "| `x_need` | str | required | Needed. |",
        "| `x_opt` | bool | unset | Unset follows the kubeconfig. |",
    ]


def test_render_replaces_only_the_marked_block(monkeypatch):
    spec = {"options": {"r_a": {"type": "int", "default": 3, "description": ["A."]}}}
    monkeypatch.setattr(docs_tables, "load_spec", lambda ref: spec)
    text = ("# Page\n\n<!-- BEGIN variables: r -->\nold table\n<!-- END variables -->\n\nkept\n")
    assert docs_tables.render(text) == (
        "# Page\n\n<!-- BEGIN variables: r -->\n| variable | type | default | description |\n"
        "| --- | --- | --- | --- |\n| `r_a` | int | `3` | A. |\n<!-- END variables -->\n\nkept\n")


def test_every_docs_table_matches_its_spec():
    assert docs_tables.main(["--check"]) == 0
