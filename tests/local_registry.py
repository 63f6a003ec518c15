"""A real OCI registry on 127.0.0.1 for tests: Debian's `docker-registry` (the distribution
registry), started on a free port with its own config and storage folder, stopped after."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

needs_registry = pytest.mark.skipif(shutil.which("docker-registry") is None or shutil.which("skopeo") is None,
                                    reason="docker-registry (Debian package) or skopeo is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_registry(root: Path):
    """Yields the registry's host:port (loopback only)."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {root / 'data'}}}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    log = open(root / "registry.log", "wb")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"docker-registry did not start: {(root / 'registry.log').read_text()[-500:]}")
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def push(oci_ref: str, dest: str) -> str:
    """Push an image (skopeo source reference) to `dest` (host:port/name:tag) without TLS, as the
    loopback registry serves; returns the manifest digest the registry holds."""
    policy = Path(dest.replace("/", "_").replace(":", "_") + ".policy.json")
    policy = Path("/tmp") / f"tf-test-{policy.name}"
    policy.write_text('{"default":[{"type":"insecureAcceptAnything"}]}')
    subprocess.run(["skopeo", f"--policy={policy}", "copy", "--quiet", "--dest-tls-verify=false", oci_ref,
                    f"docker://{dest}"], check=True, capture_output=True, timeout=300)
    out = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{dest}"],
                         check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def forget_images_from(registry: str) -> None:
    """Remove what builds from a test registry left in the shared image cache (bases unpacked
    from its images, Dockerfile builds on them): its port is new each run, so nothing is reused."""
    import json

    from termforge.images import image_cache_dir

    cache = image_cache_dir()
    prefix = "store-" + registry.replace(".", "-").replace(":", "-") + "-"
    for built in (cache / "dockerfile").glob("*/build.json"):
        try:
            base = json.loads(built.read_text())["base"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if base.startswith(prefix):
            shutil.rmtree(built.parent, ignore_errors=True)
    for base in (cache / "bases").glob(prefix + "*"):
        shutil.rmtree(base, ignore_errors=True)
