"""Where a kernel's warps wait, from an ncu source page exported as CSV:

    ncu ... --section WarpStateStats --section SourceCounters -o report <program>
    ncu -i report.ncu-rep --page source --print-source sass --csv > sass.csv
    python3 bench/ncu_stalls.py sass.csv [--top 25]

Prints each stall reason's share of all warp-state samples, then the instructions with
the most samples and the reason that dominates each.
"""
import argparse
import collections
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.csv) as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    names, data = rows[head], rows[head + 1:]
    col = {n: i for i, n in enumerate(names)}
    reasons = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    totals = collections.Counter()
    for r in data:
        for reason in reasons:
            totals[reason] += number(r[col[reason]])
    samples = sum(totals.values()) or 1.0
    print(f"{int(samples)} warp-state samples; share by reason:")
    for reason, value in totals.most_common():
        if value:
            print(f"  {reason:26} {value / samples * 100:5.1f}%")
    print(f"the {args.top} instructions with the most samples:")
    ranked = sorted(data, key=lambda r: -number(r[col["Warp Stall Sampling (All Samples)"]]))
    for r in ranked[: args.top]:
        share = number(r[col["Warp Stall Sampling (All Samples)"]]) / samples * 100
        reason = max(reasons, key=lambda n: number(r[col[n]]))
        print(f"  {share:5.1f}%  {reason:20} {r[col['Source']].strip()[:100]}")


if __name__ == "__main__":
    main()
