"""Every benchmark script answers --help."""


def test_every_benchmark_prints_its_help():
    """argparse formats help strings with %: a bare '%' in one crashes --help (mdm.py's '50%' did)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for script in sorted((root / "benchmarks").glob("*.py")):
        if script.name.startswith("_"):
            continue
        proc = subprocess.run([sys.executable, str(script), "--help"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout, f"{script.name}: {proc.stderr[-800:]}"
