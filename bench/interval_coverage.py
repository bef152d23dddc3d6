"""How often each interval covers the truth, over the regimes the lab produces.

    python bench/interval_coverage.py [--replicates N] [--quick] [--json FILE] [--workers N]
    python bench/interval_coverage.py --power [--replicates N] [--json FILE] [--workers N]

Draws synthetic runs from known truths (:mod:`postlab.analysis.coverage`): 3 to 1,000 seeds,
19 to 1,000 held-out questions, true rates 0.02 to 0.98, seed effects from none to large,
one greedy answer or 16 sampled answers a question (the teaching plan's evaluation);
for each regime prints the coverage of every interval type of nominal 95% and the share of
runs a one-sided 5% test calls "confirmed" when the truth sits on its margin. A coverage
outside 93-97% or a confirmed share over 5% is starred. Monte-Carlo standard errors are
printed with the table (replicates are fewer for the largest tables).

``--power`` checks the power planner instead (``postlab design``): per regime of questions,
rate and seed spread, a study of its difference is planned from a 1,000-seed pilot at power
0.8 and simulated at the planned size; the share of studies whose interval excludes zero is
printed beside the power the planner predicted, starred when more than 5 points apart.

Not a speed benchmark: it lives here because it is long (tens of minutes on 2 cores for the
whole table) and the test suite runs a slice of it (tests/analysis/test_intervals.py).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

from postlab.analysis.coverage import (
    QUESTIONS,
    RATES,
    SEED_SDS,
    PowerCheck,
    Regime,
    Result,
    power_check,
    regimes,
    replicates_for,
    simulate,
)
from postlab.plan.margins import default

KINDS = ("crossed rate", "crossed difference", "nested rate", "seed-t difference")
#: The goal (postlab.plan.margins): nominal 95% intervals cover 93-97% of the time, and a
#: verdict says "confirmed" at most 5% of the time when the truth sits on the margin.
LOW, HIGH, CONFIRMED = (default("coverage.goal_low"), default("coverage.goal_high"),
                        default("coverage.wrong_confirmations"))


def _one(job: tuple[Regime, int, int, int]) -> Result:
    regime, replicates, seed, bootstrap = job
    return simulate(regime, replicates, seed=seed, bootstrap=bootstrap)


def _power(job: tuple[Regime, int, int]) -> PowerCheck:
    regime, replicates, seed = job
    return power_check(regime, replicates, seed=seed)


#: How far the achieved power may lie from the planned one (the planner's goal).
POWER_TOLERANCE = 0.05


def power_main(args: argparse.Namespace) -> None:
    """The power planner's check over every (questions, rate, seed spread) regime."""
    grid = [Regime(seeds=0, questions=q, rate=rate, seed_sd=sd)
            for q in QUESTIONS for rate in RATES for sd in SEED_SDS]
    jobs = [(r, args.replicates, 5000 + i) for i, r in enumerate(grid)]
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        checks = list(pool.map(_power, jobs))
    print(f"{len(checks)} regimes, planned at power 0.8 from a 1,000-seed pilot, "
          f"{time.perf_counter() - started:.0f} s")
    print(f"{'quest':>5} {'rate':>5} {'seed sd':>7} {'difference':>10} {'seeds':>6} "
          f"{'planned':>8} {'achieved':>9} {'reps':>5}")
    within = within_se = simulated = 0
    for check in checks:
        r = check.regime
        if check.achieved is None or check.planned_power is None:
            why = "no number of seeds" if check.planned_seeds is None else (
                f"{check.planned_seeds} seeds: not simulated")
            print(f"{r.questions:5d} {r.rate:5.2f} {r.seed_sd:7.1f} {check.difference:10.4f} "
                  f"  {why}")
            continue
        simulated += 1
        gap = abs(check.achieved - check.planned_power)
        within += gap <= POWER_TOLERANCE
        within_se += gap <= POWER_TOLERANCE + 2 * check.monte_carlo_se
        flag = " " if gap <= POWER_TOLERANCE else "*"
        print(f"{r.questions:5d} {r.rate:5.2f} {r.seed_sd:7.1f} {check.difference:10.4f} "
              f"{check.planned_seeds:6d} {check.planned_power:8.3f} {check.achieved:8.3f}{flag} "
              f"{check.replicates:5d}")
    gaps = [c.achieved - c.planned_power for c in checks
            if c.achieved is not None and c.planned_power is not None]
    print(f"\nachieved within 5 points of planned: {within} of {simulated} simulated regimes "
          f"({within_se} within 5 points plus 2 Monte-Carlo se); achieved minus planned "
          f"{min(gaps):+.3f} to {max(gaps):+.3f}; not plannable or over the size simulated: "
          f"{len(checks) - simulated}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(c) | {"mc_se": c.monte_carlo_se} for c in checks], handle,
                      indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=1000,
                        help="replicates per regime (fewer for the largest tables)")
    parser.add_argument("--quick", action="store_true",
                        help="3 and 100 seeds, 19 and 100 questions, 200 replicates")
    parser.add_argument("--json", help="also write every result to this file")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=0, metavar="B",
                        help="also the pigeonhole bootstrap with B resamples (a candidate)")
    parser.add_argument("--power", action="store_true",
                        help="check the power planner instead of the intervals' coverage")
    args = parser.parse_args()
    if args.power:
        power_main(args)
        return
    if args.quick:
        grid = list(regimes(seeds=(3, 100), questions=(19, 100)))
        args.replicates = 200
    else:
        grid = list(regimes())
    jobs = [(r, replicates_for(r, args.replicates), 1000 + i, args.bootstrap)
            for i, r in enumerate(grid)]
    kinds = KINDS + (("bootstrap rate", "bootstrap difference") if args.bootstrap else ())
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(_one, jobs))
    print(f"{len(results)} regimes, question sd {grid[0].question_sd} (logit), "
          f"{time.perf_counter() - started:.0f} s")
    header = (f"{'n':>3} {'seeds':>5} {'quest':>5} {'rate':>5} {'seed sd':>7} {'reps':>5} "
              + " ".join(f"{k:>18}" for k in kinds) + f" {'confirmed: crossed':>19} "
              f"{'seed-t':>7}")
    print(header)
    over = {"crossed difference": 0, "seed-t difference": 0}
    for result in results:
        r = result.regime
        cells = []
        for kind in kinds:
            value = result.coverage[kind]
            flag = "*" if not LOW <= value <= HIGH else " "
            cells.append(f"{value:17.3f}{flag}")
        confirmed = []
        for kind in ("crossed difference", "seed-t difference"):
            value = result.confirmed_at_margin[kind]
            flag = "*" if value > CONFIRMED else " "
            over[kind] += flag == "*"
            confirmed.append(f"{value:.3f}{flag}")
        print(f"{r.samples:3d} {r.seeds:5d} {r.questions:5d} {r.rate:5.2f} {r.seed_sd:7.1f} "
              f"{result.replicates:5d} " + " ".join(cells)
              + f" {confirmed[0]:>19} {confirmed[1]:>7}")
    print()
    for samples in sorted({res.regime.samples for res in results}):
        for kind in kinds:
            if kind == "nested rate" and samples > 1:
                continue  # a training reward's draws are rollouts: samples do not enter it
            of = [res for res in results if res.regime.samples == samples]
            clearly = sum(not LOW - 2 * res.monte_carlo_se <= res.coverage[kind]
                          <= HIGH + 2 * res.monte_carlo_se for res in of)
            print(f"{'greedy' if samples == 1 else f'{samples} samples'}, {kind}: outside "
                  f"93-97% by more than 2 Monte-Carlo se in {clearly} of {len(of)}")
    for kind in kinds:
        # a training reward's nested interval does not depend on the evaluation's samples:
        # counted once, over the greedy regimes
        of = [res for res in results if kind != "nested rate" or res.regime.samples == 1]
        values = [res.coverage[kind] for res in of]
        # outside the goal by more than two Monte-Carlo standard errors: not chance
        clearly = sum(not LOW - 2 * res.monte_carlo_se <= res.coverage[kind]
                      <= HIGH + 2 * res.monte_carlo_se for res in of)
        missed = sum(not LOW <= value <= HIGH for value in values)
        print(f"{kind}: coverage {min(values):.3f}-{max(values):.3f}, outside 93-97% in "
              f"{missed} of {len(of)} regimes, by more than 2 Monte-Carlo se in {clearly}")
    for kind, count in over.items():
        values = [res.confirmed_at_margin[kind] for res in results]
        print(f"confirmed at the margin, {kind}: at most {max(values):.3f}, over 5% in "
              f"{count} of {len(results)}")
    most = max(res.monte_carlo_se for res in results)
    least = min(res.monte_carlo_se for res in results)
    print(f"Monte-Carlo se of a 95% coverage: {least:.4f} ({args.replicates} replicates) to "
          f"{most:.4f} (the fewest)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([asdict(res) | {"mc_se": res.monte_carlo_se} for res in results],
                      handle, indent=1, default=lambda v: None if v is math.inf else v)


if __name__ == "__main__":
    main()
