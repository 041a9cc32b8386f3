"""logging.report_to: validation at load, the tracker backends of RunLogger, trackio offline."""

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from grpokit.config import ConfigError, load_config
from grpokit.trainer import metrics as metrics_mod
from grpokit.trainer.metrics import RunLogger


def test_unknown_tracker_is_refused_at_load_listing_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["logging.report_to=[tensorboard, mlflow]"])
    assert str(info.value) == (
        "logging.report_to item 'mlflow' is not allowed; choose one of: none, tensorboard, trackio, wandb"
    )
    assert load_config().logging.report_to == []  # default: metrics.jsonl only


def test_none_alone_is_no_tracker_and_cannot_be_combined():
    assert metrics_mod.report_backends(["none"]) == [] and metrics_mod.report_backends([]) == []
    with pytest.raises(metrics_mod.ReportToError, match="'none' cannot be combined with a tracker"):
        metrics_mod.report_backends(["none", "trackio"])


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: module != "wandb")
    with pytest.raises(metrics_mod.ReportToError) as info:
        metrics_mod.report_backends(["trackio", "wandb"])
    assert str(info.value) == (
        "logging.report_to: 'wandb' needs the wandb package, which is not installed: "
        "pip install 'grpokit[tracking]' (or drop wandb from logging.report_to)"
    )


def test_tensorboard_flag_is_an_alias(monkeypatch):
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: True)
    assert metrics_mod.report_backends([], tensorboard=True) == ["tensorboard"]
    assert metrics_mod.report_backends(["tensorboard", "trackio"], tensorboard=True) == ["tensorboard", "trackio"]


def test_cli_refuses_a_missing_tracker_before_loading_anything(monkeypatch, capsys):
    from grpokit.cli import main

    monkeypatch.setattr(metrics_mod, "_installed", lambda module: False)
    # the model does not exist: the tracker error comes first, so nothing was loaded
    assert main(["train", "--set", "logging.report_to=[trackio]", "--set", "model.name=/no/such/model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("grpokit: error: logging.report_to: 'trackio' needs the trackio package, which is not installed: "
                   "pip install 'grpokit[tracking]' (or drop trackio from logging.report_to)")


def _fake_tensorboard(monkeypatch, scalars):
    class SummaryWriter:
        def __init__(self, log_dir):
            scalars.append(("dir", log_dir))

        def add_scalar(self, key, value, step):
            scalars.append((key, value, step))

        def close(self):
            scalars.append(("closed",))

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=SummaryWriter))
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: True)


def test_tensorboard_backend_gets_steps_and_evals(tmp_path, monkeypatch):
    scalars = []
    _fake_tensorboard(monkeypatch, scalars)
    logger = RunLogger(tmp_path, report_to=("tensorboard",))
    logger.log_metrics(3, {"reward/mean": 0.5, "reward/x/mean": float("nan")})
    logger.log_eval(3, "during", {"accuracy": 0.25, "n": 4})
    logger.close()
    assert scalars == [
        ("dir", str(tmp_path / "tensorboard")),
        ("reward/mean", 0.5, 3),  # NaN ("not scored") stays in metrics.jsonl only
        ("eval/accuracy", 0.25, 3), ("eval/n", 4.0, 3),
        ("closed",),
    ]
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["step"] == 3


def test_wandb_backend_writes_into_the_run_folder(tmp_path, monkeypatch):
    calls = []

    class Run:
        def log(self, metrics, step):
            calls.append(("log", metrics, step))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs))
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.setattr(metrics_mod, "_installed", lambda module: True)
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "my-run"
    logger = RunLogger(run_dir, report_to=("wandb",), config={"train": {"steps": 2}})
    logger.log_metrics(1, {"loss": 0.5})
    logger.close()
    assert calls == [
        ("init", {"project": "grpokit", "name": "my-run", "dir": str(run_dir), "config": {"train": {"steps": 2}}}),
        ("log", {"loss": 0.5}, 1),
        ("finish",),
    ]


def test_real_wandb_offline_run(tmp_path):
    pytest.importorskip("wandb")  # not in the dev extra: runs where grpokit[tracking] is installed
    script = f"""
        from pathlib import Path
        from grpokit.trainer.metrics import RunLogger
        logger = RunLogger(Path({str(tmp_path / 'run')!r}), report_to=("wandb",))
        logger.log_metrics(1, {{"loss": 0.5}})
        logger.close()
    """
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, env=env, timeout=120)
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))


def test_trackio_logs_locally_into_the_run_folder_and_reads_back(tmp_path):
    pytest.importorskip("trackio")
    # trackio fixes its database folder when imported, so the run gets a fresh interpreter
    script = f"""
        import json
        from pathlib import Path
        from grpokit.config import load_config
        from grpokit.trainer.metrics import RunLogger
        cfg = load_config(overrides=["logging.report_to=[trackio]"])
        logger = RunLogger.for_run(Path({str(tmp_path / 'run')!r}), cfg)
        logger.log_metrics(1, {{"reward/mean": 0.25, "reward/x/mean": float("nan")}})
        logger.log_metrics(2, {{"reward/mean": 0.75}})
        logger.log_eval(2, "during", {{"accuracy": 0.5, "n": 4}})
        logger.close()
        from trackio.sqlite_storage import SQLiteStorage
        logs = SQLiteStorage.get_logs("grpokit", "run")
        print(json.dumps([{{k: v for k, v in r.items() if k != "timestamp"}} for r in logs]))
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, env=env, timeout=120,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == [  # stdout holds only the script's line: trackio's prints went to the log
        {"reward/mean": 0.25, "step": 1},
        {"reward/mean": 0.75, "step": 2},
        {"eval/accuracy": 0.5, "eval/n": 4.0, "step": 2},
    ]
    assert (tmp_path / "run" / "trackio" / "grpokit.db").is_file()


def test_silent_logger_of_other_ranks_has_no_trackers(tmp_path):
    from grpokit.distributed.ddp import SilentLogger

    logger = SilentLogger()
    logger.log_metrics(1, {"loss": 1.0})
    logger.log_eval(1, "during", {"accuracy": 1.0})
    logger.close()
