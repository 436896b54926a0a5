"""``make compat-check``: django-notifications-hq 1.8.3's own test suite,
unmodified, against this project's ``notifications`` app (compat/notifications).

1. Download the release's sdist with pip (or take ``--sdist``) and check its
   sha256 against the pinned one: a different file is refused.
2. Take only ``notifications/tests/`` out of it, into a temporary directory
   that also gets a copy of compat/notifications: the suite imports itself as
   ``notifications.tests``, so it must sit inside the package it tests. The
   copy, first on PYTHONPATH, is what runs (settings only append compat/);
   nothing lands in the work tree, and the directory is removed afterwards.
3. Run the suite's ``tests.py`` (its 29 tests; ``sample_notifications`` tests a
   swapped-in model, which this app does not offer) with pytest, once on
   PostgreSQL and Redis and once on the embedded defaults (SQLite, fakeredis),
   under tests/compat/incumbent_settings.py: the project's test settings plus
   the suite's own, and the one shim the suite needs (``timezone.utc``).

Prints pytest's summary line of each pass; exits 1 unless each shows 29
passed and nothing failed, errored or skipped (warnings are the suite's own:
it imports distutils).
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "compat" / "notifications"
RELEASE = "django-notifications-hq==1.8.3"
SDIST_NAME = "django-notifications-hq-1.8.3.tar.gz"
SDIST_SHA256 = "0f4b216bb382b7c7c4eef273eb211e59c1c6a0ea38cba6077415ac031d330725"
TESTS_IN_SDIST = "django-notifications-hq-1.8.3/notifications/tests/"
EXPECTED_PASSED = 29
PASSES = {
    "postgres": {
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messagecenter"),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
    },
    "embedded": {},
}
PYTEST_INI = """[pytest]
python_files = tests.py
addopts = -p tests.compat.incumbent_plugin
"""
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error|errors|skipped|deselected|xfailed|xpassed)\b.*?)\s*=*$")


def sdist_fetch(into: Path, given: Path | None) -> Path:
    """The sdist, downloaded by pip unless ``given``; refused unless its sha256 is the pinned one."""
    if given is None:
        subprocess.run(  # noqa: S603  (this interpreter's pip, our own arguments)
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", RELEASE,
             "--dest", str(into)],
            check=True,
        )  # fmt: skip
        given = into / SDIST_NAME
    digest = hashlib.sha256(given.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{given}: sha256 {digest}, expected {SDIST_SHA256}; refusing to run it.")
    return given


def tests_extract(sdist: Path, package: Path) -> None:
    """Only the suite (``notifications/tests/``) goes into ``package/tests``."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(TESTS_IN_SDIST) and (m.isfile() or m.isdir())]
        if not any(m.name.endswith("/tests.py") for m in members):
            raise SystemExit(f"{sdist}: no {TESTS_IN_SDIST}tests.py in it.")
        for member in members:
            member.name = member.name[len(TESTS_IN_SDIST) :]
            if member.name:
                archive.extract(member, package / "tests", filter="data")


def tree_build(work: Path, sdist: Path) -> Path:
    """``work/src/notifications``: our package, with the suite as its ``tests``."""
    package = work / "src" / "notifications"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests"))
    tests_extract(sdist, package)
    (work / "pytest.ini").write_text(PYTEST_INI)
    return package


def suite_run(work: Path, package: Path, name: str, variables: dict[str, str]) -> tuple[bool, str]:
    """One pass; returns (it showed exactly 29 passed, pytest's summary line)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env.update(variables)
    env["PYTHONPATH"] = os.pathsep.join([str(work / "src"), str(ROOT)])
    env["DJANGO_SETTINGS_MODULE"] = "tests.compat.incumbent_settings"
    command = [
        sys.executable, "-m", "pytest", "-c", str(work / "pytest.ini"), "--rootdir", str(work),
        "--ds", "tests.compat.incumbent_settings", str(package / "tests" / "tests.py"),
    ]  # fmt: skip
    print(f"== django-notifications-hq 1.8.3's tests on {name}", flush=True)
    # This interpreter's pytest on the files just checked and extracted.
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    lines = result.stdout.splitlines()
    summary = next((m.group(1) for line in reversed(lines) if (m := SUMMARY.match(line.strip()))), "")
    if result.returncode != 0 or not summary:
        print(result.stdout[-20000:], result.stderr[-5000:], sep="\n")
    print(summary or "(no summary line)", flush=True)
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summary)}
    bad = {word: n for word, n in counts.items() if word not in ("passed", "warning", "warnings")}
    return result.returncode == 0 and counts.get("passed") == EXPECTED_PASSED and not bad, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="a local copy of the sdist (its sha256 is checked all the same)")
    parser.add_argument("--only", choices=sorted(PASSES), help="run one pass")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compat-check-"))
    try:
        sdist = sdist_fetch(work, args.sdist)
        print(f"{SDIST_NAME}: sha256 {SDIST_SHA256} (as pinned)")
        package = tree_build(work, sdist)
        outcomes = [
            suite_run(work, package, name, variables)[0]
            for name, variables in PASSES.items()
            if args.only in (None, name)
        ]
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
