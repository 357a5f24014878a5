#!/usr/bin/env python3
"""Rejects duplicate mapping keys in every YAML file of the repository.

YAML parsers keep the last of two equal keys without a word, so a schema that defines a property
twice silently loses the first definition (the API server then prunes what only the first one
declared). Every tracked *.yaml / *.yml file is parsed with a loader that refuses a repeated key and
names both lines. Helm templates (helm/*/templates/) are Go templates, not YAML, until rendered:
pass rendered manifests on standard input with `-` to check them too.

Usage: check-yaml.py <source dir> [-] [--self-test]
"""
import os
import subprocess
import sys

import yaml


class DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping."""


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # complex keys: left to the normal constructor's error
        if key in seen:
            raise DuplicateKeyError(
                f"while constructing a mapping (first '{key}' at line {seen[key] + 1})",
                node.start_mark, f"found duplicate key '{key}'", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def check_text(name, text):
    try:
        for _ in yaml.load_all(text, Loader=StrictLoader):
            pass
    except DuplicateKeyError as e:
        return [f"{name}: {e}"]
    except yaml.YAMLError as e:
        return [f"{name}: not valid YAML: {e}"]
    return []


def tracked_yaml(src):
    out = subprocess.run(["git", "-C", src, "ls-files", "-co", "--exclude-standard", "--",
                          "*.yaml", "*.yml"], capture_output=True, text=True, check=True).stdout
    files = []
    for rel in out.split():
        parts = rel.split("/")
        if rel.startswith("build") or ("templates" in parts and parts[0] == "helm"):
            continue
        files.append(rel)
    return files


def self_test():
    cases = [
        ("a: 1\nb: 2\na: 3\n", True),
        ("spec:\n  properties:\n    plan: {type: object}\n    plan: {type: string}\n", True),
        ("---\nx: 1\n---\nx: 2\n", False),  # two documents may repeat a key
        ("a: {b: 1, c: 2}\n", False),
    ]
    bad = []
    for text, duplicate in cases:
        refused = bool(check_text("self-test", text))
        if refused != duplicate:
            bad.append(f"self-test: {text!r} {'accepted' if duplicate else 'refused'}")
    return bad


def main(argv):
    args = [a for a in argv[1:] if a != "--self-test"]
    if not args or len(args) > 2 or (len(args) == 2 and args[1] != "-"):
        print(__doc__, file=sys.stderr)
        return 2
    src = args[0]
    errors = self_test() if "--self-test" in argv else []
    files = tracked_yaml(src)
    for rel in files:
        path = os.path.join(src, rel)
        if os.path.isdir(path):
            continue
        with open(path, encoding="utf-8") as f:
            errors += check_text(rel, f.read())
    if len(args) == 2:
        errors += check_text("<stdin>", sys.stdin.read())
    for e in errors:
        print(f"check-yaml: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"check-yaml: {len(files)} YAML files{' and stdin' if len(args) == 2 else ''} have no "
          "duplicate keys")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
