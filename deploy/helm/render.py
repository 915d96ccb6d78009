#!/usr/bin/env python3
"""Renders the ringtail chart with Helm's own engine, without a helm binary.

Helm is not packaged for Debian 12, and this project reaches no other
download site, so the chart is rendered by the Helm v4 Go SDK bundled in
the PyPI package helm-python-sdk (pinned in ringtail.sh's test_deps), the
same template engine and chart loader `helm template` runs.

    render.py [--values JSON] [--name NAME] [--namespace NS] [--plain] [--lint] [--json]

prints the manifests (sorted by template file, NOTES.txt left out) as one
YAML stream. --plain also puts the Namespace first, labelled for the Pod
Security Standards level the DaemonSet needs (privileged: hostPID, hostPath,
added capabilities): that stream is deploy/kubernetes/daemonset.yaml.
--lint runs `helm lint` first and fails on an error or a warning.
--json prints the objects as one JSON list instead (for tests).
"""
import argparse
import json
import pathlib
import sys

import helm_python as helm

CHART = pathlib.Path(__file__).resolve().parent / "ringtail"

HEADER = """\
# ringtail as a plain manifest: the Helm chart deploy/helm/ringtail rendered
# with its default values (release "ringtail", namespace "ringtail") by
# deploy/helm/render.py --plain. Do not edit: change the chart and render
# again (tests/tests/deploy.rs checks that the two agree).
#   kubectl apply -f deploy/kubernetes/daemonset.yaml
"""

NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels:
    # hostPID, hostPath volumes and added capabilities: only the
    # "privileged" Pod Security Standard admits them.
    pod-security.kubernetes.io/enforce: privileged
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", default="{}", help="values as JSON, over values.yaml")
    ap.add_argument("--name", default="ringtail")
    ap.add_argument("--namespace", default="ringtail")
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--lint", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    values = json.loads(args.values)
    if args.lint:
        report = helm.lint(str(CHART), values, strict=True, namespace=args.namespace)
        bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2] + list(report.get("errors", []))
        if bad:
            print(f"helm lint: {bad}", file=sys.stderr)
            return 1
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name=args.name, namespace=args.namespace, is_install=True)
    docs = []
    for name in sorted(files):
        if name.endswith("NOTES.txt"):
            continue
        for doc in files[name].split("\n---\n"):
            if any(line.strip() and not line.lstrip().startswith("#") for line in doc.splitlines()):
                docs.append(f"# Source: {name}\n{doc.strip()}\n")
    if args.plain:
        docs.insert(0, NAMESPACE.format(ns=args.namespace))
    if args.json:
        import yaml  # PyYAML, a dependency of kubernetes-validate

        json.dump([yaml.safe_load(d) for d in docs], sys.stdout)
        return 0
    if args.plain:
        sys.stdout.write(HEADER)
    sys.stdout.write("---\n" + "---\n".join(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
