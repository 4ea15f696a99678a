"""Flags for the instructor: what in a submission is worth a look (not a verdict).

:func:`flag_cells` reads a submission's code cells (in the trusted grader,
never running them) and names what honest exercise code has no reason to do:

``grader-internals``
    imports or names the grading machinery (the instructor's ``course_grader``,
    ``course_lib.grading`` beyond ``checker``; ``TestFailed``, ``run_test``...);
``frames``
    inspects the interpreter: ``sys._getframe``, ``inspect``, ``gc``,
    ``f_back``/``f_globals``, ``__closure__``, ``__code__``, ``ctypes``;
``proc``
    names ``/proc``, ``/sys`` or ``/dev`` paths;
``processes``
    starts or signals processes: ``os.fork``, ``subprocess``, ``os.system``,
    ``multiprocessing``, ``os.setsid``, ``os.kill``, ``pty``;
``network``
    ``socket``, ``urllib``, ``requests``, ``http``, a URL;
``environment``
    probes where it runs: ``os.environ``, ``getenv``, ``COURSE_GRADING``,
    ``platform``, ``getpass``, ``os.getuid``, ``os.getppid``, ``sys.argv``;
``patching``
    assigns to attributes of ``torch``, ``builtins``, ``sys``, ``os`` or a
    class's dunder method, subclasses ``int``/``float``/``bool``/``Tensor``
    with a comparison, or writes Python files (``sitecustomize``, ``.pth``);
``dynamic-code``
    ``exec``, ``eval``, ``compile``, ``__import__``, ``importlib``;
``files``
    writes, deletes or lists files by absolute or parent paths;
``shell``
    shell lines (``!cmd``, ``%%bash``), neutralised by the grader;
``copies-solution``
    contains the published solution's code verbatim (``k of n`` answers).

A flag is a place to look: an honest student may import ``inspect`` to read a
docstring. Obfuscated code may avoid the names, but then usually needs
``getattr`` on strings, ``__import__`` or ``exec``, which are flagged.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from course_grader.notebook import CodeCell, cell_source

__all__ = ["flag_cells", "solution_regions"]

_MODULES = {
    "inspect": "frames",
    "gc": "frames",
    "ctypes": "frames",
    "traceback": "frames",
    "subprocess": "processes",
    "multiprocessing": "processes",
    "pty": "processes",
    "signal": "processes",
    "socket": "network",
    "urllib": "network",
    "requests": "network",
    "http": "network",
    "ftplib": "network",
    "smtplib": "network",
    "httpx": "network",
    "platform": "environment",
    "getpass": "environment",
    "importlib": "dynamic-code",
    "builtins": "patching",
    "site": "patching",
    "shutil": "files",
    "glob": "files",
}
_ATTRIBUTES = {
    "_getframe": "frames",
    "f_back": "frames",
    "f_globals": "frames",
    "f_locals": "frames",
    "f_code": "frames",
    "tb_frame": "frames",
    "__closure__": "frames",
    "__code__": "frames",
    "__globals__": "frames",
    "cell_contents": "frames",
    "get_referrers": "frames",
    "get_objects": "frames",
    "settrace": "frames",
    "setprofile": "frames",
    "fork": "processes",
    "forkpty": "processes",
    "system": "processes",
    "popen": "processes",
    "setsid": "processes",
    "setpgid": "processes",
    "kill": "processes",
    "killpg": "processes",
    "spawnv": "processes",
    "spawnl": "processes",
    "posix_spawn": "processes",
    "execv": "processes",
    "execve": "processes",
    "execvp": "processes",
    "execl": "processes",
    "daemon": "processes",
    "environ": "environment",
    "getenv": "environment",
    "getuid": "environment",
    "geteuid": "environment",
    "getppid": "environment",
    "getpid": "environment",
    "uname": "environment",
    "argv": "environment",
    "remove": "files",
    "unlink": "files",
    "rmtree": "files",
    "listdir": "files",
    "scandir": "files",
    "walk": "files",
    "chmod": "files",
    "rename": "files",
    "replace": "files",
}
_NAMES = {
    "exec": "dynamic-code",
    "eval": "dynamic-code",
    "compile": "dynamic-code",
    "__import__": "dynamic-code",
    "__builtins__": "patching",
    "globals": "frames",
    "vars": "frames",
}
_GRADING_OK = {"checker", "check"}
_PATCHED_ROOTS = {"torch", "builtins", "sys", "os", "np", "numpy", "math", "course_lib", "nn", "F"}
_STRINGS = [
    (re.compile(r"(^|[\s'\"(])/proc(/|\b)"), "proc"),
    (re.compile(r"(^|[\s'\"(])/sys/"), "proc"),
    (re.compile(r"(^|[\s'\"(])/dev/(?!null\b)"), "proc"),
    (re.compile(r"https?://|ftp://"), "network"),
    (re.compile(r"COURSE_GRADING|COURSE_SANDBOX|PYTHONPATH"), "environment"),
    (re.compile(r"sitecustomize|usercustomize|\.pth\b"), "patching"),
    (
        re.compile(
            r"hidden_tests|hidden_examples|gradebook|course_grader|"
            r"course_lib/grading|course_lib\.grading\.(?!check)"
        ),
        "grader-internals",
    ),
    (re.compile(r"^\.\./|^/(?!tmp/)"), "files"),
]
_GRADING_NAMES = {
    "run_test",
    "TestFailed",
    "TestResult",
    "TestSpec",
    "load_hidden_tests",
    "load_assignment",
    "emit",
    "Partial",
    "HIDDEN_PASSED",
    "HIDDEN_FAILED",
    "expect_close",
    "expect_tensor",
    "expect_equal",
    "expect_number",
}


def _comparison_subclass(node: ast.ClassDef) -> bool:
    bases = {ast.unparse(b) for b in node.bases}
    suspicious = {"int", "float", "bool", "str", "torch.Tensor", "Tensor", "tuple", "list"}
    if not bases & suspicious:
        return False
    methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return bool(
        methods
        & {
            "__eq__",
            "__ne__",
            "__lt__",
            "__le__",
            "__gt__",
            "__ge__",
            "__abs__",
            "__sub__",
            "__torch_function__",
            "__bool__",
            "__float__",
            "__int__",
            "__index__",
            "__format__",
            "__repr__",
            "__str__",
            "__hash__",
        }
    )


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _scan(source: str, found: dict[str, set[int]], number: int) -> None:
    """Add ``number`` (a code cell) under each flag its ``source`` raises."""
    flags = set()
    if (
        "get_ipython().system" in source
        or "run_cell_magic('bash'" in source
        or ("run_cell_magic('sh'" in source or "run_cell_magic('script'" in source)
    ):
        flags.add("shell")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        flags.update(flag for pattern, flag in _STRINGS if pattern.search(source))
        for word, flag in (("_getframe", "frames"), ("fork", "processes"), ("socket", "network")):
            if word in source:
                flags.add(flag)
    else:
        for node in ast.walk(tree):
            flags.update(_node_flags(node))
    for flag in flags:
        found.setdefault(flag, set()).add(number)


def _node_flags(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield from _import_flags(node)
    elif isinstance(node, ast.Attribute):
        yield from _attribute_flags(node)
    elif isinstance(node, ast.Name):
        if node.id in _NAMES:
            yield _NAMES[node.id]
        if node.id in _GRADING_NAMES:
            yield "grader-internals"
    elif isinstance(node, ast.Call):
        yield from _call_flags(node)
    elif isinstance(node, ast.ClassDef) and _comparison_subclass(node):
        yield "patching"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield from (flag for pattern, flag in _STRINGS if pattern.search(node.value))


def _import_flags(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    names = [a.name for a in node.names]
    modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else names
    for module in modules:
        top = module.split(".")[0]
        if top in _MODULES:
            yield _MODULES[top]
        if top == "course_grader":
            yield "grader-internals"
        if module.startswith("course_lib.grading"):
            rest = module.removeprefix("course_lib.grading").lstrip(".")
            imported = set(names) if isinstance(node, ast.ImportFrom) else set()
            if rest not in ("", "check") or not imported <= _GRADING_OK:
                yield "grader-internals"
        if module in ("os", "sys") and isinstance(node, ast.ImportFrom):
            yield from (_ATTRIBUTES[name] for name in names if name in _ATTRIBUTES)


def _attribute_flags(node: ast.Attribute) -> Iterator[str]:
    if node.attr in _ATTRIBUTES:
        root = _root_name(node.value)
        if node.attr not in ("remove", "replace", "walk", "system") or root in (
            "os",
            "shutil",
            "platform",
            "sys",
        ):
            yield _ATTRIBUTES[node.attr]
    if node.attr in _GRADING_NAMES or node.attr == "grading":
        yield "grader-internals"
    if isinstance(node.ctx, ast.Store | ast.Del):
        root = _root_name(node.value)
        if root in _PATCHED_ROOTS or (node.attr.startswith("__") and node.attr.endswith("__")):
            yield "patching"


def _call_flags(node: ast.Call) -> Iterator[str]:
    func = node.func
    if not isinstance(func, ast.Name):
        return
    if func.id in ("setattr", "delattr") and node.args:
        if _root_name(node.args[0]) in _PATCHED_ROOTS | {"object"}:
            yield "patching"
    if func.id == "getattr" and len(node.args) >= 2:
        if not isinstance(node.args[1], ast.Constant):
            yield "dynamic-code"
    if func.id == "open" and len(node.args) >= 2:
        mode = node.args[1]
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            if any(c in mode.value for c in "wax+"):
                target = node.args[0]
                if not (
                    isinstance(target, ast.Constant)
                    and isinstance(target.value, str)
                    and not target.value.startswith(("/", ".."))
                ):
                    yield "files"


def _norm_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = (
            line.split("#", 1)[0] if "#" in line and "'" not in line and '"' not in line else line
        )
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


def solution_regions(nb: dict) -> list[list[str]]:
    """The solution regions of a solution notebook, as normalised lines (2 lines or more)."""
    regions = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell_source(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution" in tags:
            lines = _norm_lines(source)
            if len(lines) >= 2:
                regions.append(lines)
            continue
        parts = re.split(r"^[ \t]*### (?:BEGIN|END) SOLUTION[ \t]*$", source, flags=re.M)
        for i, part in enumerate(parts):
            if i % 2:
                lines = _norm_lines(part)
                if len(lines) >= 2:
                    regions.append(lines)
    return regions


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    first = needle[0]
    return any(haystack[i : i + n] == needle for i, line in enumerate(haystack) if line == first)


def flag_cells(
    cells: Iterable[CodeCell], solution: dict | None = None, given: Iterable[str] = ()
) -> list[str]:
    """Flags for a submission's code cells: ``["frames (cells 4, 7)", ...]``, sorted.

    ``solution`` is the published solution notebook (for ``copies-solution``);
    a cell whose code is one of ``given`` (the cells handed out: the install
    cell, the imports) is not scanned.
    """
    found: dict[str, set[int]] = {}
    cells = list(cells)
    handed_out = {"\n".join(_norm_lines(g)) for g in given}
    for cell in cells:
        if "\n".join(_norm_lines(cell.source)) not in handed_out:
            _scan(cell.source, found, cell.number)
    out = []
    for flag in sorted(found):
        numbers = sorted(found[flag])
        where = ", ".join(str(n) for n in numbers[:5]) + (", ..." if len(numbers) > 5 else "")
        out.append(f"{flag} (cell{'s' * (len(numbers) > 1)} {where})")
    if solution is not None:
        regions = solution_regions(solution)
        if regions:
            lines = [line for cell in cells for line in _norm_lines(cell.source)]
            copied = sum(_contains(lines, region) for region in regions)
            if copied and copied * 2 >= len(regions):
                out.append(f"copies-solution ({copied} of {len(regions)} answers verbatim)")
    return out
