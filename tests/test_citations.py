"""Every path and module name that mirrorfit's docs and docstrings cite of its own exists.

The texts scanned: the strings and comments of ``mirrorfit/**/*.py``, ``docs/**/*.md``,
``README.md`` and ``benchmarks/README.md``. Three kinds of citation are checked:

- file paths with a folder (``mirrorfit/_src/trainers/steps.py``, ``trainers/steps.py``,
  ``callbacks/callback.py:6``, ``tests/trainers/test_resident.py``, ``../guides/data.md``).
  A path is mirrorfit's own when its first folder is one of the repository's (``mirrorfit``,
  ``docs``, ``tests``, ``benchmarks``, ...), a package of ``mirrorfit/_src/`` or a subpackage
  of one (the short forms, ``trainers/steps.py``, ``graph/functional.py``), a folder of
  ``docs/`` (links between pages), ``results`` (``benchmarks/results/``, the runs' reports
  kept in the repository) or ``..``. Any other first folder (``keras/src/...``,
  ``backend/common/...``, ``optax/...``) is another project's and is not checked. The path
  must exist from the repository root, from ``mirrorfit/_src/`` (or, for a subpackage, from
  one of its packages), or, in a Markdown page, from the page's folder; a ``:line`` suffix
  must be within the file.
- folders of two or more parts (``mirrorfit/_src/trainers/data_adapters/``), by the same
  rule. A single folder name (``graph/`` in the package table of ``docs/architecture.md``)
  is read relative to its sentence and is left alone.
- dotted names ``mirrorfit.<...>`` and ``mf.<...>``: the longest importable module prefix
  is imported and the rest must be attributes of it, in turn.

Bare file names (``steps.py``) say nothing about where the file is and are not checked,
except in the package table of ``docs/architecture.md``, where a row's names are modules of
the row's package (or its subpackages).
What matches the patterns but is no citation is in ``NOT_CITATIONS``, each with its reason.
"""

import importlib
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "mirrorfit" / "_src"
DOCS = ROOT / "docs"

# A path with at least one folder, optionally ``:line``; not the tail of a longer path or URL.
PATH_RE = re.compile(
    r"(?<![\w./@:-])((?:[\w.-]+/)+[\w-]+\.(?:py|md|sh|json|toml|yml|ipynb))(?::(\d+))?")
# A folder of two or more parts, ending in ``/`` at the end of a word.
FOLDER_RE = re.compile(r"(?<![\w./@:-])((?:[\w.-]+/){2,})(?=[`\s),;:'\"]|$)")
DOTTED_RE = re.compile(r"(?<![\w./-])(?:mirrorfit|mf)(?:\.\w+)+")
# A row of docs/architecture.md's package table: ``| level | `package/` | what it owns |``.
TABLE_ROW_RE = re.compile(r"\|\s*[\w-]*\s*\|\s*`([\w/]+)/`")
BARE_RE = re.compile(r"(?<![\w./-])(\w+\.py)\b")

ROOT_FOLDERS = {"mirrorfit", "docs", "tests", "benchmarks", "notebooks", ".ci"}
PACKAGES = {p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"}
SUBPACKAGES = {p.name for p in SRC.glob("*/*") if p.is_dir() and p.name != "__pycache__"}
DOCS_FOLDERS = {p.name for p in DOCS.iterdir() if p.is_dir()}

NOT_CITATIONS = {
    # Legacy names of stored losses that `normalized_name` maps onto today's: they are
    # there because they no longer exist.
    "mirrorfit._src.regression_losses.mean_squared_error": "fingerprint_check.py",
    "mirrorfit.mean_squared_error": "fingerprint_check.py",
    # Key prefixes in jax.distributed's key-value store, not folders.
    "mirrorfit/progress/": "multi_worker/watchdog.py",
    "mirrorfit/stuck_seen/": "multi_worker/watchdog.py",
    "mirrorfit/stopped/": "multi_worker/failfast.py",
    "mirrorfit/exiting/": "multi_worker/failfast.py",
}


def _texts() -> dict[pathlib.Path, str]:
    """The scanned texts by file: a page whole, a module's strings and comments only."""
    files = [*sorted(ROOT.glob("mirrorfit/**/*.py")), *sorted(DOCS.glob("**/*.md")),
             ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    texts = {}
    for path in files:
        source = path.read_text()
        if path.suffix == ".py":
            tokens = tokenize.generate_tokens(io.StringIO(source).readline)
            source = "\n".join(t.string for t in tokens
                               if t.type in (tokenize.STRING, tokenize.COMMENT))
        texts[path] = source
    return texts


def _candidates(cited: str, page: pathlib.Path) -> list[pathlib.Path] | None:
    """Where a cited path may be, or None when it is another project's."""
    first = cited.split("/")[0]
    markdown = page.suffix == ".md"
    if first == "results":
        return [ROOT / "benchmarks" / cited]
    if first == "..":
        return [page.parent / cited]
    if first == "_src":
        return [ROOT / "mirrorfit" / cited]
    if first in ROOT_FOLDERS | PACKAGES:
        return [ROOT / cited, SRC / cited] + ([page.parent / cited] if markdown else [])
    if first in SUBPACKAGES:
        return [page.parent / cited, *(package / cited for package in SRC.iterdir())]
    if markdown and first in DOCS_FOLDERS:
        return [page.parent / cited, DOCS / cited]
    return None


def missing_paths(texts: dict[pathlib.Path, str]) -> list[str]:
    """``page: cited`` for each cited own path or folder that is not there."""
    missing = []
    for page, text in texts.items():
        cites = [(m.group(1), m.group(2)) for m in PATH_RE.finditer(text)]
        cites += [(m.group(1), None) for m in FOLDER_RE.finditer(text)]
        for cited, line in cites:
            candidates = _candidates(cited, page)
            if candidates is None or cited in NOT_CITATIONS:
                continue
            found = [c for c in candidates if c.exists()]
            where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            if not found:
                missing.append(f"{where}: {cited}")
            elif line and not any(
                    c.is_file() and len(c.read_text().splitlines()) >= int(line) for c in found):
                missing.append(f"{where}: {cited}:{line} (the file is shorter)")
    return missing


def _resolves(name: str) -> bool:
    parts = ["mirrorfit", *name.split(".")[1:]]
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def unresolved_names(texts: dict[pathlib.Path, str]) -> list[str]:
    """``page: name`` for each cited ``mirrorfit.``/``mf.`` name that does not resolve."""
    unresolved = []
    for page, text in texts.items():
        for name in sorted(set(DOTTED_RE.findall(text))):
            if name not in NOT_CITATIONS and not _resolves(name):
                unresolved.append(f"{page.relative_to(ROOT)}: {name}")
    return unresolved


@pytest.fixture(scope="module")
def texts():
    return _texts()


def test_cited_paths_exist(texts):
    missing = missing_paths(texts)
    assert not missing, "cited but not there:\n" + "\n".join(missing)


def test_cited_module_names_resolve(texts):
    unresolved = unresolved_names(texts)
    assert not unresolved, "cited but not resolving:\n" + "\n".join(unresolved)


def test_stale_citations_are_reported(tmp_path):
    page = tmp_path / "page.md"
    text = ("`trainers/numerics.py`, `mirrorfit/_src/trainers/steps.py:100000`, "
            "`mirrorfit/_src/no_such/`, `keras/src/trainers/numerics.py`, "
            "`trainers/steps.py:1`, `mirrorfit._src.trainers.numerics`, "
            "`mf.layers.NoSuchLayer`, `mirrorfit._src.trainers.steps`")
    assert missing_paths({page: text}) == [
        f"{page}: trainers/numerics.py",
        f"{page}: mirrorfit/_src/trainers/steps.py:100000 (the file is shorter)",
        f"{page}: mirrorfit/_src/no_such/",
    ]
    assert unresolved_names({ROOT / "README.md": text}) == [
        "README.md: mf.layers.NoSuchLayer", "README.md: mirrorfit._src.trainers.numerics"]


def test_architecture_table_modules_are_in_their_package():
    rows = [(TABLE_ROW_RE.match(line), line)
            for line in (DOCS / "architecture.md").read_text().splitlines()]
    rows = [(match.group(1), line) for match, line in rows if match]
    assert len(rows) >= 10, "the package table of docs/architecture.md was not found"
    missing = []
    for package, line in rows:
        modules = {path.name for path in (SRC / package).rglob("*.py")}
        missing += [f"{package}/: {name}" for name in BARE_RE.findall(line)
                    if name not in modules]
    assert not missing, "docs/architecture.md names modules not in their package:\n" + (
        "\n".join(missing))
