"""Built-in plugins register from one list (``grpokit.builtins.BUILTIN_MODULES``), loaded by a registry's first lookup.

Each check runs in a fresh interpreter: the test session has long since imported everything.
"""

import json
import subprocess
import sys
import textwrap


def run_fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_registry_module_imports_no_plugin_and_its_first_lookup_loads_them_all():
    run_fresh("""
        import sys
        from grpokit.algos.losses import POLICY_LOSSES
        from grpokit import builtins
        assert not builtins._loaded
        assert "grpokit.algos.disco" not in sys.modules  # no bottom-of-file import of its variants
        assert "disco" in POLICY_LOSSES  # the first lookup loads the list
        assert builtins._loaded and all(m in sys.modules for m in builtins.BUILTIN_MODULES)
    """)


def test_every_registration_is_reached_from_the_list():
    """What the registries hold after the list loads equals what they hold after importing every grpokit module.

    A plugin module left out of BUILTIN_MODULES registers only when something happens to import
    it: its names would be missing from ``grpokit list`` and config validation.
    """
    snapshot = """
        import json
        from grpokit.families import FAMILIES
        from grpokit.registries import AXES, get_registry
        print(json.dumps({**{axis: get_registry(axis).names() for axis in AXES}, "family": FAMILIES.names()}))
    """
    from_list = json.loads(run_fresh(snapshot))
    from_everything = json.loads(run_fresh("""
        import importlib, pkgutil, grpokit
        for module in pkgutil.walk_packages(grpokit.__path__, "grpokit."):
            importlib.import_module(module.name)
    """ + snapshot))
    for axis, names in from_everything.items():
        assert from_list[axis] == names, f"{axis}: {sorted(set(names) - set(from_list[axis]))} register only when some other module is imported: list their module in grpokit.builtins.BUILTIN_MODULES"
    assert len(from_list["loss"]) >= 11 and "disco" in from_list["loss"] and "text_to_sql" in from_list["task"]
