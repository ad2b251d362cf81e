"""Point imports and paths at the modules' places after modules moved between the library
(``fusedlib/``) and the lab (``fusedlib/lab/``).

Usage, from the repository root: ``python tools/relocate_imports.py [--check] [PATH ...]``
(default paths: fusedlib, tests, notebooks, lab, tools, docs, README.md, Makefile, .ci/run).

What is where is read from the tree, not from a list: a lab module is a ``.py`` file or a
package directly under ``fusedlib/lab/`` that is not also under ``fusedlib/``. Every edit is
mechanical and the script is idempotent (a second run changes nothing), so it can be run again
after merging edits made elsewhere to the files it touches (notebooks in particular):

- ``fusedlib.<lab module>`` and ``fusedlib/<lab module>`` (imports, dotted names, paths in text)
  become ``fusedlib.lab.<module>`` and ``fusedlib/lab/<module>``;
- ``from fusedlib import a, b`` imports the lab modules among its names from ``fusedlib.lab``
  (a second statement, in a notebook a second source line);
- inside ``fusedlib/``, a relative import whose module is no longer where it points is pointed
  at its place (``from .reference import`` in ``fusedlib/lab/`` becomes ``from ..reference``,
  ``from .costmodel`` in ``fusedlib/`` becomes ``from .lab.costmodel``); a ``from . import a, b``
  is split the same way;
- inside ``fusedlib/``, ``ROOT = Path(__file__).resolve().parent...`` (the repository root, by
  this project's convention) gets as many ``.parent`` as the file lies deep.

``--check`` changes nothing and exits 1 when some file would change (for CI or a merge).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "fusedlib"
LAB = PKG / "lab"
DEFAULT_PATHS = ["fusedlib", "tests", "notebooks", "lab", "tools", "docs", "README.md", "Makefile", ".ci/run"]
SUFFIXES = {".py", ".ipynb", ".md", ".sh", ".cfg", ".toml", ".txt"}
#: Files that hold the old names on purpose: this script and its test.
EXCLUDE = {"tools/relocate_imports.py", "tests/test_relocate_imports.py"}


def _modules(folder: Path) -> set[str]:
    """Names of the modules and packages directly in ``folder``."""
    if not folder.is_dir():
        return set()
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return names


def lab_only() -> set[str]:
    """Modules of ``fusedlib/lab/`` with no namesake in ``fusedlib/``."""
    return _modules(LAB) - _modules(PKG)


def _exists(parts: list[str]) -> bool:
    """Whether the module ``fusedlib.<parts>`` exists in the tree (``parts`` may be empty)."""
    path = PKG.joinpath(*parts)
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists() or not parts


def _relative(src: list[str], dst: list[str]) -> str:
    """The relative module name (``..reference``) that package ``fusedlib.<src>`` uses for
    ``fusedlib.<dst>``."""
    common = 0
    while common < min(len(src), len(dst)) and src[common] == dst[common]:
        common += 1
    return "." * (len(src) - common + 1) + ".".join(dst[common:])


def _place(name: str) -> list[str] | None:
    """Where a top-level module ``name`` is now: [name] in the library, ["lab", name] in the
    lab, None if neither holds it."""
    if _exists([name]):
        return [name]
    if _exists(["lab", name]):
        return ["lab", name]
    return None


def fix_relative(text: str, package: list[str]) -> str:
    """Point the relative imports of a module in package ``fusedlib.<package>`` at the
    modules' places (see the module docstring)."""
    pattern = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<mod>[\w.]*) import (?P<names>[^(\n#]+?)"
                         r"(?P<tail>[ \t]*(#.*)?)$", re.M)

    def repl(m: re.Match) -> str:
        base = package[:len(package) - (len(m["dots"]) - 1)]
        if m["mod"]:
            if _exists(base + m["mod"].split(".")):
                return m.group(0)
            top, *rest = m["mod"].split(".")
            place = _place(top)
            if place is None:
                return m.group(0)
            return f"{m['indent']}from {_relative(package, place + rest)} import {m['names']}{m['tail']}"
        # from . import a, b: each name a module of the package the dots name, or moved elsewhere
        groups: dict[str, list[str]] = {}
        for n in (n.strip() for n in m["names"].split(",")):
            mod = n.split(" as ")[0].strip()
            place = None if _exists(base + [mod]) else _place(mod)
            key = m["dots"] if place is None else _relative(package, place[:-1])
            groups.setdefault(key, []).append(n)
        if list(groups) == [m["dots"]]:
            return m.group(0)
        lines = [f"{m['indent']}from {key} import {', '.join(ns)}" for key, ns in groups.items()]
        lines[0] += m["tail"]
        return "\n".join(lines)
    return pattern.sub(repl, text)


def fix_absolute(text: str, lab: set[str], notebook: bool) -> str:
    """``fusedlib.<lab module>`` → ``fusedlib.lab.<module>`` (dots or slashes), and the lab
    modules of ``from fusedlib import ...`` imported from ``fusedlib.lab``."""
    if not lab:
        return text
    names = "|".join(sorted(lab))
    text = re.sub(rf"\bfusedlib([./])({names})\b", r"fusedlib\1lab\1\2", text)
    if notebook:  # a JSON source line: "from fusedlib import a, b\n",
        pattern = re.compile(r'^(?P<indent>[ \t]*)"(?P<code>[ \t]*)from fusedlib import (?P<names>[\w ,]+?)'
                             r'(?P<comment>[ \t]*#[^"\\]*)?(?P<nl>\\n)?"(?P<comma>,?)$', re.M)
    else:
        pattern = re.compile(r"^(?P<indent>)(?P<code>[ \t]*)from fusedlib import (?P<names>[\w ,]+?)"
                             r"(?P<comment>[ \t]*#.*)?(?P<nl>)(?P<comma>)$", re.M)

    def repl(m: re.Match) -> str:
        names_ = [n.strip() for n in m["names"].split(",") if n.strip()]
        moved = [n for n in names_ if n.split(" as ")[0].strip() in lab]
        if not moved:
            return m.group(0)
        kept = [n for n in names_ if n not in moved]
        comment = m["comment"] or ""
        stmts = ([f"from fusedlib import {', '.join(kept)}"] if kept else []) + \
                [f"from fusedlib.lab import {', '.join(moved)}"]
        stmts[-1] += comment
        if not notebook:
            return "\n".join(m["code"] + s for s in stmts)
        out = [f'{m["indent"]}"{m["code"]}{s}\\n",' for s in stmts[:-1]]
        out.append(f'{m["indent"]}"{m["code"]}{stmts[-1]}{m["nl"] or ""}"{m["comma"]}')
        return "\n".join(out)
    return pattern.sub(repl, text)


def fix_root(text: str, depth: int) -> str:
    """``ROOT = Path(__file__).resolve()`` followed by ``depth`` ``.parent``: the repository root
    seen from a file ``depth`` folders below it."""
    return re.sub(r"^ROOT = Path\(__file__\)\.resolve\(\)(?:\.parent)+$",
                  "ROOT = Path(__file__).resolve()" + ".parent" * depth, text, flags=re.M)


def relocate(path: Path, lab: set[str]) -> str:
    """The new text of one file."""
    text = path.read_text(encoding="utf-8")
    new = fix_absolute(text, lab, path.suffix == ".ipynb")
    try:
        rel = path.resolve().relative_to(PKG)
    except ValueError:
        rel = None
    if rel is not None and path.suffix == ".py":
        package = list(rel.parts[:-1])
        new = fix_relative(new, package)
        new = fix_root(new, len(rel.parts) + 1)
    return new


def files(paths: list[str]) -> list[Path]:
    out = []
    for p in paths:
        path = ROOT / p
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += [f for f in sorted(path.rglob("*")) if f.is_file() and f.suffix in SUFFIXES
                    and ".ipynb_checkpoints" not in f.parts and "__pycache__" not in f.parts]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=DEFAULT_PATHS, help="files or folders, relative to the root")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    args = parser.parse_args(argv)
    lab = lab_only()
    changed = []
    for path in files(args.paths):
        if path.resolve().relative_to(ROOT).as_posix() in EXCLUDE:
            continue
        old = path.read_text(encoding="utf-8")
        new = relocate(path, lab)
        if new != old:
            changed.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in changed:
        print(f"{'would change' if args.check else 'changed'}: {path}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
