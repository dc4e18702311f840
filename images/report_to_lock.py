"""Write a hashed lock from a `pip install --dry-run --report` file: one `name==version --hash=sha256:...`
line per package of the resolved closure, sorted, under a header. Used by images/*/lock.sh.

  python3 images/report_to_lock.py REPORT OUT --header LINE [--header LINE ...] [--sdist NAME=FILE]

`--sdist NAME=FILE` pins NAME to FILE's sha256 instead of the report's: for a package PyPI has only as an
sdist, which lock.sh builds to a local wheel for the resolve (that wheel's hash means nothing elsewhere).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import sys


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def lock_lines(report: dict, pinned_hashes: dict[str, str]) -> list[str]:
    lines = []
    for item in report["install"]:
        name = normalized(item["metadata"]["name"])
        version = item["metadata"]["version"]
        sha = pinned_hashes.get(name) or item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            sys.exit(f"no sha256 for {name}=={version}")
        lines.append(f"{name}=={version} --hash=sha256:{sha}")
    return sorted(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=pathlib.Path)
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--sdist", action="append", default=[], metavar="NAME=FILE")
    args = parser.parse_args()
    pinned = {}
    for spec in args.sdist:
        name, _, path = spec.partition("=")
        pinned[normalized(name)] = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    lines = lock_lines(json.loads(args.report.read_text()), pinned)
    args.out.write_text("".join(f"# {h}\n" for h in args.header) + "\n".join(lines) + "\n")
    print(f"{args.out}: {len(lines)} packages")


if __name__ == "__main__":
    main()
