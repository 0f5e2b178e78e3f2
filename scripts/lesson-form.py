#!/usr/bin/env python3
"""lesson-form.py — every lesson page has the course's form (issue 41): one idea, said first,
shown in a picture, practised at the end.

For each lesson of lessons/lessons.txt (or the NAMEs given), lessons/NAME/README.md must have:

  1. under its title "# Lesson NN: …", a Key-idea box: a blockquote of at most 4 lines of text
     that starts "> **Key idea.**" and holds "**What you should see.**";
  2. an "## Introduction" of at most 400 words (words with a letter in them; fenced code and the
     paragraph that links the lesson's exercises, "Exercise…:", are not counted, tables are): what
     the learner needs before the program runs. Implementation notes go
     to "## Details", the sources' mistakes to "## Where the sources go wrong", after the Results;
  3. the sections in the course's order: Introduction, The program, Results, then any of What the
     numbers mean, Where the sources go wrong, Details, and "## Try it" last;
  4. a conceptual picture: the Results hold the lesson's line "picture: build/lesson_….svg" and the
     page shows that file, "![…](lesson_….svg)" (scripts/lesson-pages.py copies it beside the page);
  5. at least two "Try it" problems, each folded in <details> (scripts/tryit.py checks their
     answers against the programs).

  scripts/lesson-form.py [NAME...]   exit 0 when every page has the form; else one line per problem
  scripts/lesson-form.py selftest    that each rule can fail, on a broken copy of a good page
"""
import os
import re
import sys

from lesson_table import ROOT, lessons

MAX_INTRO_WORDS = 400
MAX_BOX_LINES = 4
MIN_TRY_IT = 2
ORDER = ["Introduction", "The program", "Results", "What the numbers mean",
         "Where the sources go wrong", "Details", "Try it"]
PICTURE_LINE = re.compile(r"^\s*picture: build/(lesson_\S+\.svg)\s*$", re.M)


def sections(text):
    """[(title, body)] of the page's "## " sections, in order."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def words(body):
    """The words of a section with a letter in them, fenced code left out."""
    body = re.sub(r"^```.*?^```", "", body, flags=re.M | re.S)
    body = "\n\n".join(p for p in re.split(r"\n\s*\n", body) if not re.match(r"\s*Exercises?:", p))
    return [w for w in body.split() if re.search(r"[A-Za-z]", w)]


def key_idea_box(lines):
    """The problem with the box under the title, or None."""
    i = 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    box = []
    while i < len(lines) and lines[i].startswith(">"):
        box.append(lines[i][1:].strip())
        i += 1
    text = [b for b in box if b]
    if not text or not text[0].startswith("**Key idea.**"):
        return 'no Key-idea box under the title (a blockquote starting "> **Key idea.**")'
    if not any("**What you should see.**" in b for b in text):
        return 'the Key-idea box has no "**What you should see.**"'
    if len(text) > MAX_BOX_LINES:
        return f"the Key-idea box has {len(text)} lines of text (at most {MAX_BOX_LINES})"
    return None


def problems(name, text):
    """The page's form problems, one line each."""
    out = []
    lines = text.split("\n")
    if not re.match(r"# Lesson \w+: ", lines[0]):
        out.append('its first line is not "# Lesson NN: title"')
    box = key_idea_box(lines)
    if box:
        out.append(box)
    secs = sections(text)
    titles = [t for t, _ in secs]
    unknown = [t for t in titles if t not in ORDER]
    if unknown:
        out.append(f"sections the course does not know: {', '.join(unknown)} (known: {', '.join(ORDER)})")
    known = [ORDER.index(t) for t in titles if t in ORDER]
    if known != sorted(known) or len(set(known)) != len(known):
        out.append(f"sections out of the course's order: {', '.join(titles)}")
    for required in ("Introduction", "The program", "Results", "Try it"):
        if required not in titles:
            out.append(f'no "## {required}" section')
    body = dict(secs)
    if "Introduction" in body:
        n = len(words(body["Introduction"]))
        if n > MAX_INTRO_WORDS:
            out.append(f"the introduction is {n} words (at most {MAX_INTRO_WORDS}: move implementation notes "
                       f'to "## Details", the sources\' mistakes to "## Where the sources go wrong")')
    shown = set(re.findall(r"!\[[^\]]*\]\(([^)\s]+\.svg)\)", text))
    drawn = PICTURE_LINE.findall(body.get("Results", ""))
    if not drawn:
        out.append('its Results have no "picture: build/lesson_….svg" line (the lesson\'s conceptual picture)')
    for svg in drawn:
        if svg not in shown:
            out.append(f"it does not show its picture {svg} (![…]({svg}))")
        elif not os.path.exists(os.path.join(ROOT, "lessons", name, svg)):
            out.append(f"lessons/{name}/{svg} is missing (make lesson-pages copies it)")
    tries = len(re.findall(r"<details>", body.get("Try it", "")))
    if tries < MIN_TRY_IT:
        out.append(f"{tries} Try it problem(s) with <details> (at least {MIN_TRY_IT})")
    return out


def page(name):
    with open(os.path.join(ROOT, "lessons", name, "README.md"), encoding="utf-8") as fh:
        return fh.read()


def check(names):
    bad = 0
    for name in names:
        found = problems(name, page(name))
        for p in found:
            print(f"✗ lessons/{name}/README.md: {p}")
        bad += bool(found)
    if bad:
        print(f"✗ {bad} of {len(names)} lesson pages lack the course's form (scripts/lesson-form.py's docstring)")
        return 1
    print(f"✓ {len(names)} lesson pages have the course's form: a Key-idea box, an introduction of at most "
          f"{MAX_INTRO_WORDS} words, a picture, at least {MIN_TRY_IT} Try it problems")
    return 0


def selftest(names):
    """Each rule, broken on a copy of the first good page, must be reported."""
    good = next((n for n in names if not problems(n, page(n))), None)
    if good is None:
        print("✗ selftest: no lesson page has the form to break")
        return 1
    text = page(good)
    breaks = {
        "no box": re.sub(r"\*\*Key idea\.\*\*", "**Idea.**", text, count=1),
        "long intro": text.replace("## Introduction\n", "## Introduction\n" + "word " * (MAX_INTRO_WORDS + 1) + "\n", 1),
        "order": text.replace("## The program", "## Results2", 1).replace("## Results\n", "## The program\n", 1)
                     .replace("## Results2", "## Results", 1),
        "no picture": PICTURE_LINE.sub("", text),
        "one try": text.replace("<details>", "<div>", len(re.findall("<details>", text)) - 1),
    }
    failed = [k for k, t in breaks.items() if not problems(good, t)]
    if failed:
        print(f"✗ selftest on lessons/{good}/README.md: not caught: {', '.join(failed)}")
        return 1
    print(f"✓ the form check catches each of {len(breaks)} breaks of lessons/{good}/README.md")
    return 0


def main(argv):
    if argv[:1] == ["selftest"]:
        return selftest([n for n, _ in lessons()])
    names = argv or [n for n, _ in lessons()]
    return check(names)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
