"""Benchmark: checking an image and making its ``data:`` URL, against Pillow and base64 alone.

A deterministic 6000×4000 JPEG (smooth gradients, shapes and mild noise, quality 85: a photo's
worth of detail, a few MB) is written to a temporary file. Then, best of ``repeat`` alternating
runs:

- ours: ``gpucloud_nb.media.image_data_url(path)`` (format by content, completeness and size
  checks, base64);
- baseline: ``Image.open(path)`` + ``verify()``, then ``"data:image/jpeg;base64," +
  base64.b64encode(file bytes)``: the least any checked data URL costs.

Target ≤ 1.3×. Run standalone with ``python -m benchmarks.bench_media``.
"""

from __future__ import annotations

import base64
import gc
import tempfile
import time
from pathlib import Path

__all__ = ["QUICK", "UNIT", "make_jpeg", "run"]

Row = tuple[str, float, float, float, str]
UNIT = "s"
QUICK = {"width": 1500, "height": 1000, "repeat": 2}


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


def run(width: int = 6000, height: int = 4000, repeat: int = 7) -> list[Row]:
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
             f"+base64", best["ours"], best["baseline"], best["ours"] / best["baseline"], "<= 1.3x")]


def main() -> None:
    for name, ours, baseline, ratio, target in run():
        print(f"{name}: ours {ours * 1e3:.1f} ms, baseline {baseline * 1e3:.1f} ms, "
              f"ratio {ratio:.2f}x, target {target}")


if __name__ == "__main__":
    main()
