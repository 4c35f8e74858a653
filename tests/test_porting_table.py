"""The porting guide's table of Keras 3's public names (docs/guides/porting.md) against the
names Keras lists (tests/data/keras_public_names.json, from benchmarks/keras_surface.py) and
mirrorfit's modules: no Keras needed."""

import importlib
import json
import re

import pytest

from tests.helpers import REPO_ROOT

STATUSES = ("present", "planned", "left out")
KERAS = json.loads((REPO_ROOT / "tests" / "data" / "keras_public_names.json").read_text())


def _table() -> dict[str, dict[str, str]]:
    """``{keras module: {name: status}}`` from the guide's table."""
    text = (REPO_ROOT / "docs" / "guides" / "porting.md").read_text()
    body = text.split("<!-- keras-names:start -->")[1].split("<!-- keras-names:end -->")[0]
    table: dict[str, dict[str, str]] = {}
    module = None
    for line in body.splitlines():
        heading = re.match(r"^### `(keras[\w.]*)` → `(mirrorfit[\w.]*)`$", line)
        if heading:
            module = heading.group(1)
            assert heading.group(2) == "mirrorfit" + module[len("keras"):]
            table[module] = {}
            continue
        row = re.match(r"^\| (present|planned|left out) \| (.*?) \| (.*) \|$", line)
        if row:
            assert module is not None, line
            status, names, notes = row.groups()
            assert status == "present" or notes.strip(), f"give the reason: {line[:80]}"
            for name in re.findall(r"`([^`]+)`", names):
                assert name not in table[module], f"{module}.{name} is listed twice"
                table[module][name] = status
    return table


TABLE = _table()


def test_the_table_lists_every_public_name_of_the_keras_modules():
    assert sorted(TABLE) == sorted(KERAS["modules"])
    for module, names in KERAS["modules"].items():
        assert sorted(TABLE[module]) == sorted(names), module


@pytest.mark.parametrize("module", sorted(KERAS["modules"]))
def test_present_names_exist_and_the_others_do_not(module):
    ours = importlib.import_module("mirrorfit" + module[len("keras"):])
    wrong = {name: status for name, status in TABLE[module].items()
             if (status == "present") != hasattr(ours, name)}
    assert not wrong, (f"update docs/guides/porting.md: these names of {module} are listed "
                       f"with the wrong status (present means the mirrorfit module has it): "
                       f"{wrong}")
