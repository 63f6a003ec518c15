"""Count the import cycles between termforge's modules: print each group of modules that import one
another in a circle (a strongly connected component of grimp's import graph, which holds imports
placed inside functions too) and exit 1 when there is any.

    python scripts/import_cycles.py [package]

The package is found on sys.path (PYTHONPATH=src for a checkout's own code).
"""

from __future__ import annotations

import sys

import grimp


def import_cycles(package: str = "termforge") -> list[list[str]]:
    """Every group of two or more modules of `package` that reach one another through imports,
    largest first, each sorted."""
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    # Tarjan's strongly connected components, iterative (a deep import chain must not hit the
    # recursion limit).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups, key=lambda g: (-len(g), g))


def main(argv: list[str]) -> int:
    package = argv[0] if argv else "termforge"
    groups = import_cycles(package)
    print(f"{package}: {len(groups)} import cycle(s), {sum(map(len, groups))} module(s) in them")
    for group in groups:
        print(f"  {len(group)}: {' '.join(group)}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
