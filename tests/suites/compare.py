"""Counts and differences of one suite's three runs (see run.sh).

    python3 compare.py SUITE OUT_DIR

reads OUT_DIR/SUITE-{direct,default,lazy}.xml (pytest's JUnit files) and
prints each run's passed/failed/skipped counts, then every test that passed
directly but failed (or errored) through onetrip, with its message.
"""

import sys
import xml.etree.ElementTree as ET

RUNS = ("direct", "default", "lazy", "pooled")


def outcomes(path):
    res = {}
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        state, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                state, msg = "failed", (child.get("message") or "").strip()
                break
            if child.tag == "skipped":
                state = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        res[name] = (state, msg)
    return res


def main():
    suite, out = sys.argv[1], sys.argv[2]
    runs = {}
    for run in RUNS:
        try:
            runs[run] = outcomes(f"{out}/{suite}-{run}.xml")
        except FileNotFoundError:
            pass  # not among run.sh's RUNS this time
        except (OSError, ET.ParseError) as e:
            print(f"{suite} {run}: no results ({e})")
    for run, res in runs.items():
        counts = {}
        for state, _ in res.values():
            counts[state] = counts.get(state, 0) + 1
        shown = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped", "xfailed"))
        print(f"{suite} {run}: {shown}")
    direct = runs.get("direct", {})
    for run in RUNS[1:]:
        res = runs.get(run, {})
        worse = [
            (name, res[name][1])
            for name, (state, _) in direct.items()
            if state == "passed" and name in res and res[name][0] == "failed"
        ]
        print(f"{suite} {run}: {len(worse)} passing directly but failing through onetrip")
        for name, msg in worse:
            first = msg.splitlines()[0][:200] if msg else ""
            print(f"  {name}\n      {first}")


if __name__ == "__main__":
    main()
