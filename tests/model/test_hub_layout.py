"""Models in the Hugging Face Hub's cache layout: a cached Hub id and a ``models--org--name`` folder load offline."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from grpokit.model import hub
from grpokit.model.loading import ModelLoadError, load_model, model_name_problem, resolve_model_name
from grpokit.testing import save_tiny_model, tiny_model_and_tokenizer


def add_snapshot(cache: Path, hub_id: str, commit: str, seed: int, ref: bool = True) -> Path:
    """Write a tiny model as huggingface_hub's snapshot_download leaves it: blobs + symlinked snapshot + refs/main."""
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    snap = Path(save_tiny_model(repo / "snapshots" / commit, seed=seed))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for f in sorted(snap.iterdir()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        if not blob.exists():
            f.rename(blob)
        else:
            f.unlink()
        f.symlink_to(os.path.relpath(blob, snap))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Hub cache that HF_HUB_CACHE points at; downloads stay off."""
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def same_weights(model, seed: int) -> bool:
    reference, _ = tiny_model_and_tokenizer(seed=seed)
    return all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))


def test_a_cached_hub_id_loads_offline_from_its_refs_main_snapshot(cache):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    snap = add_snapshot(cache, "org/tiny", "bbb222", seed=2)  # refs/main now names the second commit
    assert resolve_model_name("org/tiny") == str(snap)
    assert model_name_problem("org/tiny") is None
    model, tokenizer = load_model("org/tiny")
    assert same_weights(model, seed=2) and not same_weights(model, seed=1)
    assert tokenizer.padding_side == "left"


def test_a_hub_cache_repo_folder_loads_its_refs_main_snapshot(cache):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    add_snapshot(cache, "org/tiny", "bbb222", seed=2)
    (cache / "models--org--tiny" / "refs" / "main").write_text("aaa111\n")  # refs/main back on the first
    model, _ = load_model(cache / "models--org--tiny")
    assert same_weights(model, seed=1)


def test_a_repo_downloaded_by_commit_has_no_refs_main_and_its_one_snapshot_loads(cache):
    snap = add_snapshot(cache, "org/tiny", "ccc333", seed=4, ref=False)
    assert resolve_model_name("org/tiny") == str(snap)
    add_snapshot(cache, "org/tiny", "ddd444", seed=5, ref=False)
    problem = model_name_problem("org/tiny")
    assert problem == (f"'{cache / 'models--org--tiny'}' has 2 snapshots and no refs/main to choose one: give the "
                       f"snapshot folder itself, e.g. {cache / 'models--org--tiny' / 'snapshots' / 'ddd444'}")
    assert resolve_model_name("org/tiny") is None


def test_refs_main_naming_a_missing_snapshot_is_refused(cache):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    (cache / "models--org--tiny" / "refs" / "main").write_text("fff999")
    with pytest.raises(ModelLoadError, match="refs/main names snapshot fff999, which is not in"):
        load_model("org/tiny")


def test_a_hub_id_not_in_the_cache_says_where_it_looked_and_how_to_fix(cache):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    problem = model_name_problem("HuggingFaceTB/SmolLM2-135M-Instruct")
    repo = cache / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"model 'HuggingFaceTB/SmolLM2-135M-Instruct' is not in the Hugging Face cache (no {repo};")
    assert "`hf download HuggingFaceTB/SmolLM2-135M-Instruct`" in problem and "or give a local model folder" in problem
    assert resolve_model_name("HuggingFaceTB/SmolLM2-135M-Instruct") is None
    with pytest.raises(ModelLoadError) as info:
        load_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert str(info.value) == problem


def test_a_whole_cache_folder_is_refused_naming_its_models(cache):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    assert model_name_problem(cache) == (
        f"'{cache}' is a Hugging Face cache folder holding org/tiny: give one model, e.g. "
        f"{cache / 'models--org--tiny'}, or set HF_HUB_CACHE={cache} and give its id 'org/tiny'"
    )


def test_the_cache_folder_follows_huggingface_hub_env_precedence(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert hub.hub_cache_dir() == Path.home() / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "old"))
    assert hub.hub_cache_dir() == tmp_path / "old"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "new"))
    assert hub.hub_cache_dir() == tmp_path / "new"


def test_hf_home_hub_is_searched_when_hf_hub_cache_is_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snap = add_snapshot(tmp_path / "hub", "org/tiny", "aaa111", seed=1)
    assert resolve_model_name("org/tiny") == str(snap)


def test_a_local_folder_wins_over_a_hub_id_of_the_same_spelling(cache, tmp_path, monkeypatch):
    add_snapshot(cache, "org/tiny", "aaa111", seed=1)
    save_tiny_model(tmp_path / "work" / "org" / "tiny", seed=6)
    monkeypatch.chdir(tmp_path / "work")
    assert resolve_model_name("org/tiny") == "org/tiny"
    assert same_weights(load_model("org/tiny")[0], seed=6)


def test_other_names_keep_their_forms_and_messages(cache, tmp_path):
    assert resolve_model_name("smollm2-135m-instruct") == "smollm2-135m-instruct"
    run = tmp_path / "runs" / "demo"
    (run / "checkpoints").mkdir(parents=True)
    assert resolve_model_name(run) == str(run) and model_name_problem(run) is None  # model_source resolves it later
    assert model_name_problem("gpt-5").startswith("unknown model 'gpt-5'; use an embedded model (smollm2-135m-instruct)")
    assert model_name_problem(str(tmp_path / "nope")).startswith(f"model path '{tmp_path / 'nope'}' does not exist")
    assert model_name_problem("weights.gguf").startswith("model path 'weights.gguf' does not exist")
    assert [hub.is_hub_id(t) for t in ("org/name", "gpt2", "a/b/c", "./x", "m.gguf", "org--x/y")] == [
        True, True, False, False, False, False]
