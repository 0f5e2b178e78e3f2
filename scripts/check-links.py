#!/usr/bin/env python3
"""check-links.py [--max-lines N] FILE.md ... — every relative link in the markdown files must lead
somewhere: the file it names must exist (relative to the page, as GitHub resolves it), and a
`#anchor` (on this page or on another .md page) must be one that a heading of that page produces.

A heading produces two anchors: GitHub's (the text lowercased, markdown and punctuation dropped,
spaces turned into hyphens: "## On a GPU (`--comm`)" → #on-a-gpu---comm) and, when it ends in
`{#id}`, Doxygen's explicit id (#id). `<a id="x">` and `<a name="x">` count too. Links in code
(fenced blocks and `spans`) and links with a scheme (https:, mailto:) are not checked.

With --max-lines N, the first file must also have at most N lines (the README's promise).
Prints one line per broken link (file:line: target: why) and exits 1 when there is one, else 0.
"""
import os
import re
import sys

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+).+?\1")
EXPLICIT_ID = re.compile(r"\{#([\w-]+)\}\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(path):
    """(line number, text) of every line outside fenced code blocks."""
    inside = False
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield n, line.rstrip("\n")


def github_slug(text):
    text = EXPLICIT_ID.sub("", text).strip()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)  # GitHub keeps letters, digits, _, - and spaces
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor the page produces (GitHub's, with -1, -2 … for repeated headings)."""
    found, seen = set(), {}
    for _, line in prose_lines(path):
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            slug = github_slug(m.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
            ex = EXPLICIT_ID.search(m.group(1))
            if ex:
                found.add(ex.group(1))
        found.update(HTML_ID.findall(line))
    return found


def check(path):
    problems = []
    here = os.path.dirname(path)
    cache = {}
    for n, line in prose_lines(path):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto:, …
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            if not os.path.exists(dest):
                problems.append(f"{path}:{n}: {target}: no such file ({dest})")
                continue
            if anchor and dest.endswith(".md"):
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{path}:{n}: {target}: no heading of {dest} makes #{anchor}")
    return problems


def main(argv):
    max_lines = None
    if len(argv) > 2 and argv[1] == "--max-lines":
        max_lines = int(argv[2])
        argv = argv[:1] + argv[3:]
    files = argv[1:]
    if not files:
        print(__doc__.strip().splitlines()[0])
        return 2
    problems = []
    if max_lines is not None:
        with open(files[0], encoding="utf-8") as fh:
            count = sum(1 for _ in fh)
        if count > max_lines:
            problems.append(f"{files[0]}: {count} lines, more than {max_lines}")
    for path in files:
        problems += check(path)
    for p in problems:
        print("✗ " + p)
    if not problems:
        print(f"✓ links: every relative link and #anchor in {len(files)} pages leads somewhere" +
              (f"; {files[0]} has at most {max_lines} lines" if max_lines is not None else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
