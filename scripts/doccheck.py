#!/usr/bin/env python3
"""Checks that the documentation still matches the repository and the binary.

    scripts/doccheck.py                                  # uses target/debug/switchyard
    scripts/doccheck.py --bin target/release/switchyard

Over README.md, docs/*.md, proto/README.md and plugin-sdk/*/README.md:

  links    every relative link target ([text](path), [text](path#anchor), [ref]: path)
           exists, and every #anchor names a heading (GitHub's slug rules, -1, -2 for
           repeats) or an <a id/name> of the markdown file it points into;
  paths    every path in `backticks` that starts with server/, plugin-sdk/, plugins/,
           proto/, scripts/, examples/, deploy/, tests/ or docs/ exists, from the
           repository root or from the page's own folder (globs, <placeholders> and
           $VARIABLES match any name; {a,b} is expanded);
  commands every `switchyard SUBCOMMAND ...` line in a ```sh, ```bash, ```shell or
           ```console block (or a `$ switchyard ...` line in any block, or an inline
           `switchyard SUBCOMMAND ...` span) names a real subcommand, and each -x/--flag
           on it is an option of that subcommand's --help (quoted arguments, such as a
           --sidecar 'CMD', are not looked into);
  scripts  every --flag given to scripts/X.sh appears in that script, or in the --help
           of the command the script hands "$@" to (switchyard SUBCOMMAND, or a binary
           of target/ found beside --bin).

Prints each problem as FILE:LINE: problem and exits 1 when there is one, 0 otherwise.
Standard library only (Python 3.11).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import unicodedata
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_PREFIXES = (
    "server/", "plugin-sdk/", "plugins/", "proto/", "scripts/",
    "examples/", "deploy/", "tests/", "docs/",
)
COMMAND_LANGS = {"sh", "bash", "shell", "console", "shell-session"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")


def doc_files() -> list[str]:
    files = ["README.md"]
    files += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    files.append("proto/README.md")
    files += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "plugin-sdk", "*", "README.md")))
    return [f for f in files if os.path.isfile(os.path.join(ROOT, f))]


# ---------------------------------------------------------------- markdown reading


class Doc:
    """A markdown file split into prose (code blocks blanked) and fenced blocks."""

    def __init__(self, rel: str):
        self.rel = rel
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        self.prose: list[str] = []  # one entry per line; "" inside code blocks
        self.blocks: list[tuple[str, int, list[str]]] = []  # (lang, first line no, lines)
        fence = None
        for no, line in enumerate(self.lines, 1):
            if fence is None:
                m = FENCE.match(line)
                if m:
                    fence = (m.group(2)[0], len(m.group(2)))
                    self.blocks.append((m.group(3).lower(), no + 1, []))
                    self.prose.append("")
                else:
                    self.prose.append(line)
            else:
                stripped = line.strip()
                ch, n = fence
                if stripped and set(stripped) == {ch} and len(stripped) >= n:
                    fence = None
                else:
                    self.blocks[-1][2].append(line)
                self.prose.append("")
        self.text = "\n".join(self.prose)
        self._line_starts = [0]
        for line in self.prose:
            self._line_starts.append(self._line_starts[-1] + len(line) + 1)
        self.spans = list(self._code_spans())

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def _code_spans(self):
        """(start offset, end offset, content) of each inline code span."""
        text = self.text
        i = 0
        while True:
            m = re.compile(r"`+").search(text, i)
            if not m:
                return
            ticks = m.group(0)
            j = m.end()
            close = None
            while True:
                c = re.compile(r"`+").search(text, j)
                if not c:
                    break
                if "\n\n" in text[m.end():c.start()]:
                    break
                if c.group(0) == ticks:
                    close = c
                    break
                j = c.end()
            if close is None:
                i = m.end()
                continue
            content = text[m.end():close.start()].replace("\n", " ")
            if content.startswith(" ") and content.endswith(" ") and content.strip():
                content = content[1:-1]
            yield m.start(), close.end(), content
            i = close.end()

    def masked_text(self) -> str:
        """The prose with code spans blanked (same offsets)."""
        chars = list(self.text)
        for start, end, _ in self.spans:
            for k in range(start, end):
                if chars[k] != "\n":
                    chars[k] = " "
        return "".join(chars)


def slug_text(heading: str) -> str:
    """A heading's text as GitHub renders it (markup removed)."""
    parts = re.split(r"(`+[^`]*`+)", heading)
    out = []
    for p in parts:
        if p.startswith("`"):
            out.append(p.strip("`"))
            continue
        p = re.sub(r"<[^>]+>", "", p)
        p = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", p)
        p = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", p)
        p = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", p)
        p = p.replace("*", "")
        p = re.sub(r"(?<!\w)_+|_+(?!\w)", "", p)
        out.append(p)
    return "".join(out)


def github_slug(text: str) -> str:
    kept = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LNM" or cat == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


_anchor_cache: dict[str, set[str]] = {}


def anchors_of(rel: str) -> set[str]:
    if rel in _anchor_cache:
        return _anchor_cache[rel]
    doc = Doc(rel)
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    prose = doc.prose
    for idx, line in enumerate(prose):
        heading = None
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            heading = m.group(2)
        elif (idx + 1 < len(prose) and line.strip() and not line.lstrip().startswith(("|", "-", "*", ">"))
              and re.match(r"^ {0,3}(=+|-+)\s*$", prose[idx + 1])
              and (idx == 0 or not prose[idx - 1].strip())):
            heading = line.strip()
        if heading is None:
            continue
        base = github_slug(slug_text(heading))
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    for m in re.finditer(r"<a\s+[^>]*(?:id|name)\s*=\s*\"([^\"]+)\"", doc.text):
        anchors.add(m.group(1))
    _anchor_cache[rel] = anchors
    return anchors


# ---------------------------------------------------------------- checks


class Problems:
    def __init__(self):
        self.items: list[tuple[str, int, str]] = []

    def add(self, rel: str, line: int, msg: str):
        self.items.append((rel, line, msg))


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HREF = re.compile(r"<a\s+[^>]*href\s*=\s*\"([^\"]+)\"")


def check_links(doc: Doc, problems: Problems):
    text = doc.masked_text()
    targets = []
    for rx in (LINK, REFDEF, HREF):
        for m in rx.finditer(text):
            targets.append((m.start(1), m.group(1)))
    for offset, target in targets:
        line = doc.line_of(offset)
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue  # external (https:, mailto:, ...)
        path, _, anchor = target.partition("#")
        path = urllib.parse.unquote(path)
        anchor = urllib.parse.unquote(anchor)
        if path:
            if path.startswith("/"):
                full = os.path.normpath(os.path.join(ROOT, path.lstrip("/")))
            else:
                full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc.rel), path))
            if not os.path.exists(full):
                problems.add(doc.rel, line, f"link to {target}: {os.path.relpath(full, ROOT)} does not exist")
                continue
        else:
            full = os.path.join(ROOT, doc.rel)
        if anchor:
            if os.path.isdir(full):
                readme = os.path.join(full, "README.md")
                if not os.path.isfile(readme):
                    continue
                full = readme
            if not full.endswith(".md"):
                continue
            rel = os.path.relpath(full, ROOT)
            if anchor not in anchors_of(rel):
                problems.add(doc.rel, line, f"link to {target}: no heading #{anchor} in {rel}")


def expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{([^{}]*,[^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(pattern[:m.start()] + alt + pattern[m.end():])
    return out


def to_glob(token: str) -> str:
    g = re.sub(r"<[^<>/]*>", "*", token)
    g = re.sub(r"\$\{?\w+\}?", "*", g)
    g = g.replace("...", "*")
    # `dir/**.yaml`: any depth, as the text means it.
    g = re.sub(r"(^|/)\*\*(?=[^/])", r"\1**/*", g)
    return g


def path_exists(token: str, doc: Doc) -> bool:
    """Whether the path (every alternative of a {a,b}) exists, from the repository
    root or from the page's folder."""
    bases = [ROOT]
    own = os.path.join(ROOT, os.path.dirname(doc.rel))
    if os.path.normpath(own) != ROOT:
        bases.append(own)

    def one(pattern: str) -> bool:
        for base in bases:
            full = os.path.join(base, pattern)
            if glob.has_magic(pattern):
                if glob.glob(full, recursive=True):
                    return True
            elif os.path.exists(full):
                return True
        return False

    return all(one(p) for p in expand_braces(to_glob(token)))


def path_tokens(content: str):
    for raw in content.split():
        tok = raw
        if "=" in tok:
            tok = tok.rsplit("=", 1)[1]
        tok = tok.strip("'\"(),;")
        tok = re.sub(r"[.:,;)]+$", "", tok)
        tok = re.sub(r"\[[\w,-]+\]$", "", tok)  # pip extras: ./plugin-sdk/python[tracing]
        if tok.startswith("./"):
            tok = tok[2:]
        tok = tok.split("#", 1)[0]
        if tok.startswith(PATH_PREFIXES):
            yield tok


def check_paths(doc: Doc, problems: Problems):
    for start, _, content in doc.spans:
        for tok in path_tokens(content):
            if not path_exists(tok, doc):
                problems.add(doc.rel, doc.line_of(start), f"`{tok}` does not exist")


# ---------------------------------------------------------------- commands


class Help:
    """The binary's --help texts, read once each."""

    def __init__(self, binary: str | None):
        self.binary = binary
        self.cache: dict[tuple[str, ...], str | None] = {}
        self.broken: str | None = None
        self.reported = False
        if binary is None or not os.access(binary, os.X_OK):
            self.broken = f"{binary}: no such executable (build it first, or pass --bin)"

    def text(self, *args: str, binary: str | None = None) -> str | None:
        exe = binary or self.binary
        key = (exe or "",) + args
        if key not in self.cache:
            try:
                out = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, timeout=60)
                self.cache[key] = out.stdout + out.stderr
            except (OSError, subprocess.SubprocessError) as e:
                self.cache[key] = None
                if binary is None:
                    self.broken = f"{exe} --help: {e}"
        return self.cache[key]

    def subcommands(self) -> set[str]:
        top = self.text() or ""
        subs = set()
        in_cmds = False
        for line in top.split("\n"):
            if re.match(r"^\S.*:\s*$", line):
                in_cmds = line.strip().lower().startswith(("commands", "subcommands"))
                continue
            if in_cmds:
                m = re.match(r"^\s{1,6}([a-z][\w-]*)(\s|$)", line)
                if m:
                    subs.add(m.group(1))
        return subs

    def options(self, *args: str, binary: str | None = None) -> tuple[set[str], set[str]]:
        """(long flags, short flags) defined in the help's option lines."""
        text = self.text(*args, binary=binary) or ""
        longs, shorts = {"--help"}, {"-h"}
        for line in text.split("\n"):
            m = re.match(r"^\s{0,8}(-[A-Za-z0-9])?(?:,\s*)?(--[A-Za-z0-9][\w-]*)?", line)
            if not m:
                continue
            if m.group(1):
                shorts.add(m.group(1))
            if m.group(2):
                longs.add(m.group(2))
        return longs, shorts


def strip_comment(line: str) -> str:
    quote = None
    prev = " "
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            return line[:i]
        prev = ch
    return line


def blank_quotes(line: str) -> str:
    """Quoted arguments become Q: their flags belong to another command."""
    line = re.sub(r"'[^']*'", "Q", line)
    line = re.sub(r'"(?:[^"\\]|\\.)*"', "Q", line)
    return line


def segments(line: str) -> list[list[str]]:
    line = blank_quotes(strip_comment(line))
    parts = re.split(r"&&|\|\||[;|&()`]|\$\(", line)
    return [p.split() for p in parts if p.strip()]


ENV_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
PREFIX_WORDS = {"exec", "time", "sudo", "env", "nohup", "$"}


def command_word(tokens: list[str]) -> int | None:
    """Index of the command word, after `$`, env assignments and exec/time/..."""
    for i, t in enumerate(tokens):
        if t in PREFIX_WORDS or ENV_ASSIGN.match(t):
            continue
        return i
    return None


def is_switchyard(word: str) -> bool:
    return word == "switchyard" or word.endswith("/switchyard")


def flags_of(tokens: list[str]) -> list[str]:
    out = []
    for t in tokens:
        if re.match(r"^--[A-Za-z0-9]", t):
            out.append(t.split("=", 1)[0])
        elif re.match(r"^-[A-Za-z]$", t):
            out.append(t)
    return out


def check_switchyard(tokens: list[str], rel: str, line: int, help_: Help, problems: Problems):
    if help_.broken:
        if not help_.reported:
            help_.reported = True
            problems.add(rel, line, f"commands not checked: {help_.broken}")
        return
    rest = tokens[1:]
    if rest and not rest[0].startswith("-") and rest[0] != "Q":
        sub = rest[0]
        if sub not in help_.subcommands():
            problems.add(rel, line, f"`switchyard {sub}`: no such subcommand (switchyard --help lists {', '.join(sorted(help_.subcommands()))})")
            return
        args = (sub,)
        rest = rest[1:]
    else:
        args = ()
    longs, shorts = help_.options(*args)
    name = " ".join(("switchyard",) + args)
    for flag in flags_of(rest):
        if flag not in longs and flag not in shorts:
            problems.add(rel, line, f"`{name}`: {flag} is not an option of `{name} --help`")


def forwarded_help(script_text: str, help_: Help) -> tuple[list[tuple[set[str], set[str]]], list[str]]:
    """Options of the commands a script hands "$@" to, and the commands not found."""
    out, missing = [], []
    for line in script_text.split("\n"):
        if '"$@"' not in line and "'$@'" not in line:
            continue
        m = re.search(r"(?:^|[\s/])switchyard\s+([a-z][\w-]*)\b", line)
        if m and not help_.broken:
            out.append(help_.options(m.group(1)))
            continue
        m = re.search(r"target/(?:release|debug)/([\w-]+)\b", line)
        if m and help_.binary:
            for d in (os.path.dirname(help_.binary),
                      os.path.join(ROOT, "target", "debug"), os.path.join(ROOT, "target", "release")):
                exe = os.path.join(d, m.group(1))
                if os.access(exe, os.X_OK):
                    text = help_.text(binary=exe) or ""
                    out.append((set(re.findall(r"--[A-Za-z0-9][\w-]*", text)), set()))
                    break
            else:
                missing.append(f"{m.group(1)} (not built beside {os.path.relpath(help_.binary, ROOT)})")
    return out, missing


def check_script(script: str, tokens: list[str], rel: str, line: int, help_: Help, problems: Problems):
    path = os.path.join(ROOT, script)
    if not os.path.isfile(path):
        problems.add(rel, line, f"`{script}` does not exist")
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    forwarded = None
    for flag in flags_of(tokens):
        if not flag.startswith("--"):
            continue
        if re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
            continue
        if forwarded is None:
            forwarded, missing = forwarded_help(text, help_)
        if any(flag in longs for longs, _ in forwarded):
            continue
        why = f"; cannot read the --help of {', '.join(missing)}" if missing else ""
        problems.add(rel, line, f"`{script}`: {flag} appears neither in the script nor in the --help of what it runs{why}")


SCRIPT_WORD = re.compile(r"^(?:\./)?(scripts/[\w.-]+\.sh)$")


def check_command_tokens(tokens: list[str], rel: str, line: int, help_: Help, problems: Problems, dollar_only=False):
    i = command_word(tokens)
    if i is None:
        return
    word = tokens[i]
    if is_switchyard(word):
        check_switchyard(tokens[i:], rel, line, help_, problems)
    elif not dollar_only:
        m = SCRIPT_WORD.match(word)
        if m:
            check_script(m.group(1), tokens[i + 1:], rel, line, help_, problems)


def logical_lines(lines: list[str], first: int):
    """Lines joined at a trailing backslash, with the number of the first."""
    buf, start = "", None
    for k, line in enumerate(lines):
        if start is None:
            start = first + k
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        yield start, buf + line
        buf, start = "", None
    if start is not None:
        yield start, buf


def check_commands(doc: Doc, help_: Help, problems: Problems):
    for lang, first, lines in doc.blocks:
        for no, line in logical_lines(lines, first):
            stripped = line.strip()
            if lang in COMMAND_LANGS:
                if lang in ("console", "shell-session") and stripped.startswith("$"):
                    stripped = stripped[1:]
                for seg in segments(stripped):
                    check_command_tokens(seg, doc.rel, no, help_, problems)
            elif re.match(r"^\$\s+(\S*/)?switchyard\s", stripped):
                for seg in segments(stripped[1:])[:1]:
                    check_command_tokens(seg, doc.rel, no, help_, problems, dollar_only=True)
    # Inline spans: `switchyard simulate --cluster ...`, `scripts/bench.sh --quick`.
    for start, _, content in doc.spans:
        words = content.split()
        if not words:
            continue
        i = command_word(words)
        if i is None:
            continue
        word = words[i]
        line = doc.line_of(start)
        if is_switchyard(word) and len(words) > i + 1:
            nxt = words[i + 1]
            # Only commands: `switchyard simulate`, `switchyard --help`; not prose.
            if nxt.startswith("-") or nxt in (help_.subcommands() if not help_.broken else set()) \
                    or (help_.broken and re.match(r"^[a-z]+$", nxt)):
                for seg in segments(" ".join(words[i:]))[:1]:
                    check_command_tokens(seg, doc.rel, line, help_, problems)
        elif SCRIPT_WORD.match(word) and len(words) > i + 1:
            for seg in segments(" ".join(words[i:]))[:1]:
                check_command_tokens(seg, doc.rel, line, help_, problems)


# ---------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/debug/switchyard",
                    help="the switchyard binary whose --help the commands are checked against")
    args = ap.parse_args(argv)
    binary = args.bin
    if not os.path.isabs(binary):
        # As given from the current folder, else from the repository root.
        binary = os.path.abspath(binary) if os.path.exists(binary) else os.path.join(ROOT, binary)
    help_ = Help(binary)
    problems = Problems()
    files = doc_files()
    for rel in files:
        doc = Doc(rel)
        check_links(doc, problems)
        check_paths(doc, problems)
        check_commands(doc, help_, problems)
    for rel, line, msg in sorted(set(problems.items), key=lambda p: (p[0], p[1], p[2])):
        print(f"{rel}:{line}: {msg}")
    if problems.items:
        print(f"doccheck: {len(set(problems.items))} problem(s) in {len(files)} files", file=sys.stderr)
        return 1
    print(f"doccheck: {len(files)} files, links, paths and commands ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
