"""Validate OpenLineage events against the spec's JSON schemas, offline (the schemas are vendored in
`openlineage_spec/`, see its README): the event against `RunEvent`, and every facet against the schema its
`_schemaURL` names. A facet whose schema is not vendored is an error, so nothing is silently left unchecked."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SPEC = Path(__file__).with_name("openlineage_spec")


def _registry() -> Registry:
    resources = []
    for path in [SPEC / "OpenLineage.json", *sorted((SPEC / "facets").glob("*.json"))]:
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def _validate(instance: dict, ref: str, where: str) -> None:
    base, _, _ = ref.partition("#")
    if base not in REGISTRY:
        raise AssertionError(f"{where}: no vendored schema for {ref}")
    validator = Draft202012Validator(
        {"$ref": ref}, registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"{where}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5]))


def validate_run_event(event: dict) -> None:
    """Raise AssertionError naming the first schema violations of a run event or any of its facets."""
    _validate(event, event.get("schemaURL", ""), "event")
    facet_groups = [
        ("run", event["run"].get("facets") or {}),
        ("job", event["job"].get("facets") or {}),
    ]
    for i, ds in enumerate(event.get("inputs") or []):
        facet_groups.append((f"inputs[{i}]", ds.get("facets") or {}))
        facet_groups.append((f"inputs[{i}].inputFacets", ds.get("inputFacets") or {}))
    for i, ds in enumerate(event.get("outputs") or []):
        facet_groups.append((f"outputs[{i}]", ds.get("facets") or {}))
        facet_groups.append((f"outputs[{i}].outputFacets", ds.get("outputFacets") or {}))
    for where, facets in facet_groups:
        for name, facet in facets.items():
            _validate(facet, facet.get("_schemaURL", ""), f"{where}.{name}")


def column_lineage_of(event: dict) -> dict[str, list[str]]:
    """The event's output column lineage as `{column: sorted ['db.table.column', ...]}`."""
    (output,) = event["outputs"]
    fields = output["facets"]["columnLineage"]["fields"]
    return {
        col: sorted(f"{f['name']}.{f['field']}" for f in spec["inputFields"]) for col, spec in fields.items()
    }
