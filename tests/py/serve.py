"""Runs a script of this directory once per line read, in this one
process: Python and the clients the script imports load once for many
runs, which on a small machine costs more than a run itself.

usage: serve.py SCRIPT
Each stdin line holds one run's arguments, tab-separated; the answer is
one stdout line, what the run printed as a JSON string. A run that fails
ends the process, with its traceback on stderr.
"""
import contextlib
import io
import json
import os
import runpy
import sys


def main():
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), sys.argv[1])
    answers = sys.stdout
    for line in sys.stdin:
        sys.argv = [script] + line.rstrip("\n").split("\t")
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
        answers.write(json.dumps(out.getvalue()) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
