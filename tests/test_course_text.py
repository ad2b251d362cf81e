"""The course's text rules (notebooks 00 → 09, in reading order): every glossary term defined in
bold before its first use, no measured number typed into Markdown, no experiment IDs or
references to the lab's notes, and slides that fit a screen with alt text on every image.

The rules are those of the course's conventions; the glossary is :mod:`fusedlib.glossary`.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from fusedlib import glossary

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("0[0-9]_*.ipynb"))  # reading order: 00 → 09


def _read(path):
    return nbformat.read(path, as_version=4)


_CACHE: dict = {}


def notebook(path):
    if path not in _CACHE:
        _CACHE[path] = _read(path)
    return _CACHE[path]


# ---------------------------------------------------------------- what the Markdown says
_FENCE = re.compile(r"```.*?```", re.S)
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_LINK_TARGET = re.compile(r"(\]\()[^)]*\)")
_HTML_TAG = re.compile(r"<[^>]+>")


def prose(markdown: str, keep_code: bool = True) -> str:
    """Markdown without what is not prose: link targets (anchors repeat headings), HTML tags,
    display and inline math, fenced code and (unless ``keep_code``) inline code spans."""
    text = _LINK_TARGET.sub(r"\1)", markdown)
    text = _FENCE.sub(" ", text)
    text = _DISPLAY_MATH.sub(" ", text)
    text = _INLINE_MATH.sub(" ", text)
    if not keep_code:
        text = _CODE_SPAN.sub(" ", text)
    return _HTML_TAG.sub(" ", text)


def markdown_cells():
    """(notebook name, cell index, source) of every Markdown cell, in reading order."""
    for path in NOTEBOOKS:
        for i, cell in enumerate(notebook(path).cells):
            if cell.cell_type == "markdown":
                yield path.name, i, cell.source


# ---------------------------------------------------------------- terms before use
def test_the_glossary_names_a_notebook_and_a_pattern_for_every_term():
    for name, term in glossary.TERMS.items():
        assert term.notebook in {"00", "02", "05"} or re.fullmatch(r"0\d", term.notebook), name
        assert term.definition.endswith(".") and len(term.definition.split()) >= 6, name
        assert term.regex().search(name) or name == "producer/consumer", name


@pytest.mark.parametrize("text, term, hit", [
    ("one warp of 32 threads", "warp", True),
    ("a warpgroup of four warps", "warp", True),
    ("a warpgroup is four", "warp", False),
    ("a warpgroup is four", "warpgroup", True),
    ("loads two tiles", "tile", True),
    ("TMA copies", "TMA", True),
    ("TMAX and fTMA", "TMA", False),
    ("in tf32 and fp32", "TF32", True),
    ("in 3xtf32 only", "TF32", False),
    ("in 3xtf32 only", "3xTF32", True),
    ("the `launch_gemm` dispatcher", "kernel launch", False),
    ("two SMs idle", "SM", True),
    ("sm_90a and SMEM", "SM", False),
    ("split-K GEMMs", "split-K", True),
    ("waves per SM", "wave", True),
])
def test_term_patterns(text, term, hit):
    assert bool(glossary.TERMS[term].regex().search(text)) == hit


def _definition_position(term):
    """(notebook index, cell index) of the first Markdown cell of the defining notebook holding
    the term in bold, or None."""
    t = glossary.TERMS[term]
    for k, path in enumerate(NOTEBOOKS):
        if not path.name.startswith(t.notebook + "_"):
            continue
        for i, cell in enumerate(notebook(path).cells):
            if cell.cell_type == "markdown" and glossary.bold_definition(term, prose(cell.source)):
                return k, i
    return None


@pytest.mark.parametrize("term", list(glossary.TERMS))
def test_every_term_is_defined_in_bold_before_its_first_use(term):
    """The defining notebook holds the term in bold in a Markdown cell; no Markdown cell before
    that one (00 → 08, cell order) uses it."""
    t = glossary.TERMS[term]
    if not any(p.name.startswith(t.notebook + "_") for p in NOTEBOOKS):
        pytest.skip(f"notebook {t.notebook} is not in this checkout")
    where = _definition_position(term)
    # without a definition, every use up to the end of the defining notebook is reported
    limit = where or (next(k for k, p in enumerate(NOTEBOOKS) if p.name.startswith(t.notebook + "_")), 10 ** 9)
    rx = t.regex()
    early = []
    for k, path in enumerate(NOTEBOOKS[:limit[0] + 1]):
        for i, cell in enumerate(notebook(path).cells):
            if (k, i) >= limit:
                break
            if cell.cell_type == "markdown":
                m = rx.search(prose(cell.source))
                if m:
                    early.append(f"{path.name} cell {i}: …{prose(cell.source)[max(0, m.start() - 40):m.end() + 40]!r}…")
    assert where is not None, (f"{term!r}: no bold definition (**{term}**) in a Markdown cell of notebook {t.notebook}"
                               + "".join(f"\n  used in {e}" for e in early))
    assert not early, f"{term!r} is used before its definition in {NOTEBOOKS[where[0]].name} cell {where[1]}:\n" + \
        "\n".join(early)


def test_notebook_00_renders_the_glossary():
    path = next(p for p in NOTEBOOKS if p.name.startswith("00_"))
    assert any(c.cell_type == "code" and "glossary.table()" in c.source for c in notebook(path).cells)


# ---------------------------------------------------------------- every number from the results
UNITS = r"ms|µs|μs|us|ns|×|x|%|GB/s|TB/s|TFLOP/s|GFLOP/s|MB|MiB|GB|GiB|KB|KiB|W|GHz|MHz"
#: A number followed by a unit: a measured or quoted value. "128×128" and "2x64->3" (shapes)
#: and "3xTF32" are not: the unit must not run on into a word or a number.
MEASURED = re.compile(rf"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:{UNITS})(?![\w/]|\s?\d|\s?[−-]?\$)")
#: Values a Markdown cell may state, each with its reason. Keep this short.
ALLOWED = {
    "50 MB": "the H100's L2 size (datasheet), a constant of the hardware",
    "228 KB": "the H100's shared memory per SM (datasheet), a constant of the hardware",
}


@pytest.mark.parametrize("text, hit", [
    ("the GEMM takes 3.720 ms", True), ("1.3× faster", True), ("saves 12 %", True), ("1.3x eager", True),
    ("at 2974 GB/s", True), ("uses 416 MiB", True), ("a 700 W cap", True), ("1024×8192→8192", False),
    ("2x64->3 shapes", False), ("3xTF32 products", False), ("128×128 tiles", False), ("4 × 4 outputs", False),
    ("problem 84", False), ("8 warps", False), ("50 MB of L2", False),
])
def test_the_measured_value_pattern(text, hit):
    assert bool(_measured_values(text)) == hit


def _measured_values(markdown: str) -> list[str]:
    text = prose(markdown, keep_code=False)
    for allowed in ALLOWED:
        text = text.replace(allowed, " ")
    return [m.group(0) for m in MEASURED.finditer(text)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_measured_value_in_markdown(path):
    """Numbers with units belong in code cells that render them from results/ or the cost model."""
    found = [(i, v) for i, c in enumerate(notebook(path).cells) if c.cell_type == "markdown"
             for v in _measured_values(c.source)]
    assert not found, f"{path.name}: measured values typed into Markdown (cell, value): {found}"


# ---------------------------------------------------------------- no lab history
RUN_ID = re.compile(r"\brun\d+\b")


def _output_texts(cell):
    for out in cell.get("outputs", []):
        if "text" in out:
            yield out["text"]
        for mime, value in out.get("data", {}).items():
            if mime.startswith("text/"):
                yield value if isinstance(value, str) else "".join(value)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_run_ids_or_notes_in_markdown_or_outputs(path):
    bad = []
    for i, cell in enumerate(notebook(path).cells):
        texts = [cell.source] if cell.cell_type == "markdown" else list(_output_texts(cell))
        for text in texts:
            bad += [(i, m) for m in RUN_ID.findall(text)] + [(i, "NOTES.md")] * text.count("NOTES.md")
    assert not bad, f"{path.name}: experiment IDs or NOTES.md (cell, match): {sorted(set(bad))}"


# ---------------------------------------------------------------- slides
SLIDE_TYPES = {"slide", "subslide", "-", "fragment", "skip", "notes"}
#: At most this many table rows (Markdown table rows, HTML table body rows) on one slide.
MAX_TABLE_ROWS = 15
#: At most this many words of Markdown prose on one slide (math, code blocks and tables not counted):
#: the course asks for about 150.
MAX_WORDS = 160


def slides(nb):
    """The deck: a list of slides, each a list of (cell index, cell); a slide starts at a
    ``slide`` or ``subslide`` cell and goes on through ``-`` and ``fragment`` cells; ``skip``
    and ``notes`` cells are not shown."""
    deck: list[list] = []
    for i, cell in enumerate(nb.cells):
        kind = cell.metadata.get("slideshow", {}).get("slide_type")
        if kind in ("slide", "subslide") or (not deck and kind in ("-", "fragment")):
            deck.append([])
        if kind in ("skip", "notes", None):
            continue
        deck[-1].append((i, cell))
    return deck


_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def markdown_table_rows(text: str) -> int:
    """Body rows of the Markdown tables in ``text`` (header and rule lines not counted)."""
    rows = [line for line in _TABLE_ROW.findall(_FENCE.sub(" ", text))]
    rules = sum(bool(_TABLE_RULE.match(r)) for r in rows)
    return len(rows) - 2 * rules  # each table: one header line and one rule line


def html_table_rows(html: str) -> int:
    """Body rows (``<tr>`` inside ``<tbody>``, or every ``<tr>`` without one) of HTML tables."""
    bodies = re.findall(r"<tbody.*?</tbody>", html, flags=re.S)
    return sum(b.count("<tr") for b in bodies) if bodies else html.count("<tr")


def table_rows(cell) -> int:
    if cell.cell_type == "markdown":
        return markdown_table_rows(cell.source)
    n = 0
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "text/html" in data:
            n += html_table_rows("".join(data["text/html"]))
        elif "text/markdown" in data:
            n += markdown_table_rows("".join(data["text/markdown"]))
    return n


def words(markdown: str) -> int:
    text = "\n".join(line for line in prose(markdown).splitlines() if not _TABLE_ROW.match(line))
    return len(re.findall(r"[^\W\d_][\w'’-]*", text))


def test_slide_measures():
    assert markdown_table_rows("| a | b |\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 |\n") == 2
    assert html_table_rows("<table><thead><tr><th>a</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table>") == 1
    assert words("Two words $x + y$ `code` and [a link](#target)") == 6


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_has_slide_metadata(path):
    nb = notebook(path)
    missing = [i for i, c in enumerate(nb.cells) if c.metadata.get("slideshow", {}).get("slide_type") not in SLIDE_TYPES]
    assert not missing, f"{path.name}: cells without a slide type: {missing}"
    assert nb.cells[0].metadata.get("slideshow", {}).get("slide_type") == "slide", f"{path.name}: cell 0 starts no slide"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_slide_fits_a_screen(path):
    too_big = []
    for slide in slides(notebook(path)):
        rows = sum(table_rows(c) for _, c in slide)
        n_words = sum(words(c.source) for _, c in slide if c.cell_type == "markdown")
        if rows > MAX_TABLE_ROWS or n_words > MAX_WORDS:
            too_big.append(f"slide at cell {slide[0][0]}: {rows} table rows, {n_words} words")
    assert not too_big, f"{path.name} (limits {MAX_TABLE_ROWS} rows, {MAX_WORDS} words): " + "; ".join(too_big)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_image_has_alt_text(path):
    bad = []
    for i, cell in enumerate(notebook(path).cells):
        if cell.cell_type == "markdown":
            bad += [(i, "markdown image without alt") for alt in re.findall(r"!\[([^\]]*)\]\(", cell.source)
                    if not alt.strip()]
            bad += [(i, "<img> without alt") for tag in re.findall(r"<img[^>]*>", cell.source)
                    if not re.search(r'alt="[^"]+"', tag)]
            continue
        for out in cell.get("outputs", []):
            for mime in out.get("data", {}):
                if mime.startswith("image/") and not str(out.get("metadata", {}).get(mime, {}).get("alt", "")).strip():
                    bad.append((i, f"{mime} output without alt (use course.show_figure)"))
    assert not bad, f"{path.name}: images without alt text: {bad}"
