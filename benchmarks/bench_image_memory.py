"""Memory left resident after fitting large images, with and without Missive
giving freed heap back (``missive.media.images._release_memory``).

Images are fitted in worker threads, as the server does; glibc keeps what a
thread's arena freed. The baseline is the same work with the release
switched off, in a fresh process, measured in the same run. Target: resident
memory after the work at most 1.5x the resident memory before it.

    .venv/bin/python benchmarks/bench_image_memory.py [--images 4] [--side 8000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import io, json, sys
from concurrent.futures import ThreadPoolExecutor
from PIL import Image
import missive.media.images as images
from missive.driver.media import ImageTarget, SourceBytes

side, count, release = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if not release:
    images._release_memory = lambda: None
out = io.BytesIO()
Image.new("RGBA", (side, side), (1, 2, 3, 4)).save(out, format="WEBP", lossless=True)
data = out.getvalue()
del out

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

images._release_memory()  # start from a trimmed heap either way
before = rss_mb()
target = ImageTarget(accept=frozenset({"image/png"}), max_edge=1568, model="m")
def fit(_):
    images.prepare_image(SourceBytes(data, "image/webp", "p"), target, max_side=side, max_pixels=side * side)
with ThreadPoolExecutor(2) as pool:
    list(pool.map(fit, range(count)))
    print(json.dumps({"bytes": len(data), "before": before, "after": rss_mb()}))
"""


def run(side: int, count: int, release: bool) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(side), str(count), "1" if release else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--side", type=int, default=8000)
    args = parser.parse_args()
    baseline = run(args.side, args.images, release=False)
    missive = run(args.side, args.images, release=True)
    print(
        f"{args.images} lossless WebPs of {args.side}x{args.side} ({missive['bytes']} bytes each), 2 threads"
    )
    for name, r in (("baseline (no release)", baseline), ("missive", missive)):
        print(
            f"  {name:22} resident before {r['before']:7.0f} MB, after {r['after']:7.0f} MB "
            f"({r['after'] / r['before']:.1f}x)"
        )
    ratio = missive["after"] / baseline["after"]
    print(
        f"resident after, missive / baseline: {ratio:.3f} (target: after <= 1.5x before: "
        f"{'met' if missive['after'] <= 1.5 * missive['before'] else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
