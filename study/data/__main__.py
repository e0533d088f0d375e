"""Command line: ``python -m study.data fetch DATASET --root DIR [--url URL] [--sha256 [FILE=]HEX]`` and
``python -m study.data weights BACKBONE`` (torchvision's ImageNet weights into the torch hub cache) and
``python -m study.data export-csv DATASET --root DIR [--out FILE]`` (open-metric-learning's CSV of a dataset).

Exit codes: 0 fetched (or already complete: a no-op); 2 any failure (one line on stderr naming the file or URL
and the cause; nothing half-extracted is left under ``DIR``). ``fetch inshop`` prints the manual steps and exits 2:
its host needs a login.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from study.arguments import ArgumentParser
from study.data._download import FetchError
from study.data._export import export_csv
from study.data._fetch import fetch
from study.data._weights import fetch_weights
from trainables.datasets import DATASETS, entry

__all__ = ["main"]


def _parser(prog: str = "python -m study.data") -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description="Fetch benchmark datasets.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    f = sub.add_parser("fetch", help="download, verify and extract a dataset so dataset.root: DIR trains")
    f.add_argument("dataset", choices=[d.name for d in DATASETS if d.sources or d.manual_steps])
    f.add_argument("--root", required=True, type=Path, help="the directory to give as dataset.root")
    f.add_argument("--url", default=None, help="a mirror of the archive (flowers102: the base URL of its files)")
    f.add_argument(
        "--sha256",
        action="append",
        default=[],
        metavar="[FILE=]HEX",
        help="check this sha256 instead of the published md5 (FILE= for datasets with several files; repeatable)",
    )
    w = sub.add_parser("weights", help="download torchvision's ImageNet weights into the torch hub cache")
    w.add_argument("backbone", help="resnet18, resnet34, resnet50 or googlenet")
    e = sub.add_parser("export-csv", help="write open-metric-learning's CSV (dataset.name: csv) of a dataset")
    e.add_argument("dataset")
    e.add_argument("--root", required=True, type=Path, help="the dataset's dataset.root")
    e.add_argument("--out", type=Path, default=None, help="the CSV to write (default DIR/<dataset>_oml.csv)")
    return p


def _export(args: argparse.Namespace) -> int:
    try:
        path, n = export_csv(args.dataset, args.root, args.out)
    except FetchError as e:
        print(f"error: export-csv {args.dataset}: {e}", file=sys.stderr)
        return 2
    relative = os.path.relpath(path, args.root.expanduser().absolute())
    print(
        f"{args.dataset}: wrote {n} rows to {path}; train with dataset.name: csv, dataset.root: {args.root}, "
        f"dataset.annotations: {relative}"
    )
    return 0


def _weights(args: argparse.Namespace) -> int:
    try:
        path, downloaded = fetch_weights(args.backbone)
    except FetchError as e:
        print(f"error: weights {args.backbone}: {e}", file=sys.stderr)
        return 2
    print(f"{args.backbone}: {'downloaded' if downloaded else 'already in the cache:'} {path}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    steps = entry(args.dataset).manual_steps
    if steps:
        print(steps.format(root=args.root))
        print(f"error: {args.dataset}: its host needs a login; follow the steps above", file=sys.stderr)
        return 2
    try:
        result = fetch(args.dataset, args.root, url=args.url, sha256=args.sha256)
    except FetchError as e:
        print(f"error: fetch {args.dataset}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"error: fetch {args.dataset}: interrupted; run the same command again to resume", file=sys.stderr)
        return 2
    if result.already:
        print(f"{args.dataset}: already complete in {result.folder}; nothing to do")
    else:
        print(
            f"{args.dataset}: fetched {result.bytes_downloaded} bytes in {result.seconds:.1f} s "
            f"(download and checksum {result.download_seconds:.1f} s) into {result.folder}; "
            f"train with dataset.name: {args.dataset}, dataset.root: {args.root}"
        )
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m study.data") -> int:
    args = _parser(prog).parse_args(argv)
    commands = {"fetch": _fetch, "weights": _weights, "export-csv": _export}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
