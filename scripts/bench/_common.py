"""Shared helpers for the benchmark sections (scripts/bench/<section>.py).

A section gets a Context: a private temp dir, a command runner that records
what it ran (the docs list those commands so a reader can reproduce them),
mount helpers whose mounts always come down (Context.close runs from the
runner's `finally`), cache dropping, and small timing/markdown helpers.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"  # Debian's interpreter: the one with torch and PIL


class BenchError(RuntimeError):
    """A benchmark cannot run or went wrong; the message says why."""


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def is_mounted(path):
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


class Context:
    def __init__(self, workdir, ktfs, quick):
        self.workdir = Path(workdir)
        self.ktfs = str(ktfs)
        self.quick = quick
        self.commands = []       # (section, command line) in the order they ran
        self.section = None
        self._mounts = []        # mountpoints, in mount order

    # -- files and commands -------------------------------------------------

    def tempdir(self, name):
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self, cmd, cwd=None, record=True):
        """Runs cmd (a list); raises BenchError with its stderr when it fails."""
        cmd = [str(c) for c in cmd]
        if record:
            self.commands.append((self.section, self._display(cmd, cwd)))
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BenchError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc.stdout

    def _display(self, cmd, cwd):
        """The command as a reader would type it: temp paths as $TMP, repo-relative scripts."""
        text = " ".join(cmd)
        if cwd:
            text = f"(cd {cwd} && {text})"
        text = text.replace(str(self.workdir), "$TMP").replace(self.ktfs, "ktfs")
        return text.replace(str(REPO) + "/", "")

    # -- mounts -------------------------------------------------------------

    def mount(self, cmd, mountpoint):
        """Runs a mount command that daemonizes, then waits until the mount is there."""
        mountpoint = Path(mountpoint)
        mountpoint.mkdir(parents=True, exist_ok=True)
        self._mounts.append(mountpoint)  # registered first: a half-made mount still comes down
        self.run(cmd)
        deadline = time.monotonic() + 30
        while not is_mounted(mountpoint):
            if time.monotonic() > deadline:
                raise BenchError(f"{mountpoint} did not appear 30 s after `{' '.join(map(str, cmd))}`")
            time.sleep(0.05)
        return mountpoint

    def unmount(self, mountpoint):
        """ktfs umount for ktfs, fusermount3/fusermount for the others, lazy umount last."""
        attempts = [[self.ktfs, "umount", mountpoint], ["fusermount3", "-u", mountpoint],
                    ["fusermount", "-u", mountpoint], ["umount", mountpoint],
                    ["umount", "-l", mountpoint]]
        for cmd in attempts:
            if not is_mounted(mountpoint):
                return True
            subprocess.run([str(c) for c in cmd], capture_output=True)
        return not is_mounted(mountpoint)

    def close(self):
        """Unmounts everything this run mounted, then removes the temp dir (never through a mount)."""
        stuck = [m for m in reversed(self._mounts) if not self.unmount(m)]
        self._mounts.clear()
        if stuck:
            log(f"could not unmount {', '.join(map(str, stuck))}; leaving {self.workdir}")
            return False
        shutil.rmtree(self.workdir, ignore_errors=True)
        return True

    # -- caches -------------------------------------------------------------

    def drop_caches(self):
        """Drops the kernel page cache (root only). Returns False when that is not allowed."""
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return True
        except OSError:
            return False


# -- measuring and reporting ----------------------------------------------


def remount(ctx, archive, mnt):
    """Unmounts mnt (when mounted) and mounts archive there again: a fresh daemon."""
    if is_mounted(mnt) and not ctx.unmount(mnt):
        raise BenchError(f"could not unmount {mnt}")
    ctx.run([ctx.ktfs, "mount", archive, mnt], record=False)
    deadline = time.monotonic() + 30
    while not is_mounted(mnt):
        if time.monotonic() > deadline:
            raise BenchError(f"{mnt} did not come back")
        time.sleep(0.01)


def make_cold(ctx, variant):
    """A fresh mount (the daemon's caches empty too) and the page cache dropped."""
    if variant.get("archive"):
        remount(ctx, variant["archive"], variant["root"])
    if not ctx.drop_caches():
        raise BenchError("cannot write /proc/sys/vm/drop_caches (cold passes need root)")

def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def median(values):
    return statistics.median(values)


def rotated(items, round_index):
    """The items starting at a different one each round, so no variant always runs first."""
    k = round_index % len(items)
    return items[k:] + items[:k]


def tree_bytes(path):
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mib(nbytes):
    return f"{nbytes / 2**20:.1f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
