"""Two builds of one commit must be byte-identical: here, in UTC, and a copy elsewhere, in Tokyo, from a cold cache.

Usage: ``python scripts/check_reproducible.py [--keep DIR]``. Builds the site (``mkdocs build --strict``) twice:

- A: this checkout, ``TZ=UTC``, ``LANG=C.UTF-8``, with a fresh build cache (the pinned npm tarball copied in when this
  checkout has it, so no download is needed; without it the build fetches it from the npm registry, as CI does);
- B: a fresh ``git clone`` of the commit at another path, ``TZ=Asia/Tokyo``, ``LANG=ja_JP.UTF-8``, with another
  fresh cache, so that its Pyodide memory snapshot is made anew too. In a checkout with uncommitted changes (a
  developer's) B is a copy of its files instead (what ``git ls-files`` lists), and both builds get the date of A
  (``SOURCE_DATE_EPOCH``, which ``hooks/build_date.py`` otherwise takes from the last commit: a copy has none).

Then compares the two ``site/`` trees file by file, the offline zip included, and prints the first differences.
Exits 0 when they are identical, 1 otherwise. The suite does the same with one build less
(``tests/site/test_site.py``, ``test_two_builds_are_identical``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _files(root: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True,
                             check=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):       # not a git checkout: everything but the usual litter
        skip = {".git", ".venv", ".cache", "site", "__pycache__", "node_modules"}
        return [str(p.relative_to(root)) for p in root.rglob("*")
                if p.is_file() and not skip.intersection(p.relative_to(root).parts)]


def copy_tree(src: Path, dest: Path) -> None:
    for rel in _files(src):
        p = src / rel
        if p.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest / rel)


def fresh_cache(dest: Path) -> Path:
    """An empty build cache, with the pinned npm tarball of this checkout's cache when it has one."""
    dest.mkdir(parents=True)
    npm = Path(os.environ.get("MME_CACHE_DIR") or ROOT / ".cache") / "npm"
    if npm.is_dir():
        shutil.copytree(npm, dest / "npm")
    return dest


def clean(root: Path) -> bool:
    """A git checkout without uncommitted changes (untracked files that are not ignored count as changes)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return out.stdout.strip() == ""


def build(src: Path, site: Path, cache: Path, tz: str, lang: str, date: str | None = None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "SOURCE_DATE_EPOCH"}
    env.update({"TZ": tz, "LANG": lang, "MME_CACHE_DIR": str(cache), "NO_MKDOCS_2_WARNING": "1"})
    if date is not None:
        env["SOURCE_DATE_EPOCH"] = date
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=src,
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"build in {src} ({tz}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def differences(a: Path, b: Path) -> list[str]:
    """Files present in one tree only, or with different bytes (relative paths), sorted."""
    def listing(root: Path) -> dict:
        return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}
    fa, fb = listing(a), listing(b)
    out = [f"only in A: {f}" for f in sorted(set(fa) - set(fb))] + [f"only in B: {f}" for f in sorted(set(fb) - set(fa))]
    for f in sorted(set(fa) & set(fb)):
        if fa[f].stat().st_size != fb[f].stat().st_size or \
                hashlib.sha256(fa[f].read_bytes()).digest() != hashlib.sha256(fb[f].read_bytes()).digest():
            out.append(f"differs: {f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="build into this directory and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mme-repro-") as tmp_name:
        work = args.keep or Path(tmp_name)
        work.mkdir(parents=True, exist_ok=True)
        copy = work / "elsewhere" / "checkout"
        pinned = None
        if clean(ROOT):
            subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(copy)], check=True)
        else:
            copy_tree(ROOT, copy)
            sys.path.insert(0, str(ROOT / "hooks"))
            from build_date import source_date_epoch
            pinned = str(source_date_epoch(ROOT))
            print(f"uncommitted changes: B is a copy of the files, both builds dated SOURCE_DATE_EPOCH={pinned}")
        ta = build(ROOT, work / "site-a", fresh_cache(work / "cache-a"), "UTC", "C.UTF-8", pinned)
        tb = build(copy, work / "site-b", fresh_cache(work / "cache-b"), "Asia/Tokyo", "ja_JP.UTF-8", pinned)
        diff = differences(work / "site-a", work / "site-b")
        files = sum(1 for p in (work / "site-a").rglob("*") if p.is_file())
        print(f"build A (here, UTC): {ta:.1f} s; build B ({'a copy' if pinned else 'a fresh clone'} elsewhere, "
              f"Asia/Tokyo, cold cache): {tb:.1f} s; "
              f"{files} files compared: " + ("identical" if not diff else f"{len(diff)} differ"))
        for line in diff[:20]:
            print("  " + line)
        return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
