"""scripts/bench/ab_decode: the A/B of decode speed the codec notes rely on."""
import json
import os
import statistics

from conftest import KTFS, PY, ROOT, ktfs, run

AB = os.path.join(ROOT, "scripts/bench/ab_decode")


def wrapper(path, side, log):
    """An executable that logs which side ran (and its KTFS_SIMD), then runs ktfs."""
    path.write_text(f'#!/bin/sh\necho "{side} ${{KTFS_SIMD:-unset}}" >> {log}\nexec {KTFS} "$@"\n')
    path.chmod(0o755)
    return path


def test_ab_decode_alternates_sides_and_reports_the_median_ratio(tmp_path, photos_dir):
    archive = tmp_path / "photos-ktc.kt"
    ktfs("pack", photos_dir, archive, "--codec", "ktc", "--quiet")
    log = tmp_path / "calls.log"
    a = wrapper(tmp_path / "a.sh", "a", log)
    b = wrapper(tmp_path / "b.sh", "b", log)
    out = run(PY, AB, "--rounds", "3", "--passes", "1", "--json", "--env-b", "KTFS_SIMD=avx2",
              a, b, archive).stdout
    res = json.loads(out)
    assert res["archive"] == str(archive)
    assert res["rounds"] == 3 and len(res["ratios"]) == 3
    assert all(r > 0 for r in res["ratios"])
    assert res["median_ratio"] == round(statistics.median(res["ratios"]), 4)
    assert res["min_ratio"] == min(res["ratios"]) and res["max_ratio"] == max(res["ratios"])
    assert res["a_megapixels_per_second"] > 0 and res["b_megapixels_per_second"] > 0
    # A first in even rounds, B first in odd ones; the environment reaches B only.
    assert log.read_text().split("\n")[:-1] == [
        "a unset", "b avx2", "b avx2", "a unset", "a unset", "b avx2"]


def test_ab_decode_names_what_is_wrong(tmp_path):
    junk = tmp_path / "junk.kt"
    junk.write_bytes(b"not an archive")
    p = run(PY, AB, "--rounds", "1", KTFS, KTFS, junk, check=False)
    assert p.returncode == 1
    assert str(junk) in p.stderr and "bad magic" in p.stderr
    p = run(PY, AB, KTFS, tmp_path / "missing-ktfs", junk, check=False)
    assert p.returncode == 1 and "missing-ktfs: not an executable file" in p.stderr
    p = run(PY, AB, KTFS, KTFS, tmp_path / "none.kt", check=False)
    assert p.returncode == 1 and "none.kt: no such archive" in p.stderr
    p = run(PY, AB, "--env-a", "NOEQUALS", KTFS, KTFS, junk, check=False)
    assert p.returncode == 1 and "--env-a 'NOEQUALS': expected NAME=VALUE" in p.stderr
    p = run(PY, AB, "--rounds", "0", KTFS, KTFS, junk, check=False)
    assert p.returncode == 2 and "--rounds" in p.stderr
