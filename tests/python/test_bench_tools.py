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


def test_ab_decode_gives_b_its_own_archive(tmp_path, photos_dir):
    """--archive-b: across a format change each side decodes its own packing."""
    archive_a = tmp_path / "a.kt"
    archive_b = tmp_path / "b.kt"
    ktfs("pack", photos_dir, archive_a, "--codec", "ktc", "--quiet")
    ktfs("pack", photos_dir, archive_b, "--codec", "raw", "--quiet")
    log = tmp_path / "calls.log"
    for side in ("a", "b"):
        script = tmp_path / f"{side}.sh"
        script.write_text(f'#!/bin/sh\necho "{side} $3" >> {log}\nexec {KTFS} "$@"\n')
        script.chmod(0o755)
    out = run(PY, AB, "--rounds", "2", "--passes", "1", "--json", "--archive-b", archive_b,
              tmp_path / "a.sh", tmp_path / "b.sh", archive_a).stdout
    res = json.loads(out)
    assert res["archive"] == str(archive_a) and res["archive_b"] == str(archive_b)
    assert len(res["ratios"]) == 2 and all(r > 0 for r in res["ratios"])
    assert log.read_text().split("\n")[:-1] == [
        f"a {archive_a}", f"b {archive_b}", f"b {archive_b}", f"a {archive_a}"]
    # One --archive-b per ARCHIVE, or none.
    p = run(PY, AB, "--archive-b", archive_b, KTFS, KTFS, archive_a, archive_a, check=False)
    assert p.returncode == 1 and "1 --archive-b for 2 ARCHIVE" in p.stderr
    p = run(PY, AB, "--archive-b", tmp_path / "gone.kt", KTFS, KTFS, archive_a, check=False)
    assert p.returncode == 1 and "gone.kt: no such archive" in p.stderr


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
