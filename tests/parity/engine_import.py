"""How the parity fixtures load the engines' modules without importing their packages whole (which needs a GPU
stack): a module from its file under its package name, and empty packages for the names above it."""
import importlib.util
import sys
import types


def from_file(name, path):
    """The module at `path`, registered as `name` (so that its own relative imports of siblings find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def empty_packages(names, replace=True):
    """An empty package for each dotted name (replace=False keeps one already loaded)."""
    for pkg in names:
        m = types.ModuleType(pkg)
        m.__path__ = []
        if replace:
            sys.modules[pkg] = m
        else:
            sys.modules.setdefault(pkg, m)
