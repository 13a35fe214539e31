"""Benchmark: checking an image and making its ``data:`` URL, against Pillow and base64 alone.

A deterministic 6000×4000 JPEG (smooth gradients, shapes and mild noise, quality 85: a photo's
worth of detail, a few MB) is written to a temporary file. Then, best of ``repeat`` alternating
runs:

- ours: ``gpucloud_nb.media.image_data_url(path)`` (format by content, completeness and size
  checks, base64);
- baseline: ``Image.open(path)`` + ``verify()``, then ``"data:image/jpeg;base64," +
  base64.b64encode(file bytes)``: the least any checked data URL costs.

Target ≤ 1.3×. Run standalone with ``python -m benchmarks.bench_media``.

Memory: the peak resident size (``VmHWM``, or ``ru_maxrss``; both see Pillow's C allocations that
tracemalloc misses) of a fresh process that runs ``check_image`` and the chat's ``thumbnail`` on a
9400×9400 PNG, against one that opens and loads a 64×64 PNG. Target: at most 300 MB peak.
"""

from __future__ import annotations

import base64
import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["QUICK", "UNIT", "make_jpeg", "run"]

Row = tuple[str, float, float, float, str]
UNIT = "s"
QUICK = {"width": 1500, "height": 1000, "repeat": 2, "big_side": 3000}

_MAKE_PNG = """
import sys
from PIL import Image, ImageDraw
side = int(sys.argv[2])
image = Image.new("RGB", (side, side), "white")
draw = ImageDraw.Draw(image)
for step in range(0, side, max(1, side // 40)):
    draw.line((0, step, side, side - step), fill=(step % 256, 80, 160), width=9)
image.save(sys.argv[1], "PNG", compress_level=1)
"""

_PEAK = """
import resource, sys
from PIL import Image
from gpucloud_nb import media
if sys.argv[2] == "ours":
    checked = media.check_image(sys.argv[1])
    media.thumbnail(checked.data, 96)
else:
    with Image.open(sys.argv[1]) as image:
        image.load()
try:  # VmHWM starts afresh at exec; ru_maxrss may carry the forking parent's peak over
    with open("/proc/self/status") as status:
        print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
except OSError:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _peak_mb(path: Path, which: str) -> float:
    """Peak RSS in MB (VmHWM / ru_maxrss, in KB on Linux) of a fresh process doing ``which``."""
    out = subprocess.run([sys.executable, "-c", _PEAK, str(path), which], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    return int(out.split()[-1]) / 1024


def memory_rows(big_side: int = 9400) -> list[tuple[str, float, float, float, str, str]]:
    """Peak RSS of checking + thumbnailing a ``big_side``² PNG against loading a small PNG."""
    from PIL import Image

    with tempfile.TemporaryDirectory() as folder:
        big, small = Path(folder) / "big.png", Path(folder) / "small.png"
        subprocess.run([sys.executable, "-c", _MAKE_PNG, str(big), str(big_side)], check=True,
                       timeout=300)
        Image.new("RGB", (64, 64), "red").save(small)
        ours, baseline = _peak_mb(big, "ours"), _peak_mb(small, "baseline")
    return [(f"peak RSS: check_image + thumbnail of a {big_side}x{big_side} PNG vs open+load "
             "of a 64x64 PNG", ours, baseline, ours / baseline, "<= 300 MB", "MB"),
            (f"peak RSS above the baseline process ({big_side}x{big_side} PNG)",
             ours - baseline, 0.0, float("nan"), "", "MB")]


def make_jpeg(path: Path, width: int = 6000, height: int = 4000, seed: int = 7) -> int:
    """Write a photo-like JPEG of ``width`` × ``height`` to ``path``; returns its size in bytes."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    red = 128 + 100 * np.sin(x / width * 6.3) * np.cos(y / height * 3.1)
    green = 128 + 90 * np.sin((x + y) / (width + height) * 9.4)
    blue = 128 + 80 * np.cos(x / width * 2.2 + y / height * 4.7)
    pixels = np.stack([red, green, blue], axis=-1)
    pixels += rng.normal(0, 16, size=pixels.shape).astype(np.float32)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(200):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        size = int(rng.integers(20, max(21, width // 10)))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.ellipse((x0, y0, x0 + size, y0 + size), fill=colour)
    image.save(path, "JPEG", quality=85)
    return path.stat().st_size


def _baseline(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
    return "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def run(width: int = 6000, height: int = 4000, repeat: int = 7,
        big_side: int = 9400) -> list[tuple[object, ...]]:
    """Rows (name, ours, baseline, ratio, target); times in seconds."""
    from gpucloud_nb import media

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "photo.jpg"
        size = make_jpeg(path, width, height)
        ours_url = media.image_data_url(path)  # warm-up, and the two must agree
        assert ours_url == _baseline(path), "image_data_url changed the image or its MIME type"
        best = {"ours": float("inf"), "baseline": float("inf")}
        for _ in range(repeat):
            for name, step in (("ours", lambda: media.image_data_url(path)),
                               ("baseline", lambda: _baseline(path))):
                gc.collect()
                start = time.perf_counter()
                step()
                best[name] = min(best[name], time.perf_counter() - start)
    return [(f"image_data_url {width}x{height} JPEG ({size / 1e6:.1f} MB) vs Pillow open+verify"
             f"+base64", best["ours"], best["baseline"], best["ours"] / best["baseline"], "<= 1.3x",
             "s"), *memory_rows(big_side)]


def main() -> None:
    for name, ours, baseline, ratio, target, unit in run():
        print(f"{name}: ours {ours:.3g} {unit}, baseline {baseline:.3g} {unit}, "
              f"ratio {ratio:.2f}x, target {target or '-'}")


if __name__ == "__main__":
    main()
