#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a cycle.

Reads every `crate::name` path in each module of the given source folders
(a file, or a folder with a mod.rs whose files count together; test
modules at the end of a file are skipped) and reports every strongly
connected group of more than one module. `make test` runs it on the
module (src/) and the client (client/src/); ARCHITECTURE.md gives the
layers it keeps.
"""
import os
import re
import sys


def sources(folder):
    """Each module of the crate root's folder: a file, or a folder with a
    mod.rs (all its files count as that module)."""
    modules = {}
    for entry in os.listdir(folder):
        path = os.path.join(folder, entry)
        if entry.endswith(".rs"):
            modules[entry[:-3]] = [path]
        elif os.path.isfile(os.path.join(path, "mod.rs")):
            modules[entry] = [
                os.path.join(root, f)
                for root, _, files in os.walk(path)
                for f in files
                if f.endswith(".rs")
            ]
    return modules


def strip_tests(text):
    cut = text.find("#[cfg(test)]\nmod tests")
    return text[:cut] if cut >= 0 else text


def graph(folder):
    modules = sources(folder)
    names = set(modules)
    edges = {}
    for name, paths in modules.items():
        text = "\n".join(strip_tests(open(p, encoding="utf-8").read()) for p in paths)
        used = set(re.findall(r"crate::([a-z_]+)", text))
        for group in re.findall(r"crate::\{([^}]*)\}", text):
            used.update(re.findall(r"\b([a-z_]+)\b", group))
        edges[name] = {u for u in used if u in names and u != name}
    return edges


def cycles(edges):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main(folders):
    status = 0
    for folder in folders:
        found = cycles(graph(folder))
        for group in found:
            print(f"{folder}: import cycle among {', '.join(group)}", file=sys.stderr)
            status = 1
        if not found:
            print(f"{folder}: no import cycle")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src", "client/src"]))
