"""Each test file's minutes in one CI job, from its JUnit XML, largest first.

Why: the budget (the whole CI under 45 minutes) is kept by moving or cutting whole files' worth of
tests, and pytest's --durations lists single tests only.
"""

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def main(path: str, top: int = 15) -> None:
    seconds: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        seconds[case.get("classname", "?")] += float(case.get("time", 0))  # (the module: no test classes)
    total = sum(seconds.values())
    print(f"{path}: {total / 60:.1f} min in tests")
    for name, took in seconds.most_common(top):
        print(f"  {took / 60:5.1f} min  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
