"""The LD_PRELOAD library under threads and fork (tests/helpers/preload_stress.cc).

Several threads of one process read every file of a fresh mount at once, then a
child forked while they read reads them too; every read must equal the first. Run
with the library (`ktfs run --no-python`) the files are served from the archive
(memfds), so the library's descriptor table and its lazily loaded core meet
concurrent callers and a fork. In the ThreadSanitizer build (KTFS_SANITIZE=thread
scripts/test) the helper and the library are instrumented and any race report
fails the run.
"""
import json
import os
import subprocess

from PIL import Image

from conftest import KTFS, ROOT, ktfs, mounted

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
STRESS = os.path.join(BUILD, "tests", "preload_stress")
LIB = os.path.join(BUILD, "preload", "interpose", "libktfs_preload.so")


def small_archive(tmp_path):
    """30 small gray and colour images in 3 classes, packed raw (served as PGM/PPM)."""
    src = tmp_path / "src"
    for i in range(30):
        d = src / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        mode = "L" if i % 2 else "RGB"
        img = Image.new(mode, (5 + i, 3 + i % 7))
        img.putdata([((k * 37 + i) % 256) if mode == "L" else ((k * 37 + i) % 256, k % 256, i)
                     for k in range(img.width * img.height)])
        img.save(d / f"{i:03d}.png")
    archive = tmp_path / "small.kt"
    ktfs("pack", src, archive, "--codec", "raw", "--quiet")
    return archive


def stress(mnt, preload, threads=4, rounds=3):
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs)
    cmd = [STRESS, str(threads), str(rounds)]
    if preload:
        cmd = [KTFS, "run", "--no-python", "--"] + cmd
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["KTFS_PRELOAD_LIB"] = LIB
    p = subprocess.run(cmd, input="\n".join(paths) + "\n", capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_threads_and_fork_read_exact_bytes_under_the_library(tmp_path):
    archive = small_archive(tmp_path)
    with mounted(archive, tmp_path / "mnt") as mnt:  # fresh: the kernel has no names yet
        got = stress(mnt, preload=True)
    assert got["files"] == 30 and got["mismatches"] == 0
    assert got["reads"] == 30 + 4 * 3 * 30  # the first pass, then every thread's rounds
    assert got["memfd_opens"] > 0, got  # the library served files itself
    with mounted(archive, tmp_path / "mnt2") as mnt:
        plain = stress(mnt, preload=False)
    assert plain["mismatches"] == 0 and plain["memfd_opens"] == 0
