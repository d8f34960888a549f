"""Helm's linter and renderer for tests/helm.rs.

Uses helm-python-sdk (PyPI), which binds Helm's own Go library (Helm v4) and
needs no cluster: `lint` is `helm lint`, `render` is `helm template`. Values
come from an optional YAML file (like `helm -f FILE`), then an optional JSON
object merged over it (like `--set`). Prints one JSON document on stdout.

usage:
  helm.py version
  helm.py lint CHART [--values FILE] [--set JSON]
  helm.py render CHART [--values FILE] [--set JSON] [--name NAME] [--namespace NS]
  helm.py yaml FILE            (a YAML file as JSON, parsed by Helm's parser)

Exit codes: 0 with the JSON answer (a render that Helm refuses is an answer:
{"ok": false, "error": …}); 3 when helm-python-sdk cannot be imported; 2 for a
bad invocation.
"""

import argparse
import json
import re
import sys

try:
    import helm_python as helm
except ImportError as e:  # the Rust test tells skipping from failing by this code
    print(f"cannot import helm_python (pip install helm-python-sdk): {e}", file=sys.stderr)
    sys.exit(3)


def merge(base, over):
    """Deep-merges `over` into `base` as Helm coalesces values (maps merge, the rest replaces)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else v
        return out
    return over


def values(args):
    vals = None
    if args.values:
        with open(args.values, encoding="utf-8") as f:
            vals = helm.values_from_yaml(f.read())
    if args.set:
        vals = merge(vals or {}, json.loads(args.set))
    return vals


def documents(text):
    """The YAML documents of one rendered template, each parsed by Helm's parser."""
    for doc in re.split(r"(?m)^---[ \t]*$", text):
        if doc.strip() and not all(
            line.strip() == "" or line.lstrip().startswith("#") for line in doc.splitlines()
        ):
            yield helm.values_from_yaml(doc)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    for name in ("lint", "render"):
        p = sub.add_parser(name)
        p.add_argument("chart")
        p.add_argument("--values")
        p.add_argument("--set")
        if name == "render":
            p.add_argument("--name", default="overdue")
            p.add_argument("--namespace", default="monitoring")
    p = sub.add_parser("yaml")
    p.add_argument("file")
    args = parser.parse_args()

    if args.command == "version":
        out = {"helm": helm.helm_sdk_version(), "library": helm.helm_c_version()}
    elif args.command == "lint":
        # strict: warnings count as failures too, as `helm lint --strict`.
        out = helm.lint(args.chart, values(args), strict=True)
    elif args.command == "render":
        try:
            with helm.Chart.load(args.chart) as chart:
                rendered = chart.render(
                    values(args), name=args.name, namespace=args.namespace, is_install=True
                )
        except helm.HelmError as e:
            out = {"ok": False, "error": str(e)}
        else:
            manifests = []
            notes = ""
            for template, text in sorted(rendered.items()):
                if template.endswith("NOTES.txt"):
                    notes = text
                    continue
                for doc in documents(text):
                    manifests.append({"template": template, "object": doc, "text": text})
            out = {"ok": True, "manifests": manifests, "notes": notes}
    else:
        with open(args.file, encoding="utf-8") as f:
            out = helm.values_from_yaml(f.read())
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
