"""The calculator's runtime hook (``hooks/runtime.py``): pinned download, verification, cache, air-gapped
builds, the estimator wheel and the offline payloads. No test touches the network: downloads go through a
fake ``urlopen`` serving a tarball made here, whose sha512 is computed here as npm computes
``dist.integrity``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import io
import json
import re
import struct
import subprocess
import sys
import tarfile
import urllib.error
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_hook():
    spec = importlib.util.spec_from_file_location("mme_runtime_hook", ROOT / "hooks" / "runtime.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


rt = _load_hook()

FILES = {"runtime.js": b"export const x = 1;\n", "data/blob.bin": bytes(range(256)) * 4}


def _tarball(files: dict) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("package/" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


TGZ = _tarball(FILES)
PIN = rt.NpmPin("fake-pkg", "1.2.3", _integrity(TGZ), {n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()})


class FakeNpm:
    """Stands in for urllib's urlopen: serves one tarball and counts the calls."""

    def __init__(self, body: bytes = TGZ, fail: bool = False):
        self.body, self.fail, self.calls = body, fail, []

    def __call__(self, url, timeout=None):
        self.calls.append(url)
        if self.fail:
            raise urllib.error.URLError("no route to host")
        return io.BytesIO(self.body)


def test_pin_matches_npm_conventions():
    assert PIN.url == "https://registry.npmjs.org/fake-pkg/-/fake-pkg-1.2.3.tgz"
    assert PIN.env == "MME_FAKE_PKG"
    assert rt.PYODIDE.url == "https://registry.npmjs.org/pyodide/-/pyodide-314.0.7.tgz"
    assert rt.PYODIDE.integrity.startswith("sha512-") and len(base64.b64decode(rt.PYODIDE.integrity[7:])) == 64
    assert set(rt.PYODIDE.files) >= {"pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"}


def test_integrity_failure_is_a_clear_error():
    rt.check_integrity(b"abc", _integrity(b"abc"), "x")
    with pytest.raises(rt.RuntimeBuildError) as exc:
        rt.check_integrity(b"abc", _integrity(b"abd"), "download of x")
    msg = str(exc.value)
    assert "download of x failed its integrity check" in msg and _integrity(b"abd") in msg and _integrity(b"abc") in msg
    with pytest.raises(rt.RuntimeBuildError, match="unsupported integrity"):
        rt.check_integrity(b"abc", "md5-xyz", "x")


def test_download_verifies_then_caches(tmp_path):
    npm = FakeNpm()
    files = rt.fetch_package(PIN, tmp_path, env={}, urlopen=npm)
    assert files == FILES and npm.calls == [PIN.url]
    cached = tmp_path / "npm" / "fake-pkg-1.2.3.tgz"
    assert cached.read_bytes() == TGZ
    # Second build: the cache is used and re-verified, nothing is downloaded.
    again = rt.fetch_package(PIN, tmp_path, env={}, urlopen=FakeNpm(fail=True))
    assert again == FILES


def test_tampered_download_is_refused_and_not_cached(tmp_path):
    tampered = _tarball({**FILES, "runtime.js": b"steal();\n"})
    with pytest.raises(rt.RuntimeBuildError, match="integrity check"):
        rt.fetch_package(PIN, tmp_path, env={}, urlopen=FakeNpm(tampered))
    assert not (tmp_path / "npm" / "fake-pkg-1.2.3.tgz").exists()


def test_corrupt_cache_is_downloaded_again(tmp_path):
    cached = tmp_path / "npm" / "fake-pkg-1.2.3.tgz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(TGZ[:-10])
    npm = FakeNpm()
    assert rt.fetch_package(PIN, tmp_path, env={}, urlopen=npm) == FILES
    assert npm.calls == [PIN.url] and cached.read_bytes() == TGZ


def test_failed_download_names_the_air_gapped_variables(tmp_path):
    with pytest.raises(rt.RuntimeBuildError) as exc:
        rt.fetch_package(PIN, tmp_path, env={}, urlopen=FakeNpm(fail=True))
    assert "MME_FAKE_PKG_TARBALL" in str(exc.value) and "MME_FAKE_PKG_DIR" in str(exc.value)


def test_air_gapped_tarball(tmp_path):
    local = tmp_path / "fake-pkg-1.2.3.tgz"
    local.write_bytes(TGZ)
    env = {"MME_FAKE_PKG_TARBALL": str(local)}
    assert rt.fetch_package(PIN, tmp_path / "cache", env=env, urlopen=FakeNpm(fail=True)) == FILES
    local.write_bytes(_tarball({**FILES, "runtime.js": b"other"}))
    with pytest.raises(rt.RuntimeBuildError, match="MME_FAKE_PKG_TARBALL=.*integrity"):
        rt.fetch_package(PIN, tmp_path / "cache", env=env, urlopen=FakeNpm(fail=True))


def test_air_gapped_directory_checks_every_file(tmp_path):
    for name, data in FILES.items():
        (tmp_path / "package" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "package" / name).write_bytes(data)
    env = {"MME_FAKE_PKG_DIR": str(tmp_path)}
    assert rt.fetch_package(PIN, tmp_path / "cache", env=env, urlopen=FakeNpm(fail=True)) == FILES
    (tmp_path / "package" / "runtime.js").write_bytes(b"changed")
    with pytest.raises(rt.RuntimeBuildError, match="runtime.js of fake-pkg 1.2.3 has sha256"):
        rt.fetch_package(PIN, tmp_path / "cache", env=env)
    (tmp_path / "package" / "runtime.js").unlink()
    with pytest.raises(rt.RuntimeBuildError, match="runtime.js not found"):
        rt.fetch_package(PIN, tmp_path / "cache", env=env)


def test_wheel_is_a_reproducible_installable_wheel(tmp_path):
    name, data = rt.build_wheel(ROOT)
    assert name == "megatron_memory_estimator-0.1.0-py3-none-any.whl"
    assert rt.build_wheel(ROOT)[1] == data                          # byte for byte
    zf = zipfile.ZipFile(io.BytesIO(data))
    names = set(zf.namelist())
    info = "megatron_memory_estimator-0.1.0.dist-info"
    assert {"estimator/__init__.py", "estimator/web/protocol.py", "estimator/_presets/__init__.py",
            "estimator/_presets/tiny.yaml", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert "Tag: py3-none-any" in zf.read(f"{info}/WHEEL").decode()
    # RECORD lists every other file with its urlsafe-base64 sha256 and size (the wheel spec's format).
    for line in zf.read(f"{info}/RECORD").decode().splitlines():
        path, digest, size = line.split(",")
        if path.endswith("RECORD"):
            continue
        blob = zf.read(path)
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
        assert int(size) == len(blob)
    # Installed the way the browser installs it (unpacked), it runs and finds its presets.
    zf.extractall(tmp_path / "site")
    code = ("import estimator, estimator.web as w; from estimator.formats.presets import list_presets; "
            "print(estimator.__file__); print('tiny' in list_presets()); print(w.compute({'preset': 'tiny'})"
            "['estimate']['parameters']['total'])")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r}); "
                          + code], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    assert out[0].startswith(str(tmp_path / "site")) and out[1] == "True"
    assert int(out[2]) == 3_213_568                                   # tiny preset, counted by hand in its header


def test_offline_payloads_round_trip():
    files = {"pyodide.asm.wasm": b"\0asm" + bytes(1000), "snapshot.bin.gz": gzip.compress(b"memory", mtime=0)}
    out = rt.offline_payloads(files)
    assert set(out) == {"offline/pyodide.asm.wasm.js", "offline/snapshot.bin.gz.js"}
    for name, data in files.items():
        m = re.fullmatch(r'\(self\.MME_PAYLOAD=self\.MME_PAYLOAD\|\|\{\}\)\["(.+)"\]="([A-Za-z0-9+/=]+)";\n',
                         out[f"offline/{name}.js"].decode())
        assert m and m.group(1) == name
        packed = base64.b64decode(m.group(2))
        assert packed[:2] == b"\x1f\x8b"                             # gzip, inflated in the worker
        assert gzip.decompress(packed) == (gzip.decompress(data) if name.endswith(".gz") else data)


def test_snapshot_can_be_turned_off(tmp_path):
    assert rt.make_snapshot({}, b"", "{}", tmp_path, env={"MME_PYODIDE_SNAPSHOT": "0"}) is None
    assert not (tmp_path / "snapshots").exists()


def test_unknown_marker_fails_the_build():
    class Page:
        class file:
            src_uri = "calculator.md"
    with pytest.raises(rt.PluginError, match="unknown marker calculator:typo"):
        rt.on_page_content("<!-- calculator:typo -->", Page, None, None)
    assert rt.on_page_content("<p>no marker</p>", Page, None, None) == "<p>no marker</p>"


def test_boot_data_comes_from_the_schema():
    from estimator import web
    from estimator.config.schema import field_specs
    boot = web.boot_data()
    assert [f["path"] for sec in boot["schema"] for f in sec["fields"]] == [s.path for s in field_specs()]
    assert json.loads(json.dumps(boot)) == boot


def test_manifest_gives_the_snapshot_memory_size(monkeypatch, tmp_path):
    """The manifest says how much memory the snapshot restores: the size in its header. Hand check: 3 MiB of a
    repeating pattern is said to be 3,145,728 bytes."""
    memory = bytes(range(256)) * (3 * 4096)                         # 3 MiB
    lock = json.dumps({"info": {"python": "3.14.2"}})
    packed = gzip.compress(rt.sparse_snapshot(memory), mtime=0)
    monkeypatch.setattr(rt, "fetch_package", lambda pin, cache, env=None: {"pyodide.mjs": b"x",
                                                                           "pyodide-lock.json": lock.encode()})
    monkeypatch.setattr(rt, "make_snapshot", lambda *a, **k: packed)
    runtime = rt.build_runtime(tmp_path)
    assert runtime.manifest["snapshot_bytes"] == 3_145_728
    assert runtime.manifest["sizes"]["snapshot.bin.gz"] == len(packed)
    monkeypatch.setattr(rt, "make_snapshot", lambda *a, **k: gzip.compress(memory, mtime=0))
    with pytest.raises(rt.RuntimeBuildError, match="not a MMS1 file"):
        rt.build_runtime(tmp_path)
    monkeypatch.setattr(rt, "make_snapshot", lambda *a, **k: None)
    assert rt.build_runtime(tmp_path).manifest["snapshot_bytes"] is None


def test_sparse_snapshot_keeps_only_the_pages_that_are_not_zero():
    """Four 4 KiB pages and a fifth cut short to 100 bytes, 16,484 bytes: page 0 zero, pages 1 and 2 hold data
    (one byte each, at 4,096 + 5 and 8,192 + 4,095), page 3 zero, page 4 one byte at its end. Runs: (4,096,
    8,192) and (16,384, 100). The file: "MMS1", 16,484 (the memory's size), 2, the four run fields, then
    8,192 + 100 bytes of data: 12 + 16 + 8,292 = 8,320 bytes. Reading it back puts every byte where it was."""
    memory = bytearray(4 * 4096 + 100)
    memory[4096 + 5] = 7
    memory[8192 + 4095] = 9
    memory[-1] = 1
    out = rt.sparse_snapshot(bytes(memory))
    assert len(out) == 8_320
    magic, size, n, *runs = struct.unpack("<4sII4I", out[:28])
    assert (magic, size, n, runs) == (b"MMS1", 16_484, 2, [4096, 8192, 16_384, 100])
    back = bytearray(size)
    data = out[28:]
    back[4096:4096 + 8192] = data[:8192]
    back[16_384:] = data[8192:]
    assert back == memory
    assert rt.snapshot_size(gzip.compress(out)) == 16_484
    assert rt.sparse_snapshot(bytes(8192)) == struct.pack("<4sII", b"MMS1", 8192, 0)


def test_snapshot_cache_keeps_the_most_recently_used(tmp_path):
    """One snapshot is made per change of the estimator (~7 MB each): the cache keeps the newest few. Six files
    used at times 1..6 and a keep of 4 leave those used at 3, 4, 5 and 6."""
    import os
    for i in range(1, 7):
        f = tmp_path / f"s{i}.bin.gz"
        f.write_bytes(b"x")
        os.utime(f, (i, i))
    (tmp_path / "other.txt").write_text("not a snapshot")
    rt.prune_snapshots(tmp_path, keep=4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt", "s3.bin.gz", "s4.bin.gz", "s5.bin.gz",
                                                           "s6.bin.gz"]


def test_short_link_files_are_json_served_and_scripts_offline():
    """Each catalog id's first numbers (issue 29): ``org--name.json`` on a served site, ``org--name.js`` in the
    offline bundle, a classic script that hands the same data to the page (file:// refuses fetch())."""
    done = {"Qwen/Qwen3-8B": {"view": {"headline": "a"}}, "org/x_1.5-B": {"view": {"headline": "b"}}}
    served = rt.hf_files(done, offline=False)
    assert sorted(served) == ["Qwen--Qwen3-8B.json", "org--x_1.5-B.json"]
    assert json.loads(served["Qwen--Qwen3-8B.json"]) == done["Qwen/Qwen3-8B"]
    offline = rt.hf_files(done, offline=True)
    text = offline["org--x_1.5-B.js"].decode()
    prefix = '(self.MME_HF=self.MME_HF||{})["org/x_1.5-B"]='
    assert text.startswith(prefix) and json.loads(text[len(prefix):].rstrip().rstrip(";")) == done["org/x_1.5-B"]
    for bad in ("no-slash", "a/b/c", "a/b c", "../x/y", "a/<b>"):
        with pytest.raises(rt.RuntimeBuildError, match="not of the form org/name"):
            rt.hf_file(bad)


def test_short_link_results_are_cached_by_the_wheel(monkeypatch, tmp_path):
    """Computed once per estimator (the wheel's bytes): the offline bundle's build and serve's rebuilds reuse them;
    another wheel computes them again. The cache keeps the newest few."""
    import estimator.web.protocol as protocol
    calls = []
    monkeypatch.setattr(protocol, "catalog_precomputed",
                        lambda: calls.append(1) or ({"a/b": {"view": {"n": len(calls)}}}, {"c/d": "why"}))
    assert rt.catalog_results(b"wheel-1", tmp_path) == ({"a/b": {"view": {"n": 1}}}, {"c/d": "why"})
    assert rt.catalog_results(b"wheel-1", tmp_path) == ({"a/b": {"view": {"n": 1}}}, {"c/d": "why"})
    assert len(calls) == 1
    assert rt.catalog_results(b"wheel-2", tmp_path)[0] == {"a/b": {"view": {"n": 2}}}
    for i in range(3, 8):
        rt.catalog_results(f"wheel-{i}".encode(), tmp_path)
    assert len(list((tmp_path / "hf-precomputed").glob("*.json.gz"))) == rt.HF_CACHE_KEEP
