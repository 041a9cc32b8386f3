"""SHARDCAST without Ray: shards, checksums, refusing a corrupted version."""

import torch

from grpokit.distributed.shardcast import (
    MiB, Manifest, ShardChecksumError, ShardInfo, WeightReceiver, build_manifest, fetch_state, split_state,
    trainable_state,
)
from grpokit.testing import tiny_model_and_tokenizer


def test_split_state_groups_tensors_by_size():
    # 4 float32 tensors of 0.25 MiB each (65536 * 4 bytes); shards of 0.6 MiB hold 2 of them
    state = {f"w{i}": torch.full((65536,), float(i)) for i in range(4)}
    shards = split_state(state, shard_mb=0.6)
    assert [list(s) for s in shards] == [["w0", "w1"], ["w2", "w3"]]
    # a tensor larger than a shard is a shard of its own, never split
    big = split_state({"a": torch.zeros(1), "b": torch.zeros(MiB), "c": torch.zeros(1)}, shard_mb=1.0)
    assert [list(s) for s in big] == [["a"], ["b"], ["c"]]


def test_manifest_round_trip_is_bitwise_and_checksummed():
    model, _ = tiny_model_and_tokenizer(seed=1)
    state, adapter_only = trainable_state(model)
    manifest = build_manifest(state, version=3, shard_mb=0.01)
    assert len(manifest.shards) > 2 and manifest.version == 3 and not adapter_only
    assert all(len(s.sha256) == 64 and s.nbytes == len(s.ref) for s in manifest.shards)
    back = fetch_state(manifest)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_receiver_loads_a_verified_version_and_refuses_a_corrupted_one():
    source, _ = tiny_model_and_tokenizer(seed=1)
    worker, _ = tiny_model_and_tokenizer(seed=2)
    receiver = WeightReceiver(worker)
    assert receiver.update(build_manifest(trainable_state(source)[0], 1, shard_mb=0.01)) == 1
    assert all(torch.equal(a, b) for a, b in zip(worker.state_dict().values(), source.state_dict().values()))

    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
    good = build_manifest(trainable_state(source)[0], 2, shard_mb=0.01)
    blob = bytearray(good.shards[1].ref)
    blob[-1] ^= 0xFF  # one flipped bit pattern in the last byte of shard 1
    bad = Manifest(2, [good.shards[0], ShardInfo(bytes(blob), good.shards[1].sha256, good.shards[1].nbytes), *good.shards[2:]])
    before = {k: v.clone() for k, v in worker.state_dict().items()}
    assert receiver.update(bad) == 1  # refused: still on version 1
    assert receiver.refused == [2]
    assert all(torch.equal(before[k], v) for k, v in worker.state_dict().items())  # weights untouched
    try:
        fetch_state(bad)
    except ShardChecksumError as exc:
        assert "shard 1 of weight version 2" in str(exc)
    else:
        raise AssertionError("a corrupted shard was accepted")


def test_lora_models_broadcast_only_the_adapter():
    from grpokit.config.schema import LoraConfig
    from grpokit.model.lora import apply_lora

    model, _ = tiny_model_and_tokenizer(seed=1)
    model = apply_lora(model, LoraConfig(enabled=True, r=2, alpha=4, target_modules=["q_proj", "v_proj"]))
    state, adapter_only = trainable_state(model)
    assert adapter_only and state and all("lora_" in k for k in state)
