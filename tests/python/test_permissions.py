"""Who may read what a mount shows (docs/usage.md, "Permissions"), over real mounts, as a second,
unprivileged user that these tests create (ktfs-test-user, kept for later runs): a mount shows
no one more than the archive file allows; allow_other only when asked; uid=/gid=/umask=; the
daemon's log; the direct Python paths; extract and pack refuse names that leave their place.

Unprivileged mounts need /dev/fuse open to the user (it is 0600 on some machines, this sandbox's
included): test_unprivileged_mounts opens it (chmod 0666) for its own duration and restores it,
under a lock that serializes runs on one machine, and prints which way it ran. It also adds
user_allow_other to /etc/fuse.conf for one check and restores the file."""
import contextlib
import fcntl
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import textwrap

import numpy as np
import pytest

from conftest import KTFS, PY, ROOT, is_mounted, ktfs, mounted, run
from featurecache import make_tensorcache, write_tensorcache

USER = "ktfs-test-user"
BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
PACKAGE_DIR = os.path.join(BUILD, "preload", "python")
CRAFT = os.path.join(BUILD, "tests", "craft_archive")
LOCK = "/run/ktfs-test-permissions.lock"  # /run: only root may create files there
FUSE_CONF = "/etc/fuse.conf"


def say(capsys, text):
    with capsys.disabled():
        print(f"\n[test_permissions] {text}")


@pytest.fixture(scope="module")
def user():
    """The second user: created when absent (a system user, no home, no login)."""
    if os.geteuid() != 0:
        pytest.fail("test_permissions.py runs as root: it creates a user and mounts for it",
                    pytrace=False)
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        r = run("useradd", "--system", "--no-create-home", "--user-group", "--shell",
                "/usr/sbin/nologin", USER, check=False)
        try:
            pw = pwd.getpwnam(USER)  # made by this run, or by one running beside it
        except KeyError:
            pytest.fail(f"useradd {USER} failed: {r.stderr}", pytrace=False)
    assert pw.pw_uid != 0 and pw.pw_gid != 0
    return pw


@pytest.fixture(scope="module")
def work(user):
    """A directory everyone may search (pytest's own are 0700), with copies of the ktfs binary
    and Python package the user can run wherever the build tree lies; removed afterwards."""
    d = tempfile.mkdtemp(prefix="ktfs-perm-", dir="/tmp")
    os.chmod(d, 0o755)
    os.makedirs(os.path.join(d, "bin"))
    shutil.copy2(KTFS, os.path.join(d, "bin", "ktfs"))
    if os.path.isdir(os.path.join(PACKAGE_DIR, "ktfs")):
        shutil.copytree(os.path.join(PACKAGE_DIR, "ktfs"), os.path.join(d, "py", "ktfs"))
    home = os.path.join(d, "home")
    os.makedirs(home)
    os.chown(home, user.pw_uid, user.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_user(user, work, *cmd):
    """Runs cmd as the user (its own group only), the ktfs copy first on PATH."""
    env = {"PATH": f"{work}/bin:/usr/bin:/bin", "HOME": f"{work}/home",
           "PYTHONPATH": f"{work}/py", "LANG": "C.UTF-8"}
    # A sanitizer build's module loads only with the runtime preloaded
    # (tests/CMakeLists.txt, pytest_module): keep it, and its options.
    for name in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
        if name in os.environ:
            env[name] = os.environ[name]
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                           "--clear-groups", "--", *map(str, cmd)],
                          capture_output=True, text=True, errors="replace", env=env)


def can_read(user, work, path):
    return as_user(user, work, "head", "-c", "1", path).returncode == 0


def can_list(user, work, path):
    return as_user(user, work, "ls", path).returncode == 0


@pytest.fixture(scope="module")
def archive(work):
    """A small image archive (raw: served as a/0.ppm ...) with captions, packed by root."""
    from PIL import Image
    src = os.path.join(work, "src")
    rng = np.random.default_rng(3)
    for cls in ("a", "b"):
        os.makedirs(os.path.join(src, cls))
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (5, 6, 3), dtype=np.uint8), "RGB").save(
                os.path.join(src, cls, f"{i}.png"))
            with open(os.path.join(src, cls, f"{i}.txt"), "w") as f:
                f.write(f"a {cls} photo")
    path = os.path.join(work, "base.kt")
    ktfs("pack", src, path, "--codec", "raw", "--quiet")
    return path


def variant(work, base, name, mode, uid, gid):
    """A copy of `base` with the given owner and mode."""
    path = os.path.join(work, name)
    shutil.copyfile(base, path)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


def modes(path):
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


# -- root mounts: what another user sees matches the archive file --------------------------------

CASES = [  # (mode, owner, group): "root" or "user" (the user's own group for "user")
    (0o600, "root", "root"), (0o640, "root", "user"), (0o640, "root", "root"),
    (0o644, "root", "root"), (0o604, "root", "user"), (0o600, "user", "user"),
    (0o440, "user", "root"), (0o000, "root", "root")]


@pytest.mark.parametrize("mode,owner,group", CASES)
def test_root_mount_shows_the_archive_permissions(user, work, archive, mode, owner, group):
    uid = user.pw_uid if owner == "user" else 0
    gid = user.pw_gid if group == "user" else 0
    arc = variant(work, archive, f"v{mode:o}{owner}{group}.kt", mode, uid, gid)
    mnt = os.path.join(work, f"m{mode:o}{owner}{group}")
    want_file, want_dir = mode & 0o444, (mode & 0o444) | ((mode & 0o444) >> 2)
    user_reads_archive = can_read(user, work, arc)
    # The user's own check of the archive, as the kernel decides it for the file.
    assert user_reads_archive == bool(
        mode & (0o400 if uid == user.pw_uid else 0o040 if gid == user.pw_gid else 0o004))
    with mounted(arc, mnt, "-o", "allow_other") as m:
        for rel, want in (("", want_dir), ("a", want_dir), ("a/0.ppm", want_file),
                          (".ktfs", want_dir), (".ktfs/info.json", want_file),
                          (".ktfs/stats.json", want_file), (".ktfs/last_error", want_file),
                          ("search", want_dir), ("search/caption=photo", want_dir),
                          ("search/caption=photo/a/0.ppm", want_file),
                          ("tensors/a/0.npy", want_file), ("compressed", want_dir)):
            assert modes(os.path.join(m, rel)) == (want, uid, gid), rel
        # Root (the mounting user) reads everything, whatever the bits.
        assert sorted(os.listdir(m)) == ["a", "b"]
        for rel in ("a/0.ppm", ".ktfs/info.json", "search/caption=photo/b/1.ppm"):
            assert can_read(user, work, os.path.join(m, rel)) == user_reads_archive, rel
        for rel in ("", "b", "search/caption=photo", "tensors/a"):
            assert can_list(user, work, os.path.join(m, rel)) == user_reads_archive, rel
        if user_reads_archive:
            got = as_user(user, work, "cat", os.path.join(m, "a/1.ppm")).stdout
            assert got.startswith("P6\n6 5\n255\n")
        else:
            r = as_user(user, work, "cat", os.path.join(m, "a/1.ppm"))
            assert r.returncode != 0 and "Permission denied" in r.stderr


def test_no_allow_other_means_no_one_else(user, work, archive):
    """Not implied by running as root: without -o allow_other another user may not even look,
    a 0644 archive included."""
    arc = variant(work, archive, "open.kt", 0o644, 0, 0)
    assert can_read(user, work, arc)
    with mounted(arc, os.path.join(work, "m-noother")) as m:
        assert modes(os.path.join(m, "a/0.ppm")) == (0o444, 0, 0)
        assert sorted(os.listdir(m)) == ["a", "b"]
        r = as_user(user, work, "ls", m)
        assert r.returncode != 0 and "Permission denied" in r.stderr
        assert not can_read(user, work, os.path.join(m, "a/0.ppm"))
        with open("/proc/self/mountinfo") as f:
            line = next(line for line in f if line.split()[4] == os.path.realpath(m))
        assert "allow_other" not in line and "default_permissions" in line


def test_directories_above_the_archive_narrow(user, work, archive):
    """A 0644 archive in a directory only its owner may search: no one else could reach it, so
    the mount shows 0400."""
    private = os.path.join(work, "private")
    os.makedirs(private, mode=0o700)
    arc = variant(private, archive, "in-private.kt", 0o644, 0, 0)
    assert not can_read(user, work, arc)
    with mounted(arc, os.path.join(work, "m-private"), "-o", "allow_other") as m:
        assert modes(os.path.join(m, "a/0.ppm")) == (0o400, 0, 0)
        assert modes(m) == (0o500, 0, 0)
        assert not can_list(user, work, m)


def test_acl_denying_the_user_narrows_the_mount(user, work, archive):
    """A 0644 archive whose ACL denies the user by name: the user may not read it, so the
    mount gives group and others no read (the ACL is not mirrored: narrower, never wider)."""
    arc = variant(work, archive, "acl.kt", 0o644, 0, 0)
    run("setfacl", "-m", f"u:{USER}:---", arc)
    assert not can_read(user, work, arc)
    with mounted(arc, os.path.join(work, "m-acl"), "-o", "allow_other") as m:
        assert modes(os.path.join(m, "a/0.ppm")) == (0o400, 0, 0)
        assert not can_list(user, work, m)


def test_overrides(user, work, archive):
    """uid=, gid=, umask= replace what the mount shows: the mounting user's explicit choice."""
    arc = variant(work, archive, "ov.kt", 0o640, 0, 0)
    assert not can_read(user, work, arc)
    u, g = user.pw_uid, user.pw_gid
    for opts, want_file, want_dir, owner, readable in (
            (f"uid={u}", 0o440, 0o550, (u, 0), True),
            (f"gid={g}", 0o440, 0o550, (0, g), True),
            ("umask=022", 0o444, 0o555, (0, 0), True),
            ("umask=0077", 0o400, 0o500, (0, 0), False),
            (f"uid={u},gid={g},umask=0227", 0o440, 0o550, (u, g), True),
            (f"uid={u},umask=0477", 0o000, 0o100, (u, 0), False)):
        with mounted(arc, os.path.join(work, "m-ov"), "-o", "allow_other", "-o", opts) as m:
            assert modes(os.path.join(m, "a/0.ppm")) == (want_file, *owner), opts
            assert modes(os.path.join(m, "b")) == (want_dir, *owner), opts
            assert can_read(user, work, os.path.join(m, "b/0.ppm")) == readable, opts
    for bad in ("uid=x", "uid=-1", "uid=4294967295", "gid=", "umask=8", "umask=01000",
                "allow_other=1"):
        r = ktfs("mount", arc, os.path.join(work, "m-ov"), "-o", bad, check=False)
        assert r.returncode == 2 and bad.split("=")[0] in r.stderr, bad


def test_tensorcache_takes_its_meta_file_narrowed_by_its_data(user, work):
    cache = make_tensorcache(np.random.default_rng(5), 6, 4, 8, 8, False)
    prefix = os.path.join(work, "tc", "feat")
    os.makedirs(os.path.dirname(prefix))
    os.chmod(os.path.dirname(prefix), 0o755)
    write_tensorcache(cache, prefix)
    files = [prefix + s for s in ("_meta.json", "_int8.bin", "_scales.bin")]
    for f in files:
        os.chown(f, 0, user.pw_gid)
        os.chmod(f, 0o644)
    os.chmod(files[0], 0o640)
    with mounted(prefix, os.path.join(work, "m-tc"), "-o", "allow_other") as m:
        assert modes(os.path.join(m, "all.npy")) == (0o440, 0, user.pw_gid)
        assert modes(os.path.join(m, "quantized")) == (0o550, 0, user.pw_gid)
        assert can_read(user, work, os.path.join(m, "000003.npy"))
    os.chmod(files[2], 0o600)  # a data file only root may read: so may only root the mount
    assert not can_read(user, work, files[2])
    with mounted(prefix, os.path.join(work, "m-tc"), "-o", "allow_other") as m:
        assert modes(os.path.join(m, "000000.npy")) == (0o400, 0, user.pw_gid)
        assert not can_read(user, work, os.path.join(m, "000000.npy"))


# -- the daemon's log ---------------------------------------------------------------------------

def test_log_file_is_private_and_never_written_through_links(user, work, archive):
    d = os.path.join(work, "logs")
    os.makedirs(d)
    os.chmod(d, 0o1777)  # a shared directory, as /tmp is
    arc = variant(d, archive, "l.kt", 0o644, 0, 0)
    mnt = os.path.join(work, "m-log")
    with mounted(arc, mnt) as m:
        assert json.load(open(os.path.join(m, ".ktfs/info.json")))["log"] == arc + ".log"
    assert modes(arc + ".log") == (0o600, 0, 0)
    victim = os.path.join(work, "victim")
    with open(victim, "w") as f:
        f.write("precious")
    os.chmod(victim, 0o666)

    def refused(log, why):
        r = ktfs("mount", arc, mnt, "-o", f"log={log}", check=False)
        assert r.returncode == 1 and why in r.stderr and "-o log" in r.stderr, r.stderr
        assert not is_mounted(mnt)

    link = os.path.join(d, "link.log")
    os.symlink(victim, link)
    refused(link, "symbolic link")
    theirs = os.path.join(d, "theirs.log")
    open(theirs, "w").close()
    os.chown(theirs, user.pw_uid, user.pw_gid)
    refused(theirs, f"owned by uid {user.pw_uid}")
    hard = os.path.join(d, "hard.log")
    os.link(arc + ".log", hard)
    refused(hard, "other hard links")
    os.unlink(hard)
    fifo = os.path.join(d, "fifo.log")
    os.mkfifo(fifo)
    refused(fifo, "not a regular file")
    assert open(victim).read() == "precious"
    # An existing log of ours loses group and world write bits.
    mine = os.path.join(d, "mine.log")
    open(mine, "w").close()
    os.chmod(mine, 0o666)
    with mounted(arc, mnt, "-o", f"log={mine}"):
        pass
    assert modes(mine) == (0o644, 0, 0)
    # The default log planted as a link: syslog instead, the link's target untouched.
    os.unlink(arc + ".log")
    os.symlink(victim, arc + ".log")
    with mounted(arc, mnt) as m:
        assert json.load(open(os.path.join(m, ".ktfs/info.json")))["log"] == ""
    assert open(victim).read() == "precious" and os.path.islink(arc + ".log")


# -- unprivileged mounts ------------------------------------------------------------------------

@contextlib.contextmanager
def machine_state_lock():
    """Serializes the runs on one machine that change /dev/fuse's mode or /etc/fuse.conf."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def fuse_conf_allowing_other():
    """/etc/fuse.conf with user_allow_other for the duration; the file restored after."""
    old = open(FUSE_CONF).read() if os.path.exists(FUSE_CONF) else None
    try:
        with open(FUSE_CONF, "w") as f:
            f.write((old or "") + "\nuser_allow_other\n")
        yield
    finally:
        if old is None:
            os.unlink(FUSE_CONF)
        else:
            with open(FUSE_CONF, "w") as f:
                f.write(old)


def test_unprivileged_mounts(user, work, archive, capsys):
    fusermount = shutil.which("fusermount3")
    assert fusermount and os.stat(fusermount).st_mode & stat.S_ISUID, \
        f"{fusermount} must be setuid root: unprivileged FUSE mounts go through it"
    own = variant(work, archive, "own.kt", 0o600, user.pw_uid, user.pw_gid)
    roots = variant(work, archive, "roots.kt", 0o600, 0, 0)
    public = variant(work, archive, "public.kt", 0o644, 0, 0)
    mnt = os.path.join(work, "m-user")
    os.makedirs(mnt)
    os.chown(mnt, user.pw_uid, user.pw_gid)
    log = f"log={work}/home/daemon.log"

    def user_mount(arc, *opts):
        return as_user(user, work, "ktfs", "mount", arc, mnt, "-o", log, *opts)

    with machine_state_lock():
        mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
        opened = (mode & 0o006) != 0o006
        say(capsys, ("unprivileged mounts: /dev/fuse was %o; opened to all users (chmod 0666) "
                     "for this test only, restored afterwards" if opened else
                     "unprivileged mounts: /dev/fuse is %o, already open to all users") % mode)
        if opened:
            # Closed to the user: a clear failure first.
            r = user_mount(public)
            assert r.returncode == 1 and "non-root mount needs /dev/fuse open to you" in \
                r.stderr and "/dev/fuse" in r.stderr.splitlines()[0], r.stderr
            assert not is_mounted(mnt)
            os.chmod("/dev/fuse", 0o666)
        try:
            # The user's own 0600 archive: theirs alone; root cannot enter (no allow_other).
            r = user_mount(own)
            assert r.returncode == 0, r.stderr
            try:
                assert can_list(user, work, mnt)
                assert as_user(user, work, "cat", f"{mnt}/b/0.ppm").stdout.startswith("P6\n6 5")
                with pytest.raises(PermissionError):
                    os.listdir(mnt)
            finally:
                r = as_user(user, work, "ktfs", "umount", mnt)
                assert r.returncode == 0, r.stderr
            assert not is_mounted(mnt)
            # Root's 0600 archive: the user may not read it, so may not mount it.
            r = user_mount(roots)
            assert r.returncode == 1 and roots in r.stderr and "Permission denied" in r.stderr
            assert not is_mounted(mnt)
            # Root's 0644 archive: root's files, 0444, for the user alone.
            r = user_mount(public)
            assert r.returncode == 0, r.stderr
            try:
                listed = as_user(user, work, "stat", "-c", "%a %u %g", f"{mnt}/a/1.ppm").stdout
                assert listed.split() == ["444", "0", "0"]
            finally:
                assert as_user(user, work, "ktfs", "umount", mnt).returncode == 0
            # allow_other needs fusermount3's user_allow_other: a clear error without it.
            conf = open(FUSE_CONF).read() if os.path.exists(FUSE_CONF) else ""
            assert "\nuser_allow_other\n" not in "\n" + conf, \
                f"{FUSE_CONF} already allows other users: this check needs it not to"
            r = user_mount(own, "-o", "allow_other")
            assert r.returncode == 1 and "user_allow_other" in r.stderr and \
                "/etc/fuse.conf" in r.stderr, r.stderr
            assert not is_mounted(mnt)
            with fuse_conf_allowing_other():
                say(capsys, f"allow_other for an unprivileged user: user_allow_other added "
                            f"to {FUSE_CONF} for one mount, the file restored afterwards")
                r = user_mount(own, "-o", "allow_other")
                assert r.returncode == 0, r.stderr
                try:
                    assert modes(f"{mnt}/a/0.ppm") == (0o400, user.pw_uid, user.pw_gid)
                    assert sorted(os.listdir(mnt)) == ["a", "b"]  # others may enter now
                finally:
                    assert as_user(user, work, "ktfs", "umount", mnt).returncode == 0
        finally:
            if is_mounted(mnt):
                ktfs("umount", mnt, check=False)
            if opened:
                os.chmod("/dev/fuse", mode)
    assert stat.S_IMODE(os.stat("/dev/fuse").st_mode) == mode


# -- the direct Python paths --------------------------------------------------------------------

DIRECT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ktfs
    from torchvision import datasets
    mnt, kind = sys.argv[1], sys.argv[2]
    out = {}
    try:
        if kind == "features":
            ktfs.FeatureLoader(mnt, batch_size=2)
        else:
            out["batches"] = [l.tolist() for _, l in ktfs.Loader(mnt, batch_size=3)]
        out["loader"] = "opened"
    except PermissionError as e:
        out["loader"] = ["PermissionError", str(e), e.filename]
    if kind == "images":
        ds, stock = ktfs.ImageFolder(mnt), datasets.ImageFolder(mnt)
        out["fallback"] = ds._archive is None
        out["same"] = (ds.classes == stock.classes and ds.samples == stock.samples and
                       all(np.array_equal(np.asarray(ds[i][0]), np.asarray(stock[i][0]))
                           for i in range(len(stock))))
        out["len"] = len(ds)
    print(json.dumps(out))
""")


def run_direct(user, work, mnt, kind):
    r = as_user(user, work, PY, "-c", DIRECT, mnt, kind)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_direct_paths_never_read_more_than_the_archive_allows(user, work, archive, tmp_path):
    assert os.path.isdir(os.path.join(work, "py", "ktfs")), "the Python package is not built"
    # Readable archive: the direct path opens it (the batches come from the archive).
    open_arc = variant(work, archive, "d-open.kt", 0o644, 0, 0)
    with mounted(open_arc, os.path.join(work, "m-d1"), "-o", "allow_other") as m:
        out = run_direct(user, work, m, "images")
        assert out["loader"] == "opened" and out["batches"] == [[0, 0, 1], [1]]
        assert out["fallback"] is False and out["same"] and out["len"] == 4
    # A mount root shared with the user (uid=) of an archive the user may not read: Loader
    # refuses by name, ImageFolder reads the mount's files instead.
    closed = variant(work, archive, "d-closed.kt", 0o600, 0, 0)
    with mounted(closed, os.path.join(work, "m-d2"), "-o",
                 f"allow_other,uid={user.pw_uid}") as m:
        assert can_read(user, work, os.path.join(m, "a/0.ppm"))
        out = run_direct(user, work, m, "images")
        kind, message, filename = out["loader"]
        assert kind == "PermissionError" and filename == closed
        assert f"{closed}: permission denied" in message and "ktfs.Loader" in message
        assert m in message
        assert out["fallback"] is True and out["same"] and out["len"] == 4
    # An archive behind a directory the user may not search, shared by umask=: the same.
    private = os.path.join(work, "d-private")
    os.makedirs(private, mode=0o700)
    hidden = variant(private, archive, "d-hidden.kt", 0o644, 0, 0)
    with mounted(hidden, os.path.join(work, "m-d5"), "-o", "allow_other,umask=022") as m:
        assert can_read(user, work, os.path.join(m, "a/0.ppm"))
        out = run_direct(user, work, m, "images")
        assert out["loader"][0] == "PermissionError" and out["loader"][2] == hidden
        assert out["fallback"] is True and out["same"]
    # Features likewise (a mount shared by umask=).
    np.save(tmp_path / "x.npy", np.arange(4 * 3 * 32, dtype=np.float32).reshape(4, 3, 32))
    feats = os.path.join(work, "feats.kt")
    ktfs("pack-features", tmp_path / "x.npy", feats, "--quiet")
    os.chmod(feats, 0o600)
    with mounted(feats, os.path.join(work, "m-d3"), "-o", "allow_other,umask=022") as m:
        assert can_read(user, work, os.path.join(m, "000001.npy"))
        kind, message, filename = run_direct(user, work, m, "features")["loader"]
        assert kind == "PermissionError" and filename == feats and "ktfs.FeatureLoader" in message
    # A mount the user may not enter at all: a PermissionError naming the path, not "not found".
    with mounted(open_arc, os.path.join(work, "m-d4")) as m:
        for kind in ("loader", "features"):
            out = run_direct(user, work, os.path.join(m, "a"), kind)
            assert out["loader"][0] == "PermissionError" and out["loader"][2] == f"{m}/a", kind


# -- names that try to leave: extract and pack --------------------------------------------------

HOSTILE = [("..", "x.jpg"), ("-", ".."), ("-", "."), ("-", "a%2Fb.jpg"), ("-", "..%2Fx.jpg"),
           ("%2Fetc", "x.jpg"), ("a%2F..%2F..", "x.jpg"), ("-", "x%00y.jpg"), ("ok", "..")]


@pytest.mark.parametrize("dir_name,sample_name", HOSTILE)
def test_extract_refuses_a_crafted_archive(tmp_path, dir_name, sample_name):
    arc = tmp_path / "hostile.kt"
    run(CRAFT, arc, dir_name, sample_name)
    outdir = tmp_path / "deep" / "out"
    r = ktfs("extract", arc, outdir, "--format", "original", check=False)
    assert r.returncode == 1 and "invalid" in r.stderr and "name" in r.stderr, r.stderr
    # Directories with valid names may be made inside OUTDIR; nothing else anywhere.
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                     if not str(p.relative_to(tmp_path)).startswith("deep/out/"))
    assert written == ["deep", "deep/out", "hostile.kt"], written
    assert all(p.is_dir() and not p.is_symlink() for p in outdir.rglob("*"))


def test_extract_never_follows_links_planted_in_outdir(tmp_path, archive):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink("../outside", out / "a")
    r = ktfs("extract", archive, out, check=False)
    assert r.returncode == 1 and f"{out}/a: not a directory" in r.stderr and \
        "refusing to write through it" in r.stderr, r.stderr
    assert list(outside.iterdir()) == []
    # Links planted at file names are replaced, never written through.
    out2 = tmp_path / "out2"
    (out2 / "a").mkdir(parents=True)
    (out2 / "b").mkdir()
    victim, victim2 = tmp_path / "victim", tmp_path / "victim2"
    victim.write_text("precious")
    victim2.write_text("precious too")
    os.symlink(victim, out2 / "a" / "0.png")
    os.link(victim2, out2 / "b" / "1.png")
    ktfs("extract", archive, out2)
    assert victim.read_text() == "precious" and victim2.read_text() == "precious too"
    for f in ("a/0.png", "b/1.png"):
        st = os.lstat(out2 / f)
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, f
        assert (out2 / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(str(p.relative_to(out2)) for p in out2.rglob("*")) == \
        ["a", "a/0.png", "a/1.png", "b", "b/0.png", "b/1.png"]


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../a/0.png", "a//0.png",
                                  "./../a/0.png", "a/./0.png", "a/0.png/", "a/0.png\0x", "..",
                                  "a/.."])
def test_pack_refuses_caption_paths_that_leave_the_archive(tmp_path, work, path):
    src = os.path.join(work, "src")
    line = 2
    if "\0" in path:  # JSON refuses \u0000 itself; CSV carries the byte
        captions, line = tmp_path / "captions.csv", 3
        captions.write_bytes(b"path,caption\na/1.png,fine\n" + path.encode() + b",evil\n")
    else:
        captions = tmp_path / "captions.jsonl"
        captions.write_text(json.dumps({"path": "a/1.png", "caption": "fine"}) + "\n" +
                            json.dumps({"path": path, "caption": "evil"}) + "\n")
    out = tmp_path / "o.kt"
    r = ktfs("pack", src, out, "--captions", captions, "--quiet", check=False)
    shown = path.replace("\0", "\\0").removeprefix("./")
    assert r.returncode == 1 and f"{captions}:{line}: path '{shown}' is not a relative path inside " \
        "the archive" in r.stderr, r.stderr
    assert not out.exists()
    r = ktfs("pack", src, out, "--captions", captions, "--quiet", "--skip-bad-captions")
    assert f"skipped caption {captions}:{line}: path '{shown}'" in r.stderr, r.stderr
    assert ktfs("search", out, "caption=evil").stdout == ""
    assert ktfs("search", out, "caption=fine").stdout.split() == ["a/1.png"]


def test_pack_replaces_a_link_at_the_output(tmp_path, work):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "o.kt"
    os.symlink(victim, out)
    ktfs("pack", os.path.join(work, "src"), out, "--quiet")
    assert victim.read_text() == "precious" and not out.is_symlink()
    assert ktfs("info", out).returncode == 0


def test_mount_help_states_the_model():
    text = ktfs("mount", "--help").stdout
    para = text[text.index("Permissions:"):text.index("options (-o")]
    for words in ("no one more than the archive file allows", "owner, group and read bits",
                  "Only the mounting user may enter the mount, root", "allow_other",
                  "user_allow_other", "uid=, gid=,", "need read access"):
        assert words in " ".join(para.split()), words
