#!/usr/bin/env python3
"""Validates AsyncAPI 3.0.0 documents against the official JSON Schema.

Usage: validate_asyncapi.py SCHEMA_JSON DOCUMENT_JSON...

SCHEMA_JSON is `schemas/3.0.0.json` of the npm package `@asyncapi/specs` (6.x), which bundles
every definition it refers to (bindings included), so nothing is fetched. Exit status: 0 when
every document is valid, 1 when one is not (each error printed with its path), 2 when the
validator cannot run (no `jsonschema` module, unreadable files).
"""

import json
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError:
        print("validate_asyncapi: the python module `jsonschema` is missing (pip install jsonschema)",
              file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            schema = json.load(f)
    except (OSError, ValueError) as e:
        print(f"validate_asyncapi: cannot read the schema {argv[1]}: {e}", file=sys.stderr)
        return 2
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    status = 0
    for path in argv[2:]:
        try:
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
        except (OSError, ValueError) as e:
            print(f"validate_asyncapi: cannot read {path}: {e}", file=sys.stderr)
            return 2
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
        if errors:
            status = 1
            for error in errors:
                where = "/".join(str(p) for p in error.absolute_path) or "(root)"
                print(f"{path}: {where}: {error.message}")
                # oneOf/anyOf failures: say which branch failed and why, not only that none fit.
                for sub in sorted(error.context or [], key=lambda e: list(e.absolute_path))[:10]:
                    sub_where = "/".join(str(p) for p in sub.absolute_path) or "(root)"
                    print(f"  {sub_where}: {sub.message}")
        else:
            print(f"{path}: valid")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
