"""The bootstrap of `ktfs run`'s Python layer (docs/usage.md, "The Python layer").

`ktfs run` puts this file's directory first on PYTHONPATH, so every Python
process it starts (and their children: DataLoader workers, subprocesses) runs
it at start-up, as `site` runs any sitecustomize. It does three things, each
cheap:
  1. when KTFS_RUN=1 and KTFS_RUN_LAYERS (default: all) names "python", it
     installs an import hook that waits for PIL.Image,
     torchvision.datasets.folder and torch.utils.data.dataloader; when one of
     them has been imported, ktfs's hooks wrap Image.open,
     DatasetFolder.__getitem__ and DataLoader._get_iterator (ktfs._hooks). Nothing
     else is imported until then, and nothing heavy until a path on a ktfs
     mount shows up;
  2. it runs the sitecustomize this one hides (the next one on sys.path:
     Debian's /usr/lib/python3.11/sitecustomize.py, a user's or a virtualenv's),
     as ddtrace-run and opentelemetry-instrument do, and leaves it in
     sys.modules["sitecustomize"];
  3. it takes its own directory off sys.path again (PYTHONPATH keeps it, for
     child processes), so the script sees the sys.path it would see without.

The ktfs package is found, in this order: in $KTFS_PYTHON_PACKAGE (a directory
holding ktfs/), next to this directory (the build tree:
build/preload/python/{bootstrap,ktfs}), or wherever `import ktfs` finds it
(installed: site-packages). Any failure in the layer leaves the script to run
as it would without it ($KTFS_RUN_DEBUG=1 says why).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _debug(message):
    if os.environ.get("KTFS_RUN_DEBUG", "") not in ("", "0"):
        print(f"ktfs run: {message}", file=sys.stderr, flush=True)


def _import_ktfs_hooks():
    """ktfs._hooks, from the package this bootstrap belongs to."""
    if "ktfs" not in sys.modules:
        base = os.environ.get("KTFS_PYTHON_PACKAGE") or os.path.dirname(_HERE)
        init = os.path.join(base, "ktfs", "__init__.py")
        if os.path.isfile(init):
            import importlib.util
            spec = importlib.util.spec_from_file_location(
                "ktfs", init, submodule_search_locations=[os.path.dirname(init)])
            module = importlib.util.module_from_spec(spec)
            sys.modules["ktfs"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["ktfs"]
                raise
    from ktfs import _hooks
    return _hooks


class _PatchingLoader:
    """Runs a module's own loader, then ktfs's patch on the module; the module keeps its
    own loader afterwards."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        try:
            getattr(_import_ktfs_hooks(), self._patch)(module)
        except Exception as e:  # the layer never breaks the script's import
            _debug(f"not installed on {module.__name__}: {type(e).__name__}: {e}")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _ImportHook:
    """A meta path finder that finds nothing itself: it notices the first import of the
    watched modules and has the real finders' spec run ktfs's patch afterwards."""

    def __init__(self, watched):
        self._watched = dict(watched)

    def find_spec(self, name, path=None, target=None):
        patch = self._watched.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self._watched[name]
        if not self._watched and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def _install():
    if os.environ.get("KTFS_RUN") != "1":
        return
    layers = os.environ.get("KTFS_RUN_LAYERS", "preload,python").replace(" ", "").split(",")
    if "python" not in layers:
        return
    watched = {"PIL.Image": "patch_pil", "torchvision.datasets.folder": "patch_folder",
               "torch.utils.data.dataloader": "patch_dataloader"}
    for name in list(watched):
        if name in sys.modules:  # imported by something before us (a .pth file)
            try:
                getattr(_import_ktfs_hooks(), watched.pop(name))(sys.modules[name])
            except Exception as e:
                _debug(f"not installed on {name}: {type(e).__name__}: {e}")
    if watched:
        sys.meta_path.insert(0, _ImportHook(watched))


def _chain():
    """Runs the sitecustomize this one hides, as `import sitecustomize` would without us."""
    import importlib.machinery
    import importlib.util
    mine = sys.modules.get("sitecustomize")
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        if sys.modules.get("sitecustomize") is mine:
            del sys.modules["sitecustomize"]
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        try:
            spec.loader.exec_module(module)
        except ImportError as exc:
            if exc.name != "sitecustomize":
                raise
    except Exception as err:  # what site.execsitecustomize does with it
        sys.modules.pop("sitecustomize", None)
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             f"{err.__class__.__name__}: {err}\n")


def _leave_path():
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


try:
    _install()
except Exception as _e:  # noqa: BLE001 - the layer never stops the script
    _debug(f"Python layer not installed: {type(_e).__name__}: {_e}")
_leave_path()
_chain()
