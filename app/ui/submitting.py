"""The status page's submit form: one kind's input as JSON, with the fields of its input
schema listed beside it and a starting document generated from that schema. The form's
post is created the way ``POST /v1/jobs`` creates (the same validation, admission and
transition), so a refused input answers the API's problem, shown on the form."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from atlas_jobs._app.kinds import KINDS, KindSpec

MAX_INPUT_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class InputField:
    """One top-level property of a kind's input schema, as the form lists it."""

    name: str
    type: str
    required: bool
    description: str


class RawInput(BaseModel):
    """The form's JSON object before it is validated as the kind's input."""

    model_config = ConfigDict(extra="allow")


def _resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found: Mapping[str, Any] = root.get("$defs", {}).get(ref.rsplit("/", 1)[1], {})
        return _resolved(found, root)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _resolved(schema["allOf"][0], root)
    return schema


def _type_name(schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    schema = _resolved(schema, root)
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "anyOf" in schema:
        return " | ".join(_type_name(s, root) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type_name(schema.get('items', {}), root)}"
    return str(kind)


def skeleton(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """A starting value for ``schema``: its required properties filled with the first
    allowed value of each (an enum's first member, one item for a non-empty list)."""
    root = schema if root is None else root
    schema = _resolved(schema, root)
    if "default" in schema:
        return schema["default"]
    if schema.get("examples"):
        return schema["examples"][0]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        return skeleton(schema["anyOf"][0], root)
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: skeleton(properties[name], root) for name in schema.get("required", [])}
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [skeleton(schema.get("items", {}), root) for _ in range(count)]
    if kind in {"integer", "number"}:
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "string":
        return "x" * int(schema.get("minLength", 0))
    return None


def input_fields(spec: KindSpec) -> list[InputField]:
    schema = spec.input_model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        InputField(
            name=name,
            type=_type_name(prop, schema),
            required=name in required,
            description=str(
                _resolved(prop, schema).get("description") or prop.get("description") or ""
            ),
        )
        for name, prop in schema.get("properties", {}).items()
    ]


def starting_input(spec: KindSpec) -> str:
    return json.dumps(skeleton(spec.input_model.model_json_schema()), indent=2)


def kind_named(name: str | None) -> KindSpec | None:
    return KINDS.get(name) if name else None


def kinds_offered() -> list[KindSpec]:
    return [KINDS[name] for name in sorted(KINDS)]


class FormInputError(ValueError):
    """The form's input is not a JSON object (said before anything is sent on)."""


def parse_input(text: str) -> RawInput:
    if len(text) > MAX_INPUT_CHARS:
        raise FormInputError(f"The input is longer than {MAX_INPUT_CHARS} characters")
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise FormInputError(f"The input is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise FormInputError("The input must be a JSON object")
    return RawInput.model_validate(value)
