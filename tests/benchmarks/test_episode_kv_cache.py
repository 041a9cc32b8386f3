"""benchmarks/episode_kv_cache.py --dry-run: episodes with the KV cache kept across turns against full prefills."""

import re


def test_episode_kv_cache_dry_run_prints_the_speedup_and_fewer_prefilled_tokens(dry_run):
    stdout = dry_run("benchmarks/episode_kv_cache.py")
    match = re.fullmatch(r"speedup=(\d+\.\d\d) prefill_ratio=(\d+\.\d\d)", stdout.strip().splitlines()[-1])
    assert match, stdout
    assert float(match.group(2)) > 1.0  # the cache prefills fewer tokens than re-prefilling every turn
    rows = [line for line in stdout.splitlines() if re.match(r"\| \d+ \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == ["2", "3"]  # one row per --turns value, tokens/s on both sides
