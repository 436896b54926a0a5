"""Product code stays on the public API of its libraries (``make lint``, ``.ci/run``).

ruff's SLF001 flags reads of underscore members of other objects; this check
covers what it cannot see:

- ``known``: internals of Django, uvicorn, asyncio, redis-py, kombu and DRF
  that earlier code reached for (a server's response cycle through
  ``send.__self__``, its ``transport`` and ``flow``, ``write_paused``,
  ``chunked_encoding``; ``_asyncio_future_blocking``; redis-py's ``_parser``
  and ``_sock``; ``_handler_class``; kombu's ``unacked_key`` layout and
  ``restore_by_tag``; a DRF throttle's ``history`` written), spelled as an
  attribute or as a string in ``getattr``/``setattr``/``hasattr``/``delattr``.
- ``private-write``: a write (or delete) of an underscore attribute of an
  object that is not ``self``/``cls``, directly or through ``setattr`` with a
  literal name or a module-level string constant; ``private-read``: the read
  SLF001 misses, ``getattr``/``hasattr`` of such a name.
- ``library-private``: a class built on a library class that overrides one
  of its underscore methods or reads or writes one of its underscore
  attributes through ``self``: the library's insides, changed from outside.
- ``monkeypatch``: ``unittest.mock`` (or ``mock``) imported, a ``patch``
  or ``monkeypatch`` call, or an assignment to (or ``setattr`` on) an
  attribute of something imported from a library.
- ``route``: a request routed by its path before Django's URL resolver
  (``scope["path"]``, ``environ["PATH_INFO"]``), and in the entry points
  (``config/asgi.py``, ``config/wsgi.py``) anything but Django's handler,
  WhiteNoise (or Django's static files handler) around it, and a lifespan
  wrapper: no class, no path, no other callable handed Django's handler.

Django's documented ``_meta``, ``_state``, ``_default_manager`` and
``_base_manager`` are public. Anything else needs an entry in
scripts/private_allowlist.toml naming the file, the attribute and the
library documentation that makes it public; an entry that matches nothing
fails too, so the list never holds stale excuses.

Usage: ``python scripts/check_private.py [--root DIR] [--allowlist FILE] [PATH ...]``
(paths default to the product packages). Exit status 1 on any hit, each
printed as ``path:line:col: rule: message``.
"""

import argparse
import ast
import importlib
import sys
import tomllib
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRODUCT = (
    "core",
    "audit",
    "insight",
    "accounts",
    "webhooks",
    "live",
    "notices",
    "messagecenter",
    "config",
    "compat/notifications",
)
FIRST_PARTY = {
    "core",
    "audit",
    "insight",
    "accounts",
    "webhooks",
    "live",
    "notices",
    "messagecenter",
    "config",
    "notifications",
    "tests",
    "bench",
    "scripts",
}
SKIPPED_DIRS = {"migrations", "__pycache__"}
ENTRY_POINTS = {"config/asgi.py", "config/wsgi.py"}

# Django documents these underscore names as its public model API.
DJANGO_PUBLIC = {"_meta", "_state", "_default_manager", "_base_manager"}

# Internals reached for before, on any object (the name alone is the tell).
KNOWN = {
    "__self__": "a bound method's owner: a server's private response cycle behind ASGI's send",
    "write_paused": "uvicorn's flow control of a response cycle",
    "chunked_encoding": "uvicorn's response cycle state",
    "_asyncio_future_blocking": "asyncio's future protocol, for driving a coroutine by hand",
    "_parser": "redis-py's connection parser",
    "_sock": "redis-py's connection socket",
    "_handler_class": "Django's test-client hook on a response",
    "unacked_key": "kombu's Redis transport layout",
    "unacked_index_key": "kombu's Redis transport layout",
    "unacked_mutex_key": "kombu's Redis transport layout",
    "restore_by_tag": "kombu's Redis transport QoS",
}
# Internals whose name is common: flagged on objects whose name says what they are.
KNOWN_ON = {
    "transport": ("cycle", "protocol"),
    "flow": ("cycle", "protocol"),
}
# Written, these fake a library's own state (a DRF throttle's request history).
KNOWN_WRITES = {"history": "a DRF throttle's request history, fed by hand"}

# In the entry points: what may wrap Django's handler.
DJANGO_HANDLERS = {"get_asgi_application", "get_wsgi_application", "ASGIHandler", "WSGIHandler"}
HANDLER_WRAPPERS = {"WhiteNoise", "ASGIStaticFilesHandler", "StaticFilesHandler"}
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}
CODE_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
# Python's own special names: overriding these is the language's protocol, not a library's insides.
PYTHON_DUNDERS = set(dir(object)) | set(dir(type)) | {
    "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__next__", "__aiter__",
    "__anext__", "__await__", "__len__", "__contains__", "__getitem__", "__setitem__", "__delitem__",
    "__getattr__", "__bool__", "__get__", "__set__", "__delete__", "__set_name__", "__class_getitem__",
    "__post_init__", "__del__", "__copy__", "__deepcopy__", "__add__", "__or__", "__and__", "__lt__",
    "__le__", "__gt__", "__ge__", "__missing__", "__reversed__", "__index__", "__int__", "__float__",
}  # fmt: skip


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    col: int
    rule: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.rule}: {self.message}"


@dataclass(frozen=True)
class Entry:
    file: str
    attribute: str
    section: str
    url: str = ""


@dataclass
class Allowlist:
    entries: list[Entry] = field(default_factory=list)

    def allows(self, hit: Hit) -> Entry | None:
        for entry in self.entries:
            if entry.file == hit.path and entry.attribute == hit.subject:
                return entry
        return None


def load_allowlist(path: Path) -> tuple[Allowlist, list[str]]:
    """The entries, and what is wrong with the file (an entry without its documentation)."""
    if not path.exists():
        return Allowlist(), []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    entries: list[Entry] = []
    for item in data.get("allowed", []):
        url = str(item.get("url", ""))
        if not item.get("file") or not item.get("attribute") or not url.startswith("https://"):
            problems.append(f"{path}: an [[allowed]] entry needs file, attribute and url (https://...): {item!r}")
            continue
        entries.append(Entry(str(item["file"]), str(item["attribute"]), "allowed", url))
    for item in data.get("temporary", []):
        if not item.get("file") or not item.get("attributes"):
            problems.append(f"{path}: a [[temporary]] entry needs file and attributes: {item!r}")
            continue
        entries += [Entry(str(item["file"]), str(name), "temporary") for name in item["attributes"]]
    return Allowlist(entries), problems


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _last_name(node.func)
    return ""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in DJANGO_PUBLIC


def _private_method(name: str) -> bool:
    """An underscore method name, or a dunder that is a library's own (Django's ``__acall__``)."""
    if name.startswith("__") and name.endswith("__"):
        return name not in PYTHON_DUNDERS
    return _is_private(name)


def _string(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _known_reason(name: str, owner: ast.expr, *, write: bool) -> str | None:
    """Why a listed library internal is named here, or None."""
    if name in KNOWN:
        return f".{name}: {KNOWN[name]}"
    if name in KNOWN_ON and any(word in _last_name(owner).lower() for word in KNOWN_ON[name]):
        return f".{name} of {_last_name(owner)}: a server's private response cycle"
    if write and name in KNOWN_WRITES:
        return f".{name} written: {KNOWN_WRITES[name]}"
    return None


class Checker(ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.hits: list[Hit] = []
        # name -> the module it was imported from ("" for first-party names).
        self.imported: dict[str, str] = {}
        self.constants: dict[str, str] = {}
        self.handlers: set[str] = set()
        self.class_stack: list[list[Any]] = []  # the library bases of the classes being visited
        # Methods of this module's classes (mixins included), with those they inherit from this module.
        self.methods: dict[str, dict[str, ast.AST]] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _string(node.value, {})
                if value is not None:
                    self.constants[node.targets[0].id] = value

    def hit(self, node: ast.AST, rule: str, subject: str, message: str) -> None:
        self.hits.append(
            Hit(self.path, getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + 1, rule, subject, message)
        )

    # --- imports ---------------------------------------------------------------

    def _library(self, module: str) -> bool:
        return module.split(".")[0] not in FIRST_PARTY

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in {"unittest.mock", "mock"} or alias.name.startswith("unittest.mock."):
                self.hit(node, "monkeypatch", alias.name, f"imports {alias.name}: no patching in product code")
            bound = alias.asname or alias.name.split(".")[0]
            self.imported[bound] = (alias.name if alias.asname else bound) if self._library(alias.name) else ""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and (
            module in {"unittest.mock", "mock"} or (module == "unittest" and any(a.name == "mock" for a in node.names))
        ):
            self.hit(node, "monkeypatch", module, f"imports from {module}: no patching in product code")
        for alias in node.names:
            bound = alias.asname or alias.name
            self.imported[bound] = f"{module}.{alias.name}" if node.level == 0 and self._library(module) else ""

    def _library_object(self, node: ast.expr) -> Any | None:
        """The library object a base-class expression names, imported for a look (None if unknown)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or not self.imported.get(node.id):
            return None
        dotted = self.imported[node.id].split(".") + parts
        for split in range(len(dotted), 0, -1):
            try:
                found: Any = importlib.import_module(".".join(dotted[:split]))
            except Exception:  # noqa: S112 (not a module at this depth, or it needs what this run lacks)
                continue
            try:
                for name in dotted[split:]:
                    found = getattr(found, name)
            except Exception:  # not there, or a lazy object that needs settings this run lacks
                return None
            return found
        return None

    # --- classes built on library classes ------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [base for base in (self._library_object(b) for b in node.bases) if isinstance(base, type)]
        if self.path in ENTRY_POINTS and "lifespan" not in node.name.lower():
            self.hit(node, "route", node.name, f"class {node.name} in an entry point: serve Django's handler as it is")
        methods: dict[str, ast.AST] = {}
        for base in node.bases:
            if isinstance(base, ast.Name):
                methods.update(self.methods.get(base.id, {}))
        methods.update(
            (item.name, item) for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
        )
        self.methods[node.name] = methods
        for name, item in methods.items():
            if _private_method(name):
                owner = next((b for b in bases if hasattr(b, name)), None)
                if owner is not None:
                    where = owner.__module__ + "." + owner.__qualname__
                    self.hit(item, "library-private", name, f"{node.name}.{name} overrides the private {where}.{name}")
        self.class_stack.append(bases)
        self.generic_visit(node)
        self.class_stack.pop()

    # --- attributes --------------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node, node.attr, node.value, write=isinstance(node.ctx, ast.Store | ast.Del))
        self.generic_visit(node)

    def _attribute(self, node: ast.AST, name: str, owner: ast.expr, *, write: bool) -> None:
        self._known_or_private(node, name, owner, write=write)
        if write and not (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}):
            root = _root_name(owner)
            if root is not None and self.imported.get(root) and self._is_code(owner):
                self.hit(node, "monkeypatch", name, f".{name} of {self.imported[root]} assigned: patches a library")

    def _known_or_private(self, node: ast.AST, name: str, owner: ast.expr, *, write: bool) -> None:
        """The first rule the attribute breaks: a listed internal, a private write, or a library's own."""
        known = _known_reason(name, owner, write=write)
        if known is not None:
            self.hit(node, "known", name, known)
        elif write and _is_private(name) and not (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}):
            self.hit(node, "private-write", name, f".{name} written on an object that is not self")
        elif isinstance(owner, ast.Name) and owner.id == "self" and _is_private(name) and self.class_stack:
            base = next((b for b in self.class_stack[-1] if hasattr(b, name)), None)
            if base is not None:
                self.hit(node, "library-private", name, f"self.{name} is {base.__module__}.{base.__qualname__}'s own")

    def _is_code(self, node: ast.expr) -> bool:
        """Whether a library expression names code (a module, class or function), not a
        configured instance (``admin.site.site_header`` is a setting of an object)."""
        found = self._library_object(node)
        kind = type(found)  # never isinstance(): a lazy object would set itself up
        return found is None or issubclass(kind, type) or kind in CODE_TYPES

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._route_target(target, node.value)
        self.generic_visit(node)

    def _route_target(self, target: ast.expr, value: ast.expr) -> None:
        if self.path not in ENTRY_POINTS or not isinstance(target, ast.Name) or not isinstance(value, ast.Call):
            return
        callee = _last_name(value.func)
        if callee in DJANGO_HANDLERS or (callee in HANDLER_WRAPPERS and self._wraps_handler(value)):
            self.handlers.add(target.id)

    def _wraps_handler(self, call: ast.Call) -> bool:
        return any(
            (isinstance(a, ast.Name) and a.id in self.handlers)
            or (isinstance(a, ast.Call) and _last_name(a.func) in DJANGO_HANDLERS)
            for a in [*call.args, *(k.value for k in call.keywords)]
        )

    # --- calls -------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        callee = _last_name(node.func)
        if callee in ATTRIBUTE_CALLS and len(node.args) >= 2:
            self._attribute_call(node, callee)
        self._patch_call(node, callee)
        if self.path in ENTRY_POINTS and callee not in HANDLER_WRAPPERS and self._wraps_handler(node):
            self.hit(node, "route", callee, f"{callee}() is handed Django's handler: nothing but WhiteNoise wraps it")
        self.generic_visit(node)

    def _attribute_call(self, node: ast.Call, callee: str) -> None:
        """``getattr(obj, "name")`` and its kin: the attribute rules, spelled as a call."""
        name = _string(node.args[1], self.constants)
        if name is None:
            return
        write = callee in {"setattr", "delattr"}
        self._attribute(node, name, node.args[0], write=write)
        target = node.args[0]
        if not write and _is_private(name) and not (isinstance(target, ast.Name) and target.id in {"self", "cls"}):
            # What SLF001 cannot see: the same read, spelled as a string.
            self.hit(node, "private-read", name, f"{callee}(..., {name!r}) reads another object's private member")

    def _patch_call(self, node: ast.Call, callee: str) -> None:
        root = _root_name(node.func)
        if callee in {"patch", "setattr", "setitem", "delattr"} and isinstance(node.func, ast.Attribute):
            patched = _last_name(node.func.value)
            if callee == "patch" or patched in {"patch", "monkeypatch"} or root == "monkeypatch":
                self.hit(node, "monkeypatch", callee, f"{patched}.{callee}(): no patching in product code")
        elif callee == "patch" and self.imported.get("patch", "").startswith(("unittest.mock", "mock")):
            self.hit(node, "monkeypatch", "patch", "patch(): no patching in product code")

    # --- paths before Django's resolver ---------------------------------------------------

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = _string(node.slice, {})
        self._path_key(node, _last_name(node.value), key)
        self.generic_visit(node)

    def _path_key(self, node: ast.AST, owner: str, key: str | None) -> None:
        if key is None:
            return
        if (owner == "scope" and key in {"path", "raw_path", "root_path"}) or (
            owner == "environ" and key in {"PATH_INFO", "SCRIPT_NAME"}
        ):
            self.hit(node, "route", f'{owner}["{key}"]', f'{owner}["{key}"]: routes by path before Django\'s resolver')

    def visit_Constant(self, node: ast.Constant) -> None:
        if self.path in ENTRY_POINTS and isinstance(node.value, str) and node.value.startswith("/"):
            self.hit(node, "route", node.value, f"path {node.value!r} in an entry point: Django's URLconf routes")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # ``scope.get("path")`` is the same look as ``scope["path"]``.
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get":
                if call.args:
                    self._path_key(call, _last_name(call.func.value), _string(call.args[0], {}))
        self.generic_visit(node)


def check_source(path: str, source: str) -> list[Hit]:
    tree = ast.parse(source, filename=path)
    checker = Checker(path, tree)
    checker.visit(tree)
    return sorted(set(checker.hits), key=lambda h: (h.line, h.col, h.rule))


def product_files(root: Path, paths: Sequence[str]) -> Iterator[Path]:
    for name in paths:
        start = root / name
        files = [start] if start.is_file() else sorted(start.rglob("*.py"))
        for path in files:
            if not SKIPPED_DIRS.intersection(path.relative_to(root).parts):
                yield path


def run(root: Path, allowlist_path: Path, paths: Sequence[str]) -> tuple[list[str], list[Hit]]:
    """The failures (hits not allowed, entries that match nothing, a malformed
    list) and the hits the temporary section let through."""
    allowlist, failures = load_allowlist(allowlist_path)
    used: set[Entry] = set()
    waived: list[Hit] = []
    for path in product_files(root, paths):
        relative = path.relative_to(root).as_posix()
        for hit in check_source(relative, path.read_text(encoding="utf-8")):
            entry = allowlist.allows(hit)
            if entry is None:
                failures.append(str(hit))
                continue
            used.add(entry)
            if entry.section == "temporary":
                waived.append(hit)
    checked = {p.relative_to(root).as_posix() for p in product_files(root, paths)}
    failures += [
        f"{allowlist_path}: [[{e.section}]] {e.file} {e.attribute}: matches nothing (delete it)"
        for e in allowlist.entries
        # A temporary entry of a file another branch deletes outlives it quietly.
        if e not in used and (e.section == "allowed" or e.file in checked)
    ]
    return failures, waived


def _django_for_lookups() -> None:
    """Django set up with its contrib apps only (not the project's settings: no
    connection, no embedded server), so that classes such as the auth
    middleware can be imported and looked at."""
    try:
        import django
        from django.conf import settings
    except ImportError:
        return
    if not settings.configured:
        contrib = ["auth", "contenttypes", "sessions", "messages", "admin", "staticfiles"]
        settings.configure(INSTALLED_APPS=[f"django.contrib.{app}" for app in contrib])
        django.setup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--allowlist", type=Path, default=None)
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    _django_for_lookups()
    allowlist = args.allowlist or root / "scripts" / "private_allowlist.toml"
    failures, waived = run(root, allowlist, args.paths or PRODUCT)
    if waived:
        by_file: dict[str, int] = {}
        for hit in waived:
            by_file[hit.path] = by_file.get(hit.path, 0) + 1
        listed = ", ".join(f"{path} {count}" for path, count in sorted(by_file.items()))
        print(f"check_private: {len(waived)} hit(s) waived by the temporary section: {listed}")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
