"""TOPLOC's polynomial encoding and bf16 exponent/mantissa check, by hand and against the authors' algorithm."""

import torch

from grpokit.distributed.toploc_poly import (
    PAPER_THRESHOLDS, PRIME, ProofPoly, bf16_bits, check_block, commit_blocks, evaluate, fp_parts, injective_modulus,
    interpolate,
)


def ndd_cpp_port(x: list[int], y: list[int]) -> list[int]:
    """A line-by-line port of ``compute_newton_coefficients`` in the ``toploc`` package's ``ndd.cpp``."""
    n, dd = len(x), [v % PRIME for v in y]
    for k in range(1, n):
        for i in range(n - 1, k - 1, -1):
            dd[i] = (dd[i] - dd[i - 1]) * pow((x[i] - x[i - k]) % PRIME, PRIME - 2, PRIME) % PRIME
    coeffs, factor = [0] * n, [1] + [0] * (n - 1)
    for i in range(n):
        for j in range(i + 1):
            coeffs[j] = (coeffs[j] + dd[i] * factor[j]) % PRIME
        if i + 1 < n:
            minus_xi, prev = (-x[i]) % PRIME, factor[0]
            factor[0] = prev * minus_xi % PRIME
            for k in range(1, i + 2):
                old = factor[k]
                factor[k] = (prev + old * minus_xi) % PRIME
                prev = old
    return coeffs


def test_interpolation_by_hand_and_against_the_package_algorithm():
    # P(0) = 1, P(1) = 3, P(2) = 7 -> P(x) = 1 + x + x^2
    assert interpolate(torch.tensor([[0, 1, 2]]), torch.tensor([[1, 3, 7]])).tolist() == [[1, 1, 1]]
    # P(1) = 5, P(2) = 5 -> the constant 5
    assert interpolate(torch.tensor([[1, 2]]), torch.tensor([[5, 5]])).tolist() == [[5, 0]]
    # P(1) = 0, P(2) = 1 -> x - 1 = 65496 + x over GF(65497)
    assert interpolate(torch.tensor([[1, 2]]), torch.tensor([[0, 1]])).tolist() == [[PRIME - 1, 1]]
    g = torch.Generator().manual_seed(1)
    x = torch.stack([torch.randperm(60000, generator=g)[:128] for _ in range(3)])
    y = torch.randint(0, 65536, (3, 128), generator=g)
    c = interpolate(x, y)
    for row in range(3):
        assert c[row].tolist() == ndd_cpp_port(x[row].tolist(), y[row].tolist())
        assert evaluate(c[row], x[row]).tolist() == (y[row] % PRIME).tolist()  # P passes through every committed point


def test_modulus_bytes_and_bf16_parts():
    assert injective_modulus([3, 70000]) == PRIME  # 3 and 70000 mod 65497 = 4503 differ
    assert injective_modulus([0, PRIME]) == PRIME - 1  # both 0 mod 65497; 0 and 1 mod 65496
    proof = ProofPoly(PRIME, (1, 2))
    assert proof.to_bytes() == b"\xff\xd9\x00\x01\x00\x02"  # 65497 = 0xFFD9, then 2 bytes per coefficient
    assert ProofPoly.from_bytes(proof.to_bytes()) == proof
    assert len(commit_blocks([torch.randn(32, 64)], 128)[0]) == 258  # the paper's 258 bytes per 32-token block
    bits = bf16_bits(torch.tensor([1.0, 1.5, -2.0]))
    assert bits.tolist() == [0x3F80, 0x3FC0, 0xC000]
    exps, mants = fp_parts(bits)
    assert exps.tolist() == [127, 127, 128] and mants.tolist() == [0, 64, 0]  # 1.5 = 1.1b: mantissa 1000000b


def test_check_block_statistics_by_hand():
    block = torch.tensor([1.0, 2.0, 4.0, 8.0])
    proof = commit_blocks([block], 4)[0]
    same = check_block(proof, block, 4)
    assert (same.exp_mismatches, same.mant_err_mean, same.mant_err_median) == (0, 0.0, 0.0)
    assert same.passes(PAPER_THRESHOLDS)
    # x (1 + 2^-7): each mantissa moves by one last bit: mean = median = 1 <= 10, 8
    assert check_block(proof, block * (1 + 2**-7), 4).passes(PAPER_THRESHOLDS)
    # x 1.25: mantissa 0 -> 0100000b = 32 on all four: mean 32 > 10
    off = check_block(proof, block * 1.25, 4)
    assert (off.exp_mismatches, off.mant_err_mean, off.mant_err_median) == (0, 32.0, 32.0) and not off.passes(PAPER_THRESHOLDS)
    # one value doubled: 1 of 4 exponents differs (0.25 <= 38/128 = 0.297); two doubled: 0.5 > 0.297
    one = check_block(proof, torch.tensor([1.0, 2.0, 4.0, 16.0]), 4)
    assert one.exp_mismatches == 1 and one.passes(PAPER_THRESHOLDS)
    assert not check_block(proof, torch.tensor([1.0, 2.0, 8.0, 16.0]), 4).passes(PAPER_THRESHOLDS)


def test_forged_proofs_fail():
    block = torch.randn(4, 32, generator=torch.Generator().manual_seed(0))
    proof = commit_blocks([block], 16)[0]
    assert check_block(proof, block, 16).passes(PAPER_THRESHOLDS)
    altered = bytearray(proof)
    altered[5] ^= 0x01  # one bit of the second coefficient: P changes at every committed index
    assert not check_block(bytes(altered), block, 16).passes(PAPER_THRESHOLDS)
    assert not check_block(b"\x00\x00" + b"\x00\x00" * 16, block, 16).passes(PAPER_THRESHOLDS)  # the package's null proof
    assert not check_block(proof[:-2], block, 16).passes(PAPER_THRESHOLDS)  # 15 coefficients for k = 16
    other = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    assert not check_block(commit_blocks([other], 16)[0], block, 16).passes(PAPER_THRESHOLDS)  # another block's proof
