#!/usr/bin/env python3
"""The documentation's links, checked: every relative link and #anchor in README.md and
docs/*.md must lead somewhere.

For each inline link or image, `[text](target)` / `![alt](target)`, and each reference
definition, `[name]: target`, outside code blocks and code spans:
  - a target with a scheme (https:, mailto:, ...) is left alone;
  - a relative path must name a file or directory that exists (relative to the page);
  - an anchor (`page.md#anchor`, or `#anchor` on the same page) must be the GitHub-style slug of
    a heading of that Markdown page (lower case, punctuation dropped, spaces to hyphens, `-1`,
    `-2` ... for repeated headings), or an `<a id="...">`/`<a name="...">` there.
Fails (exit 1) with FILE:LINE: what is wrong, one a line.

Usage: Tests/docs/check-links.py [ROOT]   (default: the repository). `--self-test` runs it on
Tests/docs/broken-links/, pages with deliberate broken links (and good ones that look risky),
and fails unless exactly the expected ones are caught.
"""
import glob
import os
import re
import sys

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); the text may hold one level of brackets and span lines.
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s()]*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(\S+)", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def unfenced(text):
    """The text with fenced code blocks blanked, line numbers kept."""
    lines, fenced = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fenced:
            if m and m.group(1) == fenced:
                fenced = None
            lines.append("")
        elif m:
            fenced = m.group(1)
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def prose(text):
    """The text without code: fenced blocks and code spans blanked, line numbers kept."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), unfenced(text))


def slug(heading):
    """GitHub's anchor for a heading's text: as rendered (code, links and emphasis reduced to
    their text), lower case, anything but letters, digits, spaces, hyphens and underscores
    dropped, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    """Every anchor a Markdown page has: its headings' slugs (repeats numbered) and HTML anchors."""
    if path not in cache:
        found, seen = set(), {}
        text = open(path, encoding="utf-8").read()
        for line in unfenced(text).split("\n"):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        found.update(HTML_ANCHOR.findall(text))
        cache[path] = found
    return cache[path]


def links(text):
    """(line, target) of every link, image and reference definition outside code."""
    body = prose(text)
    for m in LINK.finditer(body):
        yield body.count("\n", 0, m.start()) + 1, m.group(2).strip("<>")
    for m in DEFINITION.finditer(body):
        yield body.count("\n", 0, m.start()) + 1, m.group(2).strip("<>")


def pages(root):
    found = [os.path.join(root, "README.md")] if os.path.exists(os.path.join(root, "README.md")) else []
    return found + sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))


def check(root):
    problems, count = [], 0
    for page in pages(root):
        name = os.path.relpath(page, root)
        for line, target in links(open(page, encoding="utf-8").read()):
            count += 1
            if not target:
                problems.append(f"{name}:{line}: an empty link target")
                continue
            if SCHEME.match(target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            shown = os.path.relpath(dest, root)
            if not os.path.exists(dest):
                problems.append(f"{name}:{line}: {target}: no file {shown}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{name}:{line}: {target}: no heading in {shown} has the anchor #{anchor}")
    return problems, count


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.argv[1:] == ["--self-test"]:
        fixture = os.path.join(here, "broken-links")
        problems, _ = check(fixture)
        expected = [line.strip() for line in open(os.path.join(fixture, "expected.txt")) if line.strip()]
        missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
        for p in problems:
            print("caught: " + p)
        if missing or len(problems) != len(expected):
            print(f"link check self-test FAILED: expected {len(expected)} broken links, caught {len(problems)};"
                  f" not caught: {missing}", file=sys.stderr)
            return 1
        print(f"link check self-test: all {len(expected)} deliberate broken links caught, nothing else")
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(here))
    problems, count = check(root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"docs: {len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"docs: all {count} links of {len(pages(root))} pages lead somewhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
