"""Every relative link in the repository's markdown reaches a file, and every #anchor a heading there."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def markdown_files():
    try:
        listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed]


def github_slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, result = {}, set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            slug = github_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def test_github_slug_matches_githubs_rules():
    assert github_slug("A 256-wide layer's backward in one pass") == "a-256-wide-layers-backward-in-one-pass"
    assert github_slug("Why programs link `HypatiaOps::hypatia_ops` (`-Wl,--no-as-needed`)") == \
        "why-programs-link-hypatiaopshypatia_ops--wl--no-as-needed"
    assert github_slug("relu_last's ReLU backward") == "relu_lasts-relu-backward"


def test_relative_links_reach_their_files_and_headings():
    broken = []
    for doc in markdown_files():
        for match in LINK.finditer(FENCE.sub("", doc.read_text(encoding="utf-8"))):
            target = match.group(1)
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            resolved = (doc.parent / path) if path else doc
            where = f"{doc.relative_to(ROOT)}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)
