"""Count and measure the coloured shapes in a generated PNG image."""

from __future__ import annotations

import random
import struct
import zlib

from termforge.generate.base import (DifficultyKnobs, FamilyAxes, TaskFamily, TaskSpec, bash_script, complexity_level,
                                     indent_block, instruction_frame, pytest_module)
from termforge.generate.families.package_files import family_template


PALETTE = {"#d62728": "red", "#1f77b4": "blue", "#2ca02c": "green", "#ff7f0e": "orange",
           "#9467bd": "purple", "#e377c2": "pink", "#17becf": "cyan", "#8c564b": "brown"}
MIN_BLOB = 6


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_rgb(width: int, height: int, pixels: list[list[tuple[int, int, int]]], filters: list[int]) -> bytes:
    """An 8-bit RGB PNG. Each row uses the given PNG filter type (0-4). The zlib stream is written
    with stored (uncompressed) deflate blocks by hand: compressed output varies between zlib builds,
    and fixtures must be the same bytes on every machine."""
    bpp = 3
    raw = bytearray()
    prev = bytes(width * bpp)
    for y in range(height):
        cur = bytes(v for px in pixels[y] for v in px)
        ftype = filters[y]
        out = bytearray([ftype])
        for i, x in enumerate(cur):
            a = cur[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[ftype]
            out.append((x - pred) & 0xFF)
        raw += out
        prev = cur
    data = bytes(raw)
    stream = bytearray(b"\x78\x01")
    for start in range(0, len(data), 65535):
        block = data[start:start + 65535]
        final = 1 if start + 65535 >= len(data) else 0
        stream += struct.pack("<BHH", final, len(block), 0xFFFF ^ len(block)) + block
    stream += struct.pack(">I", zlib.adler32(data) & 0xFFFFFFFF)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", bytes(stream)) + chunk(b"IEND", b"")


def _hex_rgb(h: str) -> tuple[int, int, int]:
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


SHAPE_ORACLE = family_template(__name__, "oracle.py.txt")


class PngShapeCensus(TaskFamily):
    """Count and measure coloured shapes in a PNG scan: per colour, the number of shapes and their
    total area; at higher complexity also the bounding box of the largest shape, with noise specks
    to ignore and a non-uniform background."""

    knobs = DifficultyKnobs(
        canvas=((96, 72), (128, 96), (160, 120), (200, 150)), shapes=((5, 7), (7, 10), (10, 14), (14, 20)),
        colours=(2, 3, 4, 5),
        shape_kinds=(("rect",), ("rect", "disc"), ("rect", "disc", "triangle"), ("rect", "disc", "triangle")))
    axes = FamilyAxes(name="png_shape_census", domains=("data_science",), verifier_kinds=("exact_text",),
                      fixture_kinds=("image",), skill_types=(), skills=(), languages=("python",), anchors=("NumPy",),
                      command_complexities=("bash_code",),
                      summary="count shapes and measure their areas per colour in a generated PNG image")
    method = (
        ("Decode the PNG with Pillow (or NumPy on top of it), build a mask per listed colour with exact RGB "
         "equality, and label 4-connected components with a BFS/flood fill; count components and sum their "
         "pixel counts per colour.", None),
        (f"Drop components below {MIN_BLOB} pixels before counting.", r"scanner specks"),
        ("Track each component's pixel count and min/max x and y to report the largest one.", r"`largest "),
        ("Check the total of all listed-colour pixels against the sum of the reported areas.", None),
    )


    def build(self, sig: dict, rng: random.Random) -> TaskSpec:
        level = complexity_level(sig)
        knobs = self.knobs.at(level)
        width, height = knobs.canvas
        colours = rng.sample(sorted(PALETTE), knobs.colours)
        noisy = level >= 3
        gradient = level >= 2
        want_largest = level >= 2

        occupied: set[tuple[int, int]] = set()
        shapes = []  # (colour, cells)
        target = rng.randint(*knobs.shapes)
        kinds = knobs.shape_kinds
        attempts = 0
        while len(shapes) < target and attempts < 2000:
            attempts += 1
            cells = self._shape(rng, rng.choice(kinds), width, height)
            if cells and self._fits(cells, occupied, width, height):
                occupied |= cells
                shapes.append((rng.choice(colours), cells))
        specks = []
        if noisy:
            for _ in range(rng.randint(6, 12)):
                for _try in range(50):
                    x, y = rng.randrange(width - 2), rng.randrange(height - 2)
                    cells = {(x, y), (x + 1, y), (x, y + 1)}
                    cells = set(list(sorted(cells))[: rng.randint(1, 3)])
                    if self._fits(cells, occupied, width, height):
                        occupied |= cells
                        specks.append((rng.choice(colours), cells))
                        break

        bg_base = rng.randint(225, 245)
        pixels = []
        for y in range(height):
            row = []
            for x in range(width):
                if gradient:  # a scanner's uneven lighting: many near-grey shades, none in the palette
                    v = bg_base - (x * 12) // width - (y * 8) // height
                    row.append((v, v, min(255, v + 3)))
                else:
                    row.append((bg_base, bg_base, bg_base))
            pixels.append(row)
        for colour, cells in shapes + specks:
            rgb = _hex_rgb(colour)
            for x, y in cells:
                pixels[y][x] = rgb
        filters = [rng.randrange(5) for _ in range(height)]
        png = png_rgb(width, height, pixels, filters)

        census = {c: [0, 0] for c in colours}
        blobs = []
        for colour, cells in shapes:
            census[colour][0] += 1
            census[colour][1] += len(cells)
            xs, ys = [c[0] for c in cells], [c[1] for c in cells]
            blobs.append((len(cells), min(ys), min(xs), colour, min(xs), min(ys), max(xs), max(ys)))
        expected = [f"{c} {census[c][0]} {census[c][1]}" for c in colours]
        largest = None
        if want_largest:
            best = sorted(blobs, key=lambda b: (-b[0], b[1], b[2]))[0]
            largest = "largest {} {} {} {} {}".format(*best[3:])
            expected.append(largest)

        colour_list = ", ".join(f"`{c}` ({PALETTE[c]})" for c in colours)
        rules = [
            "A *shape* is a 4-connected region of pixels of exactly one listed colour. Shapes never touch "
            "each other (not even diagonally). Every pixel whose colour is not listed is background"
            + (" (the background is not one uniform colour)." if gradient else "."),
        ]
        if noisy:
            rules.append(f"Regions smaller than {MIN_BLOB} pixels are scanner specks, not shapes: ignore them "
                         "completely (they count neither as shapes nor towards areas).")
        rules_md = "\n".join(f"- {r}" for r in rules)
        deliver = [f"`/app/census.txt`: one line per listed colour, in the order listed: "
                   "`<colour> <number of shapes> <total area in pixels>` (colour written as above, "
                   "lowercase `#rrggbb`, single spaces)."]
        if want_largest:
            deliver.append("Then one more line, `largest <colour> <x_min> <y_min> <x_max> <y_max>`: the colour "
                           "and inclusive bounding box of the shape with the most pixels (x grows right, y "
                           "grows down, origin at the top-left pixel; ties: smallest `y_min`, then `x_min`).")
        instruction = instruction_frame(
            sig, "Shape census of a scanned sheet",
            f"""
            `/app/scan.png` ({width}x{height}, RGB) is a scan of a sheet with coloured marks. I need a census of
            the marks in these colours: {colour_list}.

            {indent_block(rules_md, 12)}

            `python3` has Pillow and NumPy available.
            """,
            deliver,
        )
        test_initial = pytest_module(f"""
            import os

            def test_scan_present():
                with open("/app/scan.png", "rb") as fh:
                    head = fh.read(24)
                assert head[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
                assert int.from_bytes(head[16:20], "big") == {width}
                assert int.from_bytes(head[20:24], "big") == {height}

            def test_no_census_yet():
                assert not os.path.exists("/app/census.txt")
        """)
        test_final = pytest_module(f"""
            EXPECTED = {expected!r}

            def _lines():
                with open("/app/census.txt", encoding="utf-8") as fh:
                    return [" ".join(line.split()) for line in fh if line.strip()]

            def test_line_count():
                assert len(_lines()) == len(EXPECTED)

            def test_colour_lines():
                got = _lines()
                for i, want in enumerate(EXPECTED):
                    if want.startswith("#"):
                        # The instruction asks for lowercase #rrggbb: case is part of the answer.
                        assert got[i] == want, f"line {{i + 1}}: got {{got[i]!r}}"
        """)
        if want_largest:
            test_final += "\n\n" + pytest_module("""
                def test_largest_shape():
                    assert _lines()[-1].lower() == EXPECTED[-1]
            """)
        oracle_src = (SHAPE_ORACLE.strip().replace("__COLOURS__", repr(colours))
                      .replace("__MIN_BLOB__", str(MIN_BLOB if noisy else 1))
                      .replace("__WANT_LARGEST__", repr(want_largest)))
        solve = bash_script(f"""
            python3 - <<'PY'
            {indent_block(oracle_src, 12)}
            PY
        """)
        return TaskSpec(
            instruction=instruction,
            setup_sh=bash_script("cp /tmp/env/fixtures/scan.png /app/scan.png"),
            test_initial=test_initial,
            test_final=test_final,
            solve_sh=solve,
            truth={"given": {"colours": colours, "min_region_pixels": MIN_BLOB if noisy else 1},
                   "census": {c: census[c] for c in colours}, "largest": largest, "noise_specks": len(specks),
                   "shape_count": len(shapes)},
            verifier_kind="exact_text",
            fixture_kind="image",
            fixtures={"scan.png": png},
            output_paths=["/app/census.txt"],
            apt_packages=("python3-pil", "python3-numpy"),
        )

    @staticmethod
    def _shape(rng, kind, width, height) -> set[tuple[int, int]]:
        if kind == "rect":
            w, h = rng.randint(3, max(4, width // 5)), rng.randint(3, max(4, height // 5))
            x0, y0 = rng.randrange(width - w), rng.randrange(height - h)
            return {(x, y) for x in range(x0, x0 + w) for y in range(y0, y0 + h)}
        if kind == "disc":
            r = rng.randint(2, max(3, min(width, height) // 9))
            cx, cy = rng.randrange(r, width - r), rng.randrange(r, height - r)
            return {(x, y) for x in range(cx - r, cx + r + 1) for y in range(cy - r, cy + r + 1)
                    if (x - cx) ** 2 + (y - cy) ** 2 <= r * r + r}
        # A right triangle with its right angle at the top-left: 4-connected row by row.
        n = rng.randint(4, max(5, min(width, height) // 5))
        x0, y0 = rng.randrange(width - n), rng.randrange(height - n)
        return {(x0 + dx, y0 + dy) for dy in range(n) for dx in range(n - dy)}

    @staticmethod
    def _fits(cells, occupied, width, height) -> bool:
        for x, y in cells:
            if not (0 <= x < width and 0 <= y < height):
                return False
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    if (x + dx, y + dy) in occupied:
                        return False
        return True


FAMILY = PngShapeCensus
