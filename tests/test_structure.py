"""The core's structure, checked so it stays as designed (DESIGN.md): arrows
point down with no cycles between files, files stay readable, and the
pieces that eager and compile share exist once.

Cycles are found two ways: between the objects the build made (a file that
calls a function another file defines), and between the files' #include
lines (a .c/.h pair counts as one file)."""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "csrc", "core")
OBJ = os.path.join(ROOT, "build", "release", "obj", "core")

# Files whose length is their content: the table of families.
LONG_FILES_ALLOWED = set()
MAX_LINES = 800


def _sources(exts):
    for d, _, files in os.walk(CORE):
        for f in sorted(files):
            if f.endswith(exts) and not f.endswith("_test.c") and "testing" not in f:
                yield os.path.join(d, f)


def _cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(os.path.relpath(c, ROOT) for c in comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_call_cycle_between_core_objects():
    objs = [os.path.join(d, f) for d, _, fs in os.walk(OBJ) for f in fs
            if f.endswith(".o") and not f.endswith("_test.o")]
    assert len(objs) > 40, f"build the core first (make core): {OBJ} has {len(objs)} objects"
    defined, wanted = {}, {}
    for o in objs:
        lines = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        wanted[o] = set()
        for line in lines.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = o
            elif len(parts) == 2 and parts[0] == "U":
                wanted[o].add(parts[1])
    graph = {o: {defined[s] for s in syms if s in defined and defined[s] != o}
             for o, syms in wanted.items()}
    assert _cycles(graph) == []


def test_no_include_cycle_between_core_files():
    def unit(path):
        path = re.sub(r"\.(c|h)$", "", os.path.normpath(path))
        return re.sub(r"_internal$", "", path)

    graph = {}
    for path in _sources((".c", ".h")):
        u = unit(path)
        for inc in re.findall(r'#include "([^"]+)"', open(path).read()):
            t = unit(os.path.join(os.path.dirname(path), inc))
            if t != u and os.path.exists(t + ".c"):
                graph.setdefault(u, set()).add(t)
    assert _cycles(graph) == []


def test_no_core_file_over_800_lines():
    long = {os.path.relpath(p, ROOT): n for p in _sources((".c",))
            if (n := sum(1 for _ in open(p))) > MAX_LINES
            and os.path.relpath(p, CORE) not in LONG_FILES_ALLOWED}
    assert long == {}


def test_eager_compile_is_a_short_list_of_steps():
    src = open(os.path.join(CORE, "eager.c")).read()
    m = re.search(r"^tpu_status_t tpu_eager_compile\(.*?^}\n", src, re.S | re.M)
    assert m, "tpu_eager_compile not found in eager.c"
    assert m.group(0).count("\n") < 60


def test_arguments_are_classified_once():
    """ATen schema arguments are classified by csrc/torch/args.cpp alone:
    eager dispatch and the compile graph builder both use it."""
    hits = []
    for d in ("csrc", "torchtpu"):
        for dp, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if not f.endswith((".cpp", ".h", ".py", ".c")):
                    continue
                text = open(os.path.join(dp, f)).read()
                # Reading a schema type's kind is classifying it.
                if re.search(r"TypeKind::ListType|\"ListType\"|'ListType'", text):
                    hits.append(os.path.relpath(os.path.join(dp, f), ROOT))
    assert hits == [os.path.join("csrc", "torch", "args.cpp")]


def test_one_status_to_exception_path():
    """Only common.cpp turns a C status into an exception (throw_status)."""
    hits = []
    for f in os.listdir(os.path.join(ROOT, "csrc", "torch")):
        text = open(os.path.join(ROOT, "csrc", "torch", f)).read()
        if re.search(r"tpu_status_(message|code|free)\(", text):
            hits.append(f)
    assert hits == ["common.cpp"]

