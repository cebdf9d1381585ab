"""greet.sh greets the name it is given (this task has no tests/test.sh to run it: the import refuses it)."""

import subprocess


def test_greets_its_first_argument():
    assert subprocess.run(["sh", "greet.sh", "Ada"], capture_output=True, text=True).stdout == "Hello, Ada!\n"
