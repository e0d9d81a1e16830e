#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a cycle.

Reads every `crate::name` path in each .rs file of the given source
folders (test modules at the end of a file are skipped) and reports every
strongly connected group of more than one file. `make test` runs it on the
module (src/) and the client (client/src/); ARCHITECTURE.md gives the
layers it keeps.
"""
import os
import re
import sys


def graph(folder):
    names = {f[:-3] for f in os.listdir(folder) if f.endswith(".rs")}
    edges = {}
    for name in names:
        text = open(os.path.join(folder, name + ".rs"), encoding="utf-8").read()
        cut = text.find("#[cfg(test)]\nmod tests")
        if cut >= 0:
            text = text[:cut]
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
