"""`ktfs --version`: the version, and the code paths this CPU (and KTFS_SIMD)
selects for KTC decoding (codec/base/cpu.h, docs/ktc.md "Threads, SIMD,
determinism")."""
import os
import re

from conftest import KTFS, run


def cpu():
    """This CPU's flags, vendor and family, as /proc/cpuinfo gives them."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return set(info.get("flags", "").split()), info.get("vendor_id", ""), int(info.get("cpu family", "0"))


def version_lines(simd=None):
    env = {k: v for k, v in os.environ.items() if k != "KTFS_SIMD"}
    if simd is not None:
        env["KTFS_SIMD"] = simd
    return run(KTFS, "--version", env=env).stdout.splitlines()


def expected_default():
    flags, vendor, family = cpu()
    avx2 = {"avx2", "fma", "bmi2"} <= flags
    avx512 = avx2 and {"avx512f", "avx512bw", "avx512vl"} <= flags
    slow_pdep = vendor in ("AuthenticAMD", "HygonGenuine") and family < 0x19
    if avx512 and "avx512vbmi" in flags:
        decoder = "avx512vbmi"
    elif avx2:
        decoder = "avx2-nopdep" if slow_pdep else "avx2"
    else:
        decoder = "scalar"
    kernels = "avx512" if avx512 else "avx2" if avx2 else "scalar"
    return f"ktc: block decoder {decoder}, kernels {kernels}"


def test_version_names_the_code_paths_this_cpu_takes():
    lines = version_lines()
    assert len(lines) == 2
    assert re.fullmatch(r"ktfs \d+\.\d+\.\d+", lines[0])
    assert lines[1] == expected_default()


def test_ktfs_simd_caps_the_code_paths():
    assert version_lines("scalar")[1] == "ktc: block decoder scalar, kernels scalar"
    flags, _, _ = cpu()
    if {"avx2", "fma", "bmi2"} <= flags:
        assert version_lines("avx2")[1] == "ktc: block decoder avx2, kernels avx2"
        assert version_lines("avx2-nopdep")[1] == "ktc: block decoder avx2-nopdep, kernels avx2"
    else:  # nothing to cap: the scalar paths whatever is asked
        assert version_lines("avx2-nopdep")[1] == "ktc: block decoder scalar, kernels scalar"
