#!/usr/bin/env python3
"""The module graph of every Rust crate in the workspace, and its import circles.

    scripts/modgraph.py              # check: print every circle, exit 1 if there is one
    scripts/modgraph.py --edges      # also list each crate's top-level module edges
                                     # with the files that make them (to find the upward one)

An edge A -> B exists when a file of module A names a path into module B: `use
crate::b::..`, `crate::b::..` in code, or `super::..` reaching a sibling. A path
resolves to the deepest module that exists as a file. Two graphs are checked for
strongly connected components larger than one node:

  * modules: the crate's top-level modules (server/src/remote/, server/src/config/, ...);
  * files:   source files, leaving out a folder's mod.rs and its own descendants
             (declarations and re-exports are not layering).

Code after `#[cfg(test)]` and files named tests.rs are not counted: tests may reach
across layers. The test command runs this; a circle fails the run.
"""
import os
import re
import sys

SKIP_DIRS = {"target", "node_modules", ".git", "dist", "vendor", "pb"}


def code_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        src = f.read()
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r'"(?:[^"\\]|\\.)*"', '""', src)  # string contents are not paths
    cut = src.find("#[cfg(test)]")
    return src if cut < 0 else src[:cut]


def crate_roots(root):
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS)
        if os.path.basename(d) == "src" and ({"lib.rs", "main.rs"} & set(files)):
            yield d


def module_files(src_dir):
    """{file path: module path as a tuple}; lib.rs/main.rs are the root ()."""
    out = {}
    for d, subdirs, files in os.walk(src_dir):
        rel_dir = os.path.relpath(d, src_dir)
        if rel_dir.split(os.sep)[0] == "bin":
            subdirs[:] = []
            continue
        for f in files:
            if not f.endswith(".rs") or f in ("tests.rs", "test.rs") or f.endswith("_tests.rs"):
                continue
            parts = [] if rel_dir == "." else rel_dir.split(os.sep)
            stem = f[:-3]
            if stem == "mod" or (not parts and stem in ("lib", "main")):
                mod = tuple(parts)
            else:
                mod = tuple(parts + [stem])
            out[os.path.join(d, f)] = mod
    return out


def flatten_use(tree):
    """'a::{b, c::{d, e}}' -> ['a::b', 'a::c::d', 'a::c::e']"""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"as\w+$", "", tree)]
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    return [p for item in items if item for p in flatten_use(prefix + item)]


def paths_named(src, here):
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", src):
        found += flatten_use(m.group(1))
    found += re.findall(r"\b(?:crate|super)(?:::\w+)+", src)
    for p in found:
        segs = [s for s in p.split("::") if s]
        if not segs:
            continue
        if segs[0] == "crate":
            yield segs[1:]
        elif segs[0] in ("super", "self"):
            base = list(here)
            while segs and segs[0] == "super":
                segs, base = segs[1:], base[:-1]
            if segs and segs[0] == "self":
                segs = segs[1:]
            yield base + segs


def strongly_connected(graph):
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    show_edges = "--edges" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    circles = 0
    crates = 0
    for src_dir in crate_roots(root):
        crates += 1
        files = module_files(src_dir)
        by_module = {m: p for p, m in files.items()}
        file_edges, module_edges, why = {}, {}, {}
        for path, here in files.items():
            for target in paths_named(code_of(path), here):
                resolved = None
                for k in range(len(target), -1, -1):
                    if tuple(target[:k]) in by_module:
                        resolved = tuple(target[:k])
                        break
                if not resolved or resolved == here or not here:
                    continue
                nested = resolved == here[: len(resolved)] or here == resolved[: len(here)]
                if not nested:
                    file_edges.setdefault(path, set()).add(by_module[resolved])
                if here[0] != resolved[0]:
                    module_edges.setdefault(here[0], set()).add(resolved[0])
                    why.setdefault((here[0], resolved[0]), set()).add(os.path.relpath(path, root))
        crate = os.path.relpath(src_dir, root)
        if show_edges:
            for (a, b), paths in sorted(why.items()):
                print(f"{crate}: {a} -> {b}  ({', '.join(sorted(paths))})")
        for comp in strongly_connected(module_edges):
            circles += 1
            print(f"module circle in {crate}: {' <-> '.join(comp)}")
        for comp in strongly_connected(file_edges):
            circles += 1
            print(f"file circle in {crate}: {', '.join(os.path.relpath(p, root) for p in comp)}")
    print(f"import circles: {circles} in {crates} crates")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
