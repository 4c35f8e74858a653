"""The API reference as mkdocstrings sees it, for ``test_docs.py`` and ``test_docstrings.py``.

`load_package` loads mirrorfit with griffe as mkdocstrings does (the search paths, the griffe
extension and the docstring options of ``mkdocs.yml``). `directives` reads the pages of
``docs/api/``: each ``::: identifier`` line and the ``options:`` block indented under it.
`rendered` works out what those directives show: the objects, and the members of each class.
"""

import re
import textwrap
from pathlib import Path

import griffe
import yaml

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api"
CONFIG = yaml.safe_load((REPO / "mkdocs.yml").read_text())
PYTHON = next(plugin["mkdocstrings"] for plugin in CONFIG["plugins"]
              if isinstance(plugin, dict) and "mkdocstrings" in plugin)["handlers"]["python"]
OPTIONS = PYTHON["options"]
_DIRECTIVE = re.compile(r"^::: (\S+)[ \t]*\n((?:(?:[ \t]+.*)?\n)*)", re.MULTILINE)
_DEFAULT_FILTERS = ["!^_[^_]"]  # mkdocstrings-python's default ``filters``


def load_package() -> griffe.Module:
    """mirrorfit as griffe loads it for mkdocstrings."""
    extensions = griffe.load_extensions(*(str(REPO / ext) for ext in OPTIONS["extensions"]))
    return griffe.load("mirrorfit", search_paths=[str(REPO / p) for p in PYTHON["paths"]],
                       extensions=extensions, docstring_parser="google",
                       docstring_options=OPTIONS["docstring_options"], resolve_aliases=True)


def target(obj: griffe.Object | griffe.Alias) -> griffe.Object:
    """The object an alias (a re-export) stands for, or ``obj`` itself."""
    return obj.final_target if obj.is_alias else obj  # type: ignore[return-value]


def lookup(package: griffe.Module, path: str) -> griffe.Object:
    """The object at the public ``path`` (``mirrorfit.Model.fit``), through re-exports."""
    obj: griffe.Object = package
    for part in path.split(".")[1:]:
        obj = target(obj.members[part])
    return obj


def directives() -> list[tuple[str, str, dict]]:
    """``(page, identifier, options)`` for each ``::: identifier`` in ``docs/api/``; ``page``
    relative to ``docs/``."""
    found = []
    for page in sorted(API.rglob("*.md")):
        for identifier, block in _DIRECTIVE.findall(page.read_text()):
            options = (yaml.safe_load(textwrap.dedent(block)) or {}).get("options", {})
            found.append((page.relative_to(REPO / "docs").as_posix(), identifier, options))
    return found


def is_method(member: griffe.Object) -> bool:
    """A function, or a property (which mkdocstrings shows as an attribute)."""
    return isinstance(member, griffe.Function) or (
        isinstance(member, griffe.Attribute) and "property" in member.labels)


def public_methods(cls: griffe.Class) -> dict[str, griffe.Object]:
    """The public methods and properties that the class's entry lists: its own, and those the
    griffe extension adopts from private bases."""
    return {name: target(member) for name, member in cls.members.items()
            if not name.startswith("_") and is_method(target(member))}


def _keeps(name: str, filters: list[str]) -> bool:
    """Whether mkdocstrings' ``filters`` (regexes, ``!`` to exclude) keep a member."""
    keep, kinds = None, set()
    for rule in filters:
        exclude = rule.startswith("!")
        kinds.add(exclude)
        if re.search(rule.removeprefix("!"), name):
            keep = not exclude
    return keep if keep is not None else kinds != {False}


def rendered(package: griffe.Module) -> tuple[list[tuple[str, str]], set[tuple[str, str]]]:
    """What the pages show: ``(page, object path)`` for each object with an entry of its own
    (the modules, functions, classes and attributes shown), and ``(class path, member name)``
    for each member of a class shown, under the class's entry or on its own.
    Paths are the objects' definitions (``mirrorfit._src...``), so a name re-exported by two
    modules is one object."""
    objects: list[tuple[str, str]] = []
    members: set[tuple[str, str]] = set()

    def show(page: str, obj: griffe.Object, options: dict, parent: griffe.Object | None):
        if isinstance(parent, griffe.Class):
            members.add((parent.path, obj.name))
        else:
            objects.append((page, obj.path))
        chosen = options.get("members", True)
        if chosen is False or not isinstance(obj, griffe.Module | griffe.Class):
            return
        filters = options.get("filters", OPTIONS.get("filters", _DEFAULT_FILTERS))
        for name, member in obj.members.items():
            shown = target(member)
            if isinstance(obj, griffe.Module):
                if not member.is_public or isinstance(shown, griffe.Module):
                    continue
            elif not (_keeps(name, filters) and shown.docstring):
                continue  # filtered out, or hidden by mkdocstrings for want of a docstring
            if chosen is True or name in chosen:
                show(page, shown, {"filters": filters} if isinstance(obj, griffe.Module)
                     else {"members": False}, obj)

    for page, identifier, options in directives():
        parent_path, _, _ = identifier.rpartition(".")
        parent = lookup(package, parent_path) if parent_path.count(".") else None
        show(page, lookup(package, identifier), options, parent)
    return objects, members
