"""Counts and differences of one suite's runs (see run.sh).

    python3 compare.py SUITE OUT_DIR

reads OUT_DIR/SUITE-{direct,default,lazy,pooled,pooled-lazy}.xml (pytest's
JUnit files, those that are there) and prints each run's
passed/failed/skipped counts, then every test that passed directly but
failed (or errored, or hung) through onetrip, with its message.

    python3 compare.py --libtest LOG LIST OUT.xml

writes the JUnit file of a Rust test binary's run (tokio-postgres.sh): LOG
is its output, LIST its `--list` output; a listed test the log gives no
result for (the run was stopped by a timeout) counts as failed, "hung".
"""

import re
import sys
import xml.etree.ElementTree as ET

RUNS = ("direct", "default", "lazy", "pooled", "pooled-lazy")


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


def libtest_junit(log_path, list_path, xml_path):
    listed = []
    with open(list_path) as f:
        for line in f:
            if line.endswith(": test\n"):
                listed.append(line[: -len(": test\n")])
    log = open(log_path, errors="replace").read()
    results = dict(re.findall(r"^test (\S+) \.\.\. (ok|FAILED|ignored)", log, re.M))
    # libtest prints each failure's output under "---- NAME stdout ----".
    messages = {}
    for m in re.finditer(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |^failures:$|\Z)", log, re.M | re.S):
        messages[m.group(1)] = m.group(2).strip()
    suite = ET.Element("testsuite")
    for name in listed:
        mod, _, fn = name.rpartition("::")
        case = ET.SubElement(suite, "testcase", classname=mod or "test", name=fn)
        state = results.get(name)
        if state == "FAILED":
            msg = messages.get(name, "")
            lines = [l for l in msg.splitlines() if not l.startswith("thread ")] or [""]
            ET.SubElement(case, "failure", message="\n".join(lines)).text = msg
        elif state == "ignored":
            ET.SubElement(case, "skipped", message="ignored")
        elif state is None:
            ET.SubElement(case, "failure", message="hung: no result before the run's timeout")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(xml_path)


def main():
    if sys.argv[1] == "--libtest":
        libtest_junit(*sys.argv[2:5])
        return
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
        if run not in runs:
            continue
        res = runs[run]
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
