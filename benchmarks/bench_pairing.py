"""Timing of minimal (OT) pairing: `pair_rewards(V, "minimal")` against calling the solvers directly.

usage: python benchmarks/bench_pairing.py [--groups 1024] [--repeat 7] [--seed 0]

Prints microseconds per group (best of `--repeat` timeit runs) for
  * boolean answers (V = 1{a_i != b_j}), K = 8 and 16: one call of `pair_rewards`, POT's `ot.emd` on the same V
    (the solver alone, uniform marginals), scipy's `linear_sum_assignment`, and `pair_rewards_batch` over `--groups`
    groups (time per group);
  * numeric answers (continuous V from the rescaled-error verifier), where `pair_rewards` uses `ot.emd`;
  * unequal sizes (n0 = K valid originals, n1 = K - 1 valid augmented answers), where `pair_rewards` solves a
    canonically ordered problem with `ot.emd` (order-invariant rewards): the whole call, the canonical order alone,
    and `ot.emd` alone; and `consistency_rewards` from parsed answers (sorting them by value first).
Target (benchmarks/README.md): at most 5 us per group at K = 8 for boolean answers.
"""
import argparse
import platform
import timeit

import numpy as np
import ot
from scipy.optimize import linear_sum_assignment

from consistency_amp.reward.pairing import _canonical_order, consistency_rewards, pair_rewards, pair_rewards_batch

TARGET_US = 5.0


def per_call_us(fn, repeat: int, min_seconds: float = 0.2) -> float:
    "Best-of-`repeat` time of one call of `fn` in microseconds (timeit picks the number of calls per run)."
    timer = timeit.Timer(fn)
    number, elapsed = timer.autorange()
    number = max(number, int(number * min_seconds / max(elapsed, 1e-9)))
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def boolean_stack(G: int, K: int, rng) -> np.ndarray:
    "G verifier matrices of random True/False answers, equivariant relation."
    a, b = rng.random((G, K)) < 0.5, rng.random((G, K)) < 0.5
    return (a[:, :, None] != b[:, None, :]).astype(np.float64)


def numeric_stack(G: int, K: int, rng) -> np.ndarray:
    "G verifier matrices of numeric answers (distances in metres), V = max(0, 1 - |y - y'| / max(y, y'))."
    y, y_prime = rng.uniform(0.5, 5.0, (G, K, 1)), rng.uniform(0.5, 5.0, (G, 1, K))
    return np.maximum(0.0, 1.0 - np.abs(y - y_prime) / np.maximum(y, y_prime))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=1024, help="groups in the batched call")
    parser.add_argument("--repeat", type=int, default=7, help="timeit repeats (the best is reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"python {platform.python_version()}, numpy {np.__version__}, POT {ot.__version__}, "
          f"{platform.processor() or platform.machine()}; best of {args.repeat} repeats, us per group\n")

    rows = []
    for answers, make in (("boolean", boolean_stack), ("numeric", numeric_stack)):
        for K in (8, 16):
            Vs = make(args.groups, K, rng)
            V = Vs[0]
            uniform = np.full(K, 1.0 / K)
            # sanity: the timed paths agree on the minimal total
            lsa_rows, lsa_cols = linear_sum_assignment(V)
            assert np.isclose(pair_rewards(V, "minimal")[0].sum(), V[lsa_rows, lsa_cols].sum())
            assert np.isclose(pair_rewards_batch(Vs, "minimal")[0].sum(),
                              sum(v[linear_sum_assignment(v)].sum() for v in Vs))
            t_single = per_call_us(lambda: pair_rewards(V, "minimal"), args.repeat)
            t_emd = per_call_us(lambda: ot.emd(uniform, uniform, V), args.repeat)
            t_lsa = per_call_us(lambda: linear_sum_assignment(V), args.repeat)
            t_batch = per_call_us(lambda: pair_rewards_batch(Vs, "minimal"), args.repeat) / args.groups
            rows.append((answers, K, t_single, t_emd, t_lsa, t_batch))

    header = ("answers", "K", "pair_rewards", "ot.emd", "lin_sum_assign", f"batch/{args.groups}",
              "emd/single", "emd/batch", "lsa/batch")
    print("{:<8} {:>3} {:>13} {:>9} {:>15} {:>11} {:>11} {:>10} {:>10}".format(*header))
    for answers, K, t_single, t_emd, t_lsa, t_batch in rows:
        print(f"{answers:<8} {K:>3} {t_single:>13.2f} {t_emd:>9.2f} {t_lsa:>15.2f} {t_batch:>11.3f} "
              f"{t_emd / t_single:>11.1f} {t_emd / t_batch:>10.1f} {t_lsa / t_batch:>10.2f}")

    print(f"\nunequal sizes n0 = K, n1 = K - 1 (us per call): pair_rewards = canonical order + ot.emd + argmax extraction")
    print("{:<8} {:>3} {:>13} {:>16} {:>9} {:>20}".format("answers", "K", "pair_rewards", "_canonical_order", "ot.emd",
                                                          "consistency_rewards"))
    for answers in ("boolean", "numeric"):
        for K in (8, 16):
            if answers == "boolean":
                y, y_prime = rng.random((K, 1)) < 0.5, rng.random((1, K - 1)) < 0.5
                V, relation = (y != y_prime).astype(np.float64), "opposite"
            else:
                y, y_prime = rng.uniform(0.5, 5.0, (K, 1)), rng.uniform(0.5, 5.0, (1, K - 1))
                V, relation = np.maximum(0.0, 1.0 - np.abs(y - y_prime) / np.maximum(y, y_prime)), "numeric"
            a, b = y[:, 0].tolist(), y_prime[0].tolist()      # the parsed answers behind V
            assert np.allclose(consistency_rewards(a, b, relation)[0].sum(), pair_rewards(V)[0].sum())
            t_single = per_call_us(lambda: pair_rewards(V, "minimal"), args.repeat)
            t_order = per_call_us(lambda: _canonical_order(V), args.repeat)
            t_emd = per_call_us(lambda: ot.emd(np.full(K, 1 / K), np.full(K - 1, 1 / (K - 1)), V), args.repeat)
            t_answers = per_call_us(lambda: consistency_rewards(a, b, relation, "minimal"), args.repeat)
            print(f"{answers:<8} {K:>3} {t_single:>13.2f} {t_order:>16.2f} {t_emd:>9.2f} {t_answers:>20.2f}")

    batch_k8 = next(r[5] for r in rows if r[:2] == ("boolean", 8))
    single_k8 = next(r[2] for r in rows if r[:2] == ("boolean", 8))
    print(f"\ntarget <= {TARGET_US} us per group at K = 8, boolean answers: batched {batch_k8:.3f} us "
          f"({'met' if batch_k8 <= TARGET_US else 'MISSED'}), single call {single_k8:.2f} us "
          f"({'met' if single_k8 <= TARGET_US else 'missed'})")


if __name__ == "__main__":
    main()
