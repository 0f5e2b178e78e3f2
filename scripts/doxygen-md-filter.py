#!/usr/bin/env python3
"""doxygen-md-filter.py FILE — Doxygen's input filter for the markdown pages (docs/Doxyfile,
FILTER_PATTERNS). The pages are written for GitHub and read there too; this turns them into the
textbook's pages:

  every page      formulas: $...$ becomes \\f$...\\f$ and $$...$$ becomes \\f[...\\f] (MathJax), except
                  inside code (fenced blocks and `spans`), so one source renders on both sites;
                  a citation of a source article, [[A1]](…/docs/sources.md#a1), becomes a link to
                  its section of the sources page (@ref a1);
  docs/mainpage.md  the line "<!-- the course -->" becomes the course: every lesson of
                  lessons/lessons.txt in order, its title (the page's first line), its one-line idea
                  (the "idea" column of lessons/README.md), its number of "Try it" problems and
                  the exercises that belong to it (exercises/README.md's lesson column);
  docs/architecture.md  the line "<!-- the layers -->" becomes the layer picture and the layer table,
                  drawn from the includes and the Makefile by scripts/check-layers.py (--dot, --table),
                  never by hand;
  docs/*.md       a link to a heading, [text](page.md#its-anchor) or [text](#its-anchor), written for
                  GitHub (whose anchor is the heading's text as a slug), becomes @ref to that heading,
                  and every heading of a docs/ page gets the explicit id it needs (its page and
                  slug: training_long_runs_checkpoints_resume_validation), as Doxygen leaves such a
                  link as it is; a heading's `code spans` lose their backticks there (Doxygen 1.9
                  would print the <tt> tags), their -- kept as two dashes (\\--);
  a lesson page   (lessons/NN_name/README.md, beside a main.cpp): introduction → results → the
                  program: the "## The program" section (what main.cpp does) moves after the
                  results, followed by a "Classes used" line (every class of lib/ that main.cpp
                  names, linked) and the commented program itself, with line numbers (on GitHub
                  the page links main.cpp instead); previous / contents / next links at the top
                  and the bottom; a folded answer of its "## Try it" (<details>…</details>)
                  stays folded, its tags passed to the HTML as they are.

Other files pass through unchanged (apart from the formulas). Prints the filtered text on stdout.
"""
import os
import re
import sys

from lesson_table import lessons

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FENCE = re.compile(r"^\s*(```|~~~)")



def page_id(name):
    return "md_lessons_" + name + "_README"


def title(name):
    """The first heading of a lesson's page, without the '#'."""
    path = os.path.join(ROOT, "lessons", name, "README.md")
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("# "):
                    return line[2:].strip()
    except OSError:
        pass
    return "Lesson " + name


def ideas():
    """{name: the 'idea' cell of its row in lessons/README.md's table}."""
    out = {}
    try:
        with open(os.path.join(ROOT, "lessons", "README.md"), encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"\|\s*\[[^\]]*\]\((\w+)/README\.md\)\s*\|[^|]*\|(.*)\|\s*$", line)
                if m:
                    out[m.group(1)] = m.group(2).strip()
    except OSError:
        pass
    return out


def quote(s):
    return s.replace('"', "'")


# ---- formulas -------------------------------------------------------------------------------------
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
DISPLAY = re.compile(r"\$\$(.+?)\$\$")
# GitHub's rule: $ then a non-space, …, a non-space then $ not followed by a digit.
INLINE = re.compile(r"(?<![\\$\w])\$(?!\s)([^$\n]*?[^\s\\$])\$(?![\d$])")


def math_in_text(text):
    out, pos = [], 0
    for m in INLINE_CODE.finditer(text):
        out.append(convert(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(convert(text[pos:]))
    return "".join(out)


def convert(s):
    s = DISPLAY.sub(lambda m: "\\f[" + m.group(1).strip() + "\\f]", s)
    return INLINE.sub(lambda m: "\\f$" + m.group(1) + "\\f$", s)


def formulas(lines):
    """$…$ and $$…$$ outside code; a $$ alone on a line opens or closes a display block."""
    out, in_code, in_display = [], False, False
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
            out.append(line)
        elif in_code:
            out.append(line)
        elif line.strip() == "$$":
            out.append(("\\f]" if in_display else "\\f[") + "\n")
            in_display = not in_display
        elif in_display:
            out.append(line)
        else:
            out.append(math_in_text(line))
    return out


# ---- citations ------------------------------------------------------------------------------------
# A source article cited as [A1]..[A4] links to its section of docs/sources.md, written for GitHub
# as [[A1]](../../docs/sources.md#a1); Doxygen leaves a link to a markdown file with a fragment as it
# is, so it becomes @ref a1 "[A1]" (the section's label).
CITATION = re.compile(r"\[\[(A([1-4]))\]\]\((?:[./]*docs/)?sources\.md(?:#a[1-4])?\)")


def citations(lines):
    out, in_code = [], False
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
        out.append(line if in_code else CITATION.sub(lambda m: '@ref a%s "[%s]"' % (m.group(2), m.group(1)), line))
    return out


# ---- links to headings ----------------------------------------------------------------------------
# GitHub names a heading's anchor by its text: lowercased, markdown and punctuation dropped, spaces
# turned into hyphens (scripts/check-links.py checks every such link with the same rule). Doxygen
# gives a heading no such id, so the docs/ pages' headings get one ({#page_slug}) and the links to
# them become @ref.
HEADING = re.compile(r"^(#{1,6}\s+)(.*?)\s*$")
EXPLICIT_ID = re.compile(r"\{#([\w-]+)\}\s*$")
SECTION_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([\w./-]*?\.md)?#([\w-]+)\)")


def github_slug(text):
    text = EXPLICIT_ID.sub("", text).strip()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def heading_ids(path):
    """({GitHub anchor: Doxygen id}, [Doxygen id of each heading, in order]) for a docs/ page (code
    blocks skipped). A repeated heading's anchor gets -1, -2, … as on GitHub."""
    page = os.path.splitext(os.path.basename(path))[0]
    ids, order, seen, in_code = {}, [], {}, False
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if FENCE.match(line):
                    in_code = not in_code
                m = None if in_code else HEADING.match(line)
                if m:
                    slug = github_slug(m.group(2))
                    if slug in seen:
                        seen[slug] += 1
                        slug = "%s-%d" % (slug, seen[slug] - 1)
                    else:
                        seen[slug] = 1
                    ex = EXPLICIT_ID.search(m.group(2))
                    ids[slug] = ex.group(1) if ex else page + "_" + slug.replace("-", "_")
                    if ex:
                        ids[ex.group(1)] = ex.group(1)
                    order.append(ids[slug])
    except OSError:
        pass
    return ids, order


def section_links(lines, path):
    here = os.path.dirname(path)
    own, order = heading_ids(path)
    order = iter(order)
    out, in_code = [], False
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
            out.append(line)
            continue
        m = None if in_code else HEADING.match(line)
        if m:  # Doxygen 1.9 shows a `span` in a heading as "<tt>…</tt>": the heading without them
            label = next(order)
            text = re.sub(r"`([^`]*)`", lambda c: c.group(1).replace("--", "\\--"), m.group(2))
            line = "%s%s\n" % (m.group(1), text) if EXPLICIT_ID.search(text) else "%s%s {#%s}\n" % (m.group(1), text, label)
        if not in_code:
            def ref(mm):
                target = os.path.realpath(os.path.join(here, mm.group(2))) if mm.group(2) else path
                ids = own if target == path else heading_ids(target)[0]
                label = ids.get(mm.group(3))
                return '@ref %s "%s"' % (label, quote(mm.group(1))) if label else mm.group(0)
            line = SECTION_LINK.sub(ref, line)
        out.append(line)
    return out


# ---- the pages ------------------------------------------------------------------------------------
def exercises_of():
    """{lesson name: [exercise numbers]} from exercises/README.md's table (its lesson column)."""
    out = {}
    try:
        with open(os.path.join(ROOT, "exercises", "README.md"), encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"\|\s*(\d\d)\s*\|(.*)\|\s*$", line)
                if m:
                    for name in re.findall(r"\.\./lessons/(\w+)/README\.md", m.group(2)):
                        out.setdefault(name, []).append(m.group(1))
    except OSError:
        pass
    return out


def try_it_count(name):
    """How many folded "Try it" problems the lesson's page has."""
    with open(os.path.join(ROOT, "lessons", name, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    part = text.split("\n## Try it", 1)
    return part[1].count("<details>") if len(part) == 2 else 0


def course():
    """The course on the main page: each lesson with its idea, its worked problems ("Try it") and
    the exercises that belong to it."""
    idea, exercises = ideas(), exercises_of()
    out = []
    for i, (name, np) in enumerate(lessons(), 1):
        t = title(name)
        line = f'{i}. @ref {page_id(name)} "{quote(t)}"'
        if name in idea:
            line += " — " + idea[name]
        practice = []
        n = try_it_count(name)
        if n:
            practice.append(f"Try it: {n} problems")
        if name in exercises:
            nums = exercises[name]
            practice.append(('@ref exercises "exercise' + ("s" if len(nums) > 1 else "") + " " +
                             ", ".join(nums) + '"'))
        if practice:
            line += " (" + "; ".join(practice) + ")"
        out.append(line + "\n")
    return out


def classes_used(main_cpp):
    """tp::Name for every class of lib/ that main.cpp names, in order of first use (plain structs,
    such as configurations and records, are left out)."""
    with open(main_cpp, encoding="utf-8") as fh:
        src = fh.read()
    declared = set()
    for d in ("lib",):
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for fn in files:
                if fn.endswith(".h"):
                    with open(os.path.join(dirpath, fn), encoding="utf-8") as fh:
                        for m in re.finditer(r"^\s*class\s+(\w+)\s*(?:final\s*)?[:{]", fh.read(), re.M):
                            declared.add(m.group(1))
    seen = []
    # A lesson says "using namespace tp;" or tp::Name; either way the names are the library's.
    for m in re.finditer(r"\b(?:tp::)?([A-Z]\w+)\b", src):
        n = m.group(1)
        if n in declared and n not in seen:
            seen.append(n)
    return ["tp::" + n for n in seen]


def lesson_page(lines, path):
    d = os.path.dirname(path)
    name = os.path.basename(d)
    order = [n for n, _ in lessons()]
    rel = os.path.relpath(os.path.join(d, "main.cpp"), ROOT)
    nav = []
    if name in order:
        i = order.index(name)
        if i > 0:
            nav.append(f'← @ref {page_id(order[i - 1])} "{quote(title(order[i - 1]))}"')
        nav.append('@ref index "Contents"')
        if i + 1 < len(order):
            nav.append(f'@ref {page_id(order[i + 1])} "{quote(title(order[i + 1]))}" →')
    navline = '<div class="lessonnav">' + " &nbsp;|&nbsp; ".join(nav) + "</div>\n"
    used = classes_used(os.path.join(d, "main.cpp"))
    # Sections: the text before the first "## " heading (title), then one list per "## " heading.
    sections, in_code = [[]], False
    for line in lines:
        if FENCE.match(line):
            in_code = not in_code
        if not in_code:
            line = line.replace("[main.cpp](main.cpp)", "main.cpp (below)")
            # A folded answer ("## Try it"): Doxygen 1.9 closes <details> at the end of its first
            # paragraph, so the answer would show unfolded; as raw HTML outside any paragraph the
            # tags fold the whole answer, its code block included.
            if line.startswith(("<details>", "</details>")):
                line = "\\htmlonly[block]" + line.rstrip("\n") + "\\endhtmlonly\n"
            if line.startswith("## "):
                sections.append([])
        sections[-1].append(line)
    for sec in sections:
        if sec and not sec[-1].endswith("\n"):
            sec[-1] += "\n"
    # "## The program" (what main.cpp does, step by step) moves after the results, to the program.
    program = [sec for sec in sections[1:] if sec[0].startswith("## The program")]
    rest = [sec for sec in sections if not (sec and sec[0].startswith("## The program"))]
    out = []
    for line in rest[0]:
        out.append(line)
        if line.startswith("# "):
            out += ["\n", navline]
    for sec in rest[1:]:
        out += sec
    if program:
        out += ["\n"] + [x for sec in program for x in sec]
    else:
        out += ["\n", "## The program\n", "\n"]
    if used:
        out += ["\n", "Classes used: " + ", ".join(used) + ".\n"]
    out += ["\n", f"\\include{{lineno}} {rel}\n", "\n", navline]
    return out


def layers():
    """The layer picture (a \\dot block) and table, from scripts/check-layers.py over this tree."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_layers", os.path.join(ROOT, "scripts", "check-layers.py"))
    cl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cl)
    _, edges = cl.check(ROOT)
    return ["\\dot\n", cl.dot(edges) + "\n", "\\enddot\n", "\n", cl.table(ROOT, edges) + "\n"]


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    real = os.path.realpath(path)
    if os.path.basename(real) == "README.md" and os.path.isfile(os.path.join(os.path.dirname(real), "main.cpp")):
        lines = lesson_page(lines, real)
    elif real == os.path.realpath(os.path.join(ROOT, "docs", "mainpage.md")):
        lines = [x for line in lines for x in (course() if line.strip() == "<!-- the course -->" else [line])]
    elif real == os.path.realpath(os.path.join(ROOT, "docs", "architecture.md")):
        lines = [x for line in lines for x in (layers() if line.strip() == "<!-- the layers -->" else [line])]
    if os.path.dirname(real) == os.path.realpath(os.path.join(ROOT, "docs")):
        lines = section_links(lines, real)
    sys.stdout.write("".join(formulas(citations(lines))))


if __name__ == "__main__":
    main()
