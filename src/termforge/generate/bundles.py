"""Fixture kinds as strategies: a task's inputs packed into a container of that kind.

Any family's task can take any container fixture kind. At build time the family's own setup
runs, then everything it left under /app is packed into a gzip-compressed tar archive (the
*bundle*) and /app is emptied; the bundle is then encoded into the container: a PNG's pixels, a
WAV's tones, a Y4M video's frames, the tail of a stripped executable, a vendored package's file
format, or a set of HTTP services described by a compose file. The agent sees only the container
and must decode it to get the task's inputs back; the oracle decodes it with `DECODER` first.

Each container is one small class: how it is described to the agent (per difficulty level), its
encoder and decoder (stdlib-only Python source: setup encodes and the oracle decodes inside the
sandbox; the final tests' fresh containers are made by the same encoder when the task is
generated, `encoded`, and carried in the test, since every grade would make the same bytes again),
and the parameters a draw fixes.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import random
import tempfile
import textwrap
from typing import ClassVar

INBOX = "/app/inbox"

# Run inside the sandbox by setup.sh after the family's own setup: /app -> bundle bytes, /app emptied.
PACK_SOURCE = '''
import gzip, io, os, shutil, tarfile

def pack_app(root="/app"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                info = tar.gettarinfo(full, arcname=os.path.relpath(full, root))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if info.isreg():
                    with open(full, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    for name in os.listdir(root):
        path = os.path.join(root, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    return gzip.compress(buf.getvalue(), mtime=0)
'''

# Run by the oracle: bundle bytes -> the files under /app (our own archive, so plain extraction).
UNPACK_SOURCE = '''
import io, tarfile

def unpack_app(payload, root="/app"):
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        tar.extractall(root)
'''


class Container:
    """One fixture kind: the bundle inside a container the agent must decode."""

    kind: ClassVar[str]
    path: ClassVar[str]
    """Where the container lives in the sandbox (a file, or a directory for services)."""
    encoder: ClassVar[str]
    """Python source defining encode(payload: bytes, path: str, params: dict) -> None."""
    decoder: ClassVar[str]
    """Python source defining decode(path: str) -> bytes (the reference the oracle and tests use)."""
    made_ahead: ClassVar[bool] = True
    """Whether the final tests' fresh containers can be made when the task is generated (a single
    file that depends on nothing but its payload and parameters)."""

    def params(self, rng: random.Random, level: int) -> dict:
        return {}

    def describe(self, params: dict, level: int) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def fuzz_params(self, params: dict, rng: random.Random, hard: bool) -> dict:
        """Parameters for a fresh container in the final tests, merged over the task's own (hard: the
        harshest settings the format allows)."""
        return {}


class PngBundle(Container):
    kind = "image"
    path = f"{INBOX}/bundle.png"
    encoder = '''
import struct, zlib

def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)

def encode(payload, path, params):
    width = params["width"]
    data = struct.pack(">I", len(payload)) + payload
    height = max(1, -(-len(data) // width))
    data += bytes(width * height - len(data))
    raw, prev = bytearray(), bytes(width)
    for y in range(height):
        row = data[y * width:(y + 1) * width]
        ft = params["filters"][y % len(params["filters"])]
        out = bytearray(width)
        for x in range(width):
            a = row[x - 1] if x else 0
            b = prev[x]
            c = prev[x - 1] if x else 0
            pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[ft]
            out[x] = (row[x] - pred) % 256
        raw += bytes([ft]) + out
        prev = row

    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))
    with open(path, "wb") as fh:
        fh.write(png)
'''
    decoder = '''
import struct, zlib

def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)

def decode(path):
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:8] != b"\\x89PNG\\r\\n\\x1a\\n":
        raise ValueError("not a PNG")
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        n, tag = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if tag == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif tag == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    pixels, prev = bytearray(), bytearray(width)
    for y in range(height):
        line = raw[y * (width + 1):(y + 1) * (width + 1)]
        ft, row = line[0], bytearray(line[1:])
        for x in range(width):
            a = row[x - 1] if x else 0
            b = prev[x]
            c = prev[x - 1] if x else 0
            pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[ft]
            row[x] = (row[x] + pred) % 256
        pixels += row
        prev = row
    n = struct.unpack(">I", pixels[:4])[0]
    return bytes(pixels[4:4 + n])
'''

    def params(self, rng, level):
        filters = [0] if level == 0 else ([0, 1, 2] if level == 1 else [0, 1, 2, 3, 4])
        return {"width": rng.choice((64, 128, 256)), "filters": rng.sample(filters, len(filters))}

    def describe(self, params, level):
        return (f"`{self.path}` is an 8-bit grayscale PNG (a standard PNG: its rows may use any of the "
                "five PNG filter types). Read its pixels row by row, left to right: the first four bytes "
                "are the bundle's length (big-endian), the next that many bytes are the bundle, and any "
                "remaining pixels are padding.")

    def fuzz_params(self, params, rng, hard):
        return {"width": rng.choice((64, 128, 256)), "filters": [0, 1, 2, 3, 4] if hard else params["filters"]}


class WavBundle(Container):
    kind = "audio"
    path = f"{INBOX}/bundle.wav"
    encoder = '''
import math, random, struct, wave

def encode(payload, path, params):
    n, amp, noise = 16, 100, params["noise"]
    rng = random.Random(params["seed"])
    data = struct.pack(">I", len(payload)) + payload
    samples = bytearray([128] * params["lead"])
    for byte in data:
        for shift in (6, 4, 2, 0):
            sym = (byte >> shift) & 3
            for i in range(n):
                v = 128 + round(amp * math.cos(2 * math.pi * (sym + 1) * i / n))
                if noise:
                    v += rng.randint(-noise, noise)
                samples.append(min(255, max(0, v)))
    samples += bytes([128] * params["tail"])
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes(samples))
'''
    decoder = '''
import math, struct, wave
from operator import mul

def decode(path):
    with wave.open(path, "rb") as w:
        s = w.readframes(w.getnframes())
    n = 16
    start = next(i for i, v in enumerate(s) if abs(v - 128) > 50)
    refs = [([math.cos(2 * math.pi * k * i / n) for i in range(n)], [math.sin(2 * math.pi * k * i / n) for i in range(n)])
            for k in (1, 2, 3, 4)]

    def symbol(at):
        x = [v - 128 for v in s[at:at + n]]
        if len(x) < n:
            raise IndexError("the recording ends inside a symbol")
        best, best_power = 0, -1.0
        for k, (cos, sin) in enumerate(refs):
            re = sum(map(mul, x, cos))
            im = sum(map(mul, x, sin))
            if re * re + im * im > best_power:
                best, best_power = k, re * re + im * im
        return best

    def read_bytes(offset, count):
        out = bytearray()
        for b in range(count):
            value = 0
            for q in range(4):
                value = value * 4 + symbol(start + ((offset + b) * 4 + q) * n)
            out.append(value)
        return bytes(out)

    length = struct.unpack(">I", read_bytes(0, 4))[0]
    return read_bytes(4, length)
'''

    def params(self, rng, level):
        return {"lead": rng.randint(0, 40) * (level > 0) + (rng.randint(1, 15) if level > 1 else 0),
                "tail": rng.randint(0, 64), "noise": (0, 0, 6, 12)[level], "seed": rng.randrange(2**31)}

    def describe(self, params, level):
        return (f"`{self.path}` is a modem recording: 8 kHz, mono, 8-bit unsigned PCM. It is silent "
                "(samples of 128) until the first sample that differs from 128 by more than 50; from there, "
                "every 16 samples carry one 2-bit symbol s (0..3) as a tone of (s + 1) x 500 Hz, "
                "starting at the peak of a cosine" + (", with some noise added" if params["noise"] else "")
                + ". Four symbols make a byte, most significant bits first. The first four bytes are the "
                "bundle's length (big-endian), then come the bundle's bytes; silence may follow.")

    def fuzz_params(self, params, rng, hard):
        return {"lead": rng.randint(0, 50), "tail": rng.randint(0, 40), "noise": 12 if hard else params["noise"],
                "seed": rng.randrange(2**31)}


class Y4mBundle(Container):
    kind = "video"
    path = f"{INBOX}/bundle.y4m"
    encoder = '''
import random, struct

def encode(payload, path, params):
    w, h = params["width"], params["height"]
    size = w * h - 8
    chunks = [payload[i:i + size] for i in range(0, len(payload), size)] or [b""]
    frames = [struct.pack(">II", k, len(c)) + c + bytes(size - len(c)) for k, c in enumerate(chunks)]
    rng = random.Random(params["seed"])
    for _ in range(params["duplicates"]):
        frames.append(rng.choice(frames))
    if params["shuffle"]:
        rng.shuffle(frames)
    with open(path, "wb") as fh:
        fh.write(f"YUV4MPEG2 W{w} H{h} F25:1 Ip A1:1 Cmono\\n".encode())
        for f in frames:
            fh.write(b"FRAME\\n" + f)
'''
    decoder = '''
import struct

def decode(path):
    with open(path, "rb") as fh:
        data = fh.read()
    end = data.index(b"\\n")
    fields = data[:end].split()
    w = int(next(f[1:] for f in fields if f.startswith(b"W")))
    h = int(next(f[1:] for f in fields if f.startswith(b"H")))
    pos, chunks = end + 1, {}
    while pos < len(data):
        line_end = data.index(b"\\n", pos)
        frame = data[line_end + 1:line_end + 1 + w * h]
        index, n = struct.unpack(">II", frame[:8])
        chunks[index] = frame[8:8 + n]
        pos = line_end + 1 + w * h
    return b"".join(chunks[k] for k in range(len(chunks)))
'''

    def params(self, rng, level):
        return {"width": rng.choice((32, 48, 64)), "height": rng.choice((16, 24, 32)), "shuffle": level >= 2,
                "duplicates": (0, 0, 2, 5)[level], "seed": rng.randrange(2**31)}

    def describe(self, params, level):
        text = (f"`{self.path}` is a YUV4MPEG2 video in monochrome (`Cmono`: each frame is only its luma "
                "plane, width x height bytes after the `FRAME` line). In every frame the first four bytes are "
                "the frame's index and the next four the number of bundle bytes it carries (both big-endian), "
                "followed by those bytes and padding. The bundle is the frames' bytes in index order.")
        if params["shuffle"]:
            text += " The frames were muxed out of order and some were written twice."
        return text

    def fuzz_params(self, params, rng, hard):
        return {"width": rng.choice((32, 48, 64)), "height": rng.choice((16, 24, 32)),
                "shuffle": hard or params["shuffle"], "duplicates": 4 if hard else params["duplicates"],
                "seed": rng.randrange(2**31)}


# The export stub: the bundle sits after the ELF image, masked, with a trailer the stub reads back.
STUB_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--export-bundle") != 0) {
        fprintf(stderr, "bundle-export: nothing to do\n");
        return 2;
    }
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return 3;
    unsigned char tail[17];
    if (fseek(f, -17, SEEK_END) != 0 || fread(tail, 1, 17, f) != 17 || memcmp(tail + 9, "TFBUNDLE", 8) != 0)
        return 4;
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | tail[i];
    unsigned char key = tail[8];
    if (fseek(f, -17 - (long)n, SEEK_END) != 0) return 5;
    for (unsigned long long i = 0; i < n; i++) {
        int c = fgetc(f);
        if (c == EOF) return 6;
        putchar((unsigned char)c ^ key);
        key = (unsigned char)(key * 5 + 1);
    }
    return 0;
}
"""


@functools.lru_cache(maxsize=1)
def export_stub() -> bytes:
    from termforge.generate.families.security.binary_passphrase_recovery import compile_c

    return compile_c(STUB_C, "bundle-export", "stripped_binary bundle")


class ElfTailBundle(Container):
    kind = "stripped_binary"
    path = f"{INBOX}/bundle-export"
    encoder = '''
import base64, os, struct

def encode(payload, path, params):
    key, out = params["key"], bytearray()
    for b in payload:
        out.append(b ^ key)
        key = (key * 5 + 1) % 256
    with open(path, "wb") as fh:
        fh.write(base64.b64decode(params["stub"]) + bytes(out) + struct.pack("<QB", len(payload), params["key"])
                 + b"TFBUNDLE")
    os.chmod(path, 0o755)
'''
    decoder = '''
import subprocess

def decode(path):
    return subprocess.run([path, "--export-bundle"], capture_output=True, check=True).stdout
'''

    def params(self, rng, level):
        return {"key": rng.randrange(256), "stub": base64.b64encode(export_stub()).decode()}

    def describe(self, params, level):
        return (f"`{self.path}` is the old export tool: a stripped executable with the bundle built into it. "
                "It writes the bundle to standard output when run with the right option, which it does not "
                "document.")

    def fuzz_params(self, params, rng, hard):
        return {"key": rng.randrange(256)}


VENDOR_README = """\
# bundlefmt 0.3 (vendored)

Reader for `.bfm` bundle files: `from bundlefmt import read_bundle; data = read_bundle(path)`.

A file is the magic `BFM1`, the payload's total length (u32), its CRC-32 (u32) and the number of
frames (u16), all big-endian, then the frames: each a u16 length and that many payload bytes.
"""

VENDOR_READER = '''\
"""Read .bfm bundle files (see README.md)."""

import struct


def read_bundle(path):
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:4] != b"BFM1":
        raise ValueError(f"{path}: not a bundle")
    total, crc, count = struct.unpack(">IIH", data[4:14])
    pos, out = 14, b""
    for _ in range(__FRAMES__):
        (n,) = struct.unpack(">H", data[pos:pos + 2])
        out += data[pos + 2:pos + 2 + n]
        pos += 2 + n
    return out
'''


class VendoredFormatBundle(Container):
    kind = "vendored_package"
    path = f"{INBOX}/bundle.bfm"
    encoder = '''
import os, struct, zlib

def encode(payload, path, params):
    size = params["frame"]
    frames = [payload[i:i + size] for i in range(0, len(payload), size)]
    body = b"".join(struct.pack(">H", len(f)) + f for f in frames)
    with open(path, "wb") as fh:
        fh.write(b"BFM1" + struct.pack(">IIH", len(payload), zlib.crc32(payload), len(frames)) + body)
    pkg = params.get("package_dir")
    if pkg:
        os.makedirs(pkg, exist_ok=True)
        for name, text in params["package"].items():
            with open(os.path.join(pkg, name), "w") as fh:
                fh.write(text)
'''
    decoder = '''
import struct, zlib

def decode(path):
    with open(path, "rb") as fh:
        data = fh.read()
    total, crc, count = struct.unpack(">IIH", data[4:14])
    pos, out = 14, b""
    for _ in range(count):
        (n,) = struct.unpack(">H", data[pos:pos + 2])
        out += data[pos + 2:pos + 2 + n]
        pos += 2 + n
    if len(out) != total or zlib.crc32(out) != crc:
        raise ValueError("bundle damaged")
    return out
'''

    def params(self, rng, level):
        # From level 2 on, the vendored reader drops the last frame: a known defect the agent must notice
        # (the header's length and CRC say so) and work around or fix.
        frames = "count - 1" if level >= 2 else "count"
        package = {"__init__.py": '"""bundlefmt (vendored)."""\n\nfrom .reader import read_bundle\n\n'
                                  '__all__ = ["read_bundle"]\n',
                   "reader.py": VENDOR_READER.replace("__FRAMES__", frames), "README.md": VENDOR_README}
        return {"frame": rng.choice((128, 256, 512, 1024)), "package_dir": "/app/vendor/bundlefmt",
                "package": package}

    def describe(self, params, level):
        text = (f"`{self.path}` is a bundle file in the `bfm` format; the team's vendored reader is in "
                "`/app/vendor/bundlefmt` (see its README).")
        if "count - 1" in params["package"]["reader.py"]:
            text += " Users report that the reader sometimes returns less than the whole bundle."
        return text

    def fuzz_params(self, params, rng, hard):
        return {"frame": rng.choice((16, 64, 128, 256)), "package_dir": None, "package": {}}


SERVICE_SOURCE = '''\
"""One service of the bundle store: `index` serves the manifest, `store` serves one part."""

import argparse
import hashlib
import http.server
import os

parser = argparse.ArgumentParser()
parser.add_argument("--role", choices=("index", "store"), required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--data", required=True)
args = parser.parse_args()
token = os.environ["BUNDLE_TOKEN"]
with open(args.data, "rb") as fh:
    blob = fh.read()
if args.role == "store":
    stream = b""
    while len(stream) < len(blob):
        stream += hashlib.sha256(token.encode() + len(stream).to_bytes(8, "big")).digest()
    blob = bytes(a ^ b for a, b in zip(blob, stream))


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = "/manifest" if args.role == "index" else "/part"
        if self.headers.get("Authorization") != f"Bearer {token}":
            self.send_error(401)
        elif self.path != path:
            self.send_error(404)
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)

    def log_message(self, *a):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
'''


class ComposeServicesBundle(Container):
    kind = "multi_service_compose"
    path = "/app/services"
    # A directory whose services listen on ports the test picks free when it runs.
    made_ahead = False
    encoder = '''
import hashlib, json, os

def encode(payload, path, params):
    os.makedirs(os.path.join(path, "data"), exist_ok=True)
    with open(os.path.join(path, "service.py"), "w") as fh:
        fh.write(params["service"])
    token, ports = params["token"], params["ports"]
    n = len(ports) - 1
    size = -(-len(payload) // n) if payload else 0
    parts = [payload[i * size:(i + 1) * size] for i in range(n)]
    manifest = {"length": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
                "parts": [{"url": f"http://127.0.0.1:{ports[i + 1]}/part", "length": len(p)} for i, p in enumerate(parts)]}
    lines = ["services:"]
    specs = [("index", "index", ports[0], "data/manifest.json", json.dumps(manifest).encode(), [])]
    specs += [(f"store-{chr(97 + i)}", "store", ports[i + 1], f"data/part-{i}.bin", p, ["index"]) for i, p in enumerate(parts)]
    for name, role, port, data_rel, blob, deps in specs:
        if role == "store":
            stream = b""
            while len(stream) < len(blob):
                stream += hashlib.sha256(token.encode() + len(stream).to_bytes(8, "big")).digest()
            blob = bytes(a ^ b for a, b in zip(blob, stream))
        with open(os.path.join(path, data_rel), "wb") as fh:
            fh.write(blob)
        lines += [f"  {name}:", f"    command: python3 service.py --role {role} --port {port} --data {data_rel}",
                  "    working_dir: .", "    environment:", f"      BUNDLE_TOKEN: \\"{token}\\""]
        if deps:
            lines += ["    depends_on: [" + ", ".join(deps) + "]"]
    with open(os.path.join(path, "compose.yaml"), "w") as fh:
        fh.write("\\n".join(lines) + "\\n")
'''
    decoder = '''
import hashlib, json, os, re, subprocess, time, urllib.request

def decode(path):
    text = open(os.path.join(path, "compose.yaml")).read()
    procs = []
    try:
        for command, token in re.findall(r'command: (.+)\\n.*\\n.*\\n\\s+BUNDLE_TOKEN: "(.+)"', text):
            procs.append(subprocess.Popen(command.split(), cwd=path, env={**os.environ, "BUNDLE_TOKEN": token}))
        index_port = re.search(r"--role index --port (\\d+)", text).group(1)

        def get(url):
            for _ in range(1000):
                try:
                    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
                    return urllib.request.urlopen(req, timeout=5).read()
                except OSError:
                    time.sleep(0.01)
            raise RuntimeError(f"{url}: no answer")

        manifest = json.loads(get(f"http://127.0.0.1:{index_port}/manifest"))
        payload = b"".join(get(p["url"]) for p in manifest["parts"])
        if hashlib.sha256(payload).hexdigest() != manifest["sha256"]:
            raise ValueError("bundle damaged")
        return payload
    finally:
        for p in procs:
            p.kill()
            p.wait()
'''

    def params(self, rng, level):
        base = rng.randrange(20000, 60000, 10)
        n_stores = (1, 2, 2, 3)[level]
        token = "".join(rng.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(16))
        return {"ports": [base + i for i in range(n_stores + 1)], "token": token, "service": SERVICE_SOURCE}

    def describe(self, params, level):
        return (f"The bundle is held by the services described in `{self.path}/compose.yaml` (there is no "
                "container engine here: start each service's command yourself, in that directory, with its "
                "environment). The `index` service's `/manifest` lists the parts, the `store-*` services "
                "serve them; every request needs the header `Authorization: Bearer <BUNDLE_TOKEN>`. The bundle "
                "is the parts joined in manifest order; its length and SHA-256 are in the manifest. Stop the "
                "services when you are done.")

    def fuzz_params(self, params, rng, hard):
        return {"ports": "free", "token": "".join(rng.choice("abcdefgh23456789") for _ in range(12))}


CONTAINERS: dict[str, Container] = {c.kind: c for c in (PngBundle(), WavBundle(), Y4mBundle(), ElfTailBundle(),
                                                          VendoredFormatBundle(), ComposeServicesBundle())}


def encoded(container: Container, payload: bytes, params: dict) -> tuple[bytes, bool]:
    """The container file the container's own encoder writes for `payload` with `params`: its
    bytes, and whether it is executable (what a final test would otherwise make in every grade)."""
    namespace: dict = {"__name__": f"termforge_{container.kind}_encoder"}
    exec(_compiled_encoder(container.kind), namespace)  # noqa: S102 - termforge's own encoder
    with tempfile.TemporaryDirectory(prefix="tf-encode-") as tmp:
        path = os.path.join(tmp, "container")
        namespace["encode"](payload, path, params)
        with open(path, "rb") as fh:
            return fh.read(), os.access(path, os.X_OK)


@functools.lru_cache(maxsize=None)
def _compiled_encoder(kind: str):
    return compile(CONTAINERS[kind].encoder, f"<{kind} encoder>", "exec")


def setup_step(container: Container, params: dict) -> str:
    """Bash appended to the family's setup: pack /app into the bundle, then encode the container."""
    dest = container.path
    prepare = f"os.makedirs({json.dumps(dest if container.kind == 'multi_service_compose' else INBOX)}, exist_ok=True)"
    code = "\n".join([PACK_SOURCE, container.encoder, "import json, os",
                      f"PARAMS = json.loads({json.dumps(json.dumps(params, sort_keys=True))})",
                      "payload = pack_app()", prepare, f"encode(payload, {json.dumps(dest)}, PARAMS)"])
    return f"python3 - <<'TERMFORGE_PACK'\n{code}\nTERMFORGE_PACK\n"


def oracle_step(container: Container) -> str:
    """Bash the oracle runs first: decode the container and put the files back under /app."""
    code = "\n".join([container.decoder, UNPACK_SOURCE, f"unpack_app(decode({json.dumps(container.path)}))"])
    return f"python3 - <<'TERMFORGE_UNPACK'\n{code}\nTERMFORGE_UNPACK\n"


def inputs_section(container: Container, params: dict, level: int) -> str:
    return textwrap.dedent("""
        ## How the inputs arrive

        The files this task talks about under `/app` are not on disk yet. They were packed into one
        gzip-compressed tar archive (the *bundle*, paths relative to `/app`, file modes kept) and only the
        bundle reached this machine:

        {describe}

        Restore the files under `/app` from the bundle before you start.
        """).format(describe=container.describe(params, level)).strip() + "\n"
