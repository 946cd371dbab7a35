"""What an agent pays to read Workset: the meta-tools in every tools/list, and a find_tool answer.
Sizes are structural (bytes of JSON, characters), never timings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.base import jsontext
from chalicelib.mcp import compact
from chalicelib.mcp.metatools import ACQUIRE_SCHEMA, META_TOOLS
from chalicelib.tools.definitions import RequestTemplate, ToolSpec
from tests.conftest import Admin, Mcp

META_BYTES = 4_000
ANSWER_BYTES = 12_000  # at limit 5, whatever the tools hold


def _bytes(value: Any) -> int:
    return len(jsontext.dumps(value).encode())  # as answers are written


def _field(index: int, **node: Any) -> dict[str, Any]:
    return {"type": "string", "description": f"Field {index}. " + "Long prose about it. " * 20, **node}


def _fat_schema(fields: int) -> dict[str, Any]:
    """A real-looking large input: many described fields, a long enum, nested objects."""
    properties = {f"field_{i}": _field(i) for i in range(fields)}
    properties["state"] = {"type": "string", "enum": [f"state-{i}" for i in range(300)]}
    properties["body"] = {"type": "object", "properties": {f"inner_{i}": _field(i) for i in range(fields)}}
    return {"type": "object", "properties": properties, "required": [f"field_{i}" for i in range(0, fields, 3)]}


# --- the meta-tools


def test_the_eight_meta_tools_fit_in_4_kb_of_tools_list(mcp: Mcp) -> None:
    # WHEN a fresh agent lists its tools
    listed = mcp.post("tools/list").json_body["result"]["tools"]
    # THEN the meta-tools are all of it, and together at most 4 KB of compact JSON
    assert [tool["name"] for tool in listed] == list(META_TOOLS)
    compact_json = len(json.dumps(listed, separators=(",", ":"), ensure_ascii=False).encode())
    assert compact_json <= META_BYTES, compact_json


def test_find_tools_description_says_what_a_hit_holds_and_what_to_do_next() -> None:
    description = META_TOOLS["find_tool"].description
    for word in ("input", "input_schema", "* required", "run_tool", "promote", "acquire"):
        assert word in description, word


@pytest.mark.parametrize("meta", [name for name in META_TOOLS if name != "acquire"])
def test_a_listed_schema_keeps_every_argument_and_what_is_required(meta: str) -> None:
    # GIVEN a meta-tool's arguments as the server parses them
    parsed = META_TOOLS[meta].args.model_json_schema()
    # WHEN it is listed
    listed = META_TOOLS[meta].definition["inputSchema"]
    # THEN every argument and every required one is there, with its type
    assert listed["properties"].keys() == parsed["properties"].keys()
    assert listed.get("required", []) == parsed.get("required", [])
    assert all("type" in node for node in listed["properties"].values())


def test_acquires_listed_schema_follows_the_definition_it_publishes() -> None:
    # THEN what acquire lists is what ToolSpec takes from an author (output_schema may be left out)
    parsed = ToolSpec.model_json_schema()
    assert set(ACQUIRE_SCHEMA["properties"]) | {"output_schema"} == set(parsed["properties"])
    assert ACQUIRE_SCHEMA["required"] == parsed["required"]
    request = ACQUIRE_SCHEMA["properties"]["request"]
    assert set(request["properties"]) == set(RequestTemplate.model_fields)
    methods = RequestTemplate.model_json_schema()["properties"]["method"]["enum"]
    assert request["properties"]["method"]["enum"] == methods
    assert request["required"] == [name for name, info in RequestTemplate.model_fields.items() if info.is_required()]


def test_the_listed_schema_keeps_a_field_named_like_a_dropped_keyword() -> None:
    from chalicelib.mcp.metatools import _listed_schema

    schema = {"type": "object", "title": "X", "properties": {"title": {"type": "string", "maxLength": 3},
                                                             "pattern": {"type": "string"}}}
    assert _listed_schema(schema) == {"type": "object", "properties": {"title": {"type": "string"},
                                                                       "pattern": {"type": "string"}}}


# --- the compact summary


def test_the_summary_keeps_required_fields_first_and_enums() -> None:
    schema = {
        "type": "object",
        "properties": {
            "state": {"type": "string", "enum": ["open", "closed", "all"]},
            "owner": {"type": "string", "description": "The account owner."},
            "labels": {"type": "array", "items": {"type": "string"}},
            "repo": {"type": "string"},
            "per_page": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "body": {"type": "object", "required": ["title"],
                     "properties": {"labels": {"type": "array"}, "title": {"type": "string"}}},
        },
        "required": ["owner", "repo"],
    }
    assert compact.input_summary(schema) == ("owner*: string, repo*: string, state: open|closed|all, labels: [string], "
                                             "per_page: integer, body: {title*: string, labels: [any]}")


def test_the_summary_follows_refs_and_trims_long_enums_and_nested_objects() -> None:
    schema = {
        "type": "object",
        "properties": {"address": {"$ref": "#/$defs/address"}, "kind": {"enum": list(range(20))}},
        "required": ["address"],
        "$defs": {"address": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"},
            "country": {"type": "string"}, "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
            "note": {"type": "string"}}}},
    }
    assert compact.input_summary(schema) == ("address*: {street: string, city: string, zip: string, country: string, "
                                             "…+2}, kind: 0|1|2|3|4|5|…+14")


def test_an_input_with_no_fields_says_so() -> None:
    assert compact.input_summary({"type": "object"}) == "(none)"


def test_an_input_whose_fields_sit_behind_a_ref_or_a_combination_shows_them() -> None:
    schema = {"allOf": [{"$ref": "#/$defs/query"}], "$defs": {"query": {
        "type": "object", "required": ["q"], "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}}
    assert compact.input_summary(schema) == "{q*: string, n: integer}"


@pytest.mark.parametrize(("text", "sentence"), [
    ("List sales orders in Unleashed, filtered by customer.", "List sales orders in Unleashed, filtered by customer."),
    ("Creates new accounts.\n\nCreates new DocuSign accounts.", "Creates new accounts."),
    ("Get a pet, e.g. a cat. Then more.", "Get a pet, e.g. a cat."),
    ("Uses v1.2 of the API. More.", "Uses v1.2 of the API."),
    ("Returns\nthe log   entry", "Returns the log entry"),
    ("First paragraph without an end\n\nSecond.", "First paragraph without an end"),
    ("根据农历时间获取八字信息。返回结果列表。", "根据农历时间获取八字信息。"),
])
def test_the_description_is_its_first_sentence(text: str, sentence: str) -> None:
    assert compact.first_sentence(text) == sentence


def test_a_long_description_is_cut_at_a_word() -> None:
    text = "Retrieves " + "the very important envelope information " * 100
    cut = compact.first_sentence(text)
    assert len(cut) <= compact.DESCRIPTION_CHARS and cut.endswith("…")
    assert cut[:-1].rstrip() in text and not cut[:-1].endswith(("envelo", "informa"))


# --- hostile definitions stay bounded and never raise


def _deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for level in range(levels):  # each level a fresh node, as parsed JSON is (never shared)
        node = {"type": "object", "properties": {"x": node if level % 2 else {"anyOf": [node, {"type": "null"}]}}}
    return node


HOSTILE: dict[str, Any] = {
    "thousands of properties": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)},
                                "required": [f"p{i}" for i in range(5000)]},
    "deep nesting": _deep(40),
    "self reference": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
    "mutual references": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}},
                          "$defs": {"a": {"properties": {"b": {"$ref": "#/$defs/b"}}},
                                    "b": {"properties": {"a": {"$ref": "#/$defs/a"}}}}},
    "a long chain of references": {"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}},
                                   "$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(500)}},
    "remote and broken references": {"type": "object", "properties": {
        "r": {"$ref": "https://evil.example/s"}, "b": {"$ref": "#/nowhere/" + "x/" * 500}, "n": {"$ref": 5}}},
    "odd unicode": {"type": "object", "properties": {
        "\u202egnirts\u0000\x1b[31m" + "\u0301" * 300: {"enum": ["\ud800", "\u200b" * 500, "😀" * 400]}},
        "required": ["\u202egnirts\u0000\x1b[31m" + "\u0301" * 300]},
    "junk in every keyword": {"type": "object", "required": "all", "properties": {
        "a": {"type": [1, None, {"x": 1}]}, "b": [1, 2], "c": None, "d": {"enum": []}, "e": {"items": [1]},
        "f": {"anyOf": "x"}, "g": {"type": "array", "items": {"items": {"items": {"type": "object"}}}}}},
    "a huge enum": {"type": "object", "properties": {"e": {"enum": ["v" * 5000] * 100}}},
    "not an object": ["type", "object"],
}


@pytest.mark.parametrize("schema", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_input_schema_gets_a_bounded_summary(schema: Any) -> None:
    # WHEN a hostile schema is summarised and offered as the first hit's schema
    summary = compact.input_summary(schema)
    offered = compact.top_schema(schema)
    # THEN the summary is short, on one line, free of control characters; the schema bounded
    assert len(summary) <= compact.SUMMARY_CHARS + 20, len(summary)
    assert not any(ch < " " for ch in summary)
    assert offered is None or _bytes(offered[0]) <= compact.TOP_SCHEMA_BYTES


def test_a_hostile_description_gets_a_bounded_first_sentence() -> None:
    text = "\u202e" + "\x00\x07" * 100 + "😀" * 4000 + "\ud800"
    sentence = compact.first_sentence(text)
    assert len(sentence) <= compact.DESCRIPTION_CHARS and not any(ch < " " or ch == "\u202e" for ch in sentence)


def test_the_first_hits_schema_is_whole_when_small_lean_when_that_fits_else_left_out() -> None:
    small = {"type": "object", "properties": {"a": {"type": "string", "description": "A."}}}
    described = {"type": "object", "required": ["a"], "properties": {
        f"f{i}": {"type": "string", "description": "Prose. " * 40, "examples": ["x"]} for i in range(40)}}
    assert compact.top_schema(small) == (small, False)
    lean = compact.top_schema(described)
    assert lean is not None and lean[1] is True
    assert lean[0]["required"] == ["a"] and set(lean[0]["properties"]) == set(described["properties"])
    assert all(node == {"type": "string"} for node in lean[0]["properties"].values())
    assert compact.top_schema(_fat_schema(400)) is None


# --- through find_tool


def _wide_schema(fields: int) -> dict[str, Any]:
    """Field names, enums and prose of four-byte characters and quotes, the widest JSON text per character."""
    properties = {f"{'😀' * 30}{i}": {"enum": ['"' * 24, "😀" * 24] * 4, "description": "😀" * 20}
                  for i in range(fields)}
    return {"type": "object", "properties": properties, "required": list(properties)[:fields // 2]}


def test_a_find_tool_answer_of_five_wide_character_tools_stays_under_12_kb(admin: Admin, mcp: Mcp) -> None:
    # GIVEN five tools written in four-byte characters and quotes, the description at its longest
    for index in range(5):
        admin.publish(name=f"wide-{index}", description="wide " + "😀\"" * 1995, input_schema=_wide_schema(60))
    # WHEN the agent searches for five
    result = mcp.call("find_tool", {"query": "wide", "limit": 5})
    hits = result["structuredContent"]["hits"]
    # THEN the answer is at most 12 KB, each description and summary within its byte bound
    assert len(hits) == 5 and len(result["content"][0]["text"].encode()) <= ANSWER_BYTES
    for hit in hits:
        assert _bytes(hit["description"]) - 2 <= compact.DESCRIPTION_BYTES
        assert _bytes(hit["input"]) - 2 <= compact.SUMMARY_BYTES and hit["input"].startswith("😀")


def test_a_find_tool_answer_of_five_fat_tools_stays_under_12_kb(admin: Admin, mcp: Mcp) -> None:
    # GIVEN five tools with the longest descriptions and large, fully described input schemas
    for index in range(5):
        admin.publish(name=f"fat-{index}", description="Lists fat orders " + "with every detail " * 220,
                      input_schema=_fat_schema(60 + index * 40))
    # WHEN the agent searches for five
    result = mcp.call("find_tool", {"query": "fat orders", "limit": 5})
    found = result["structuredContent"]
    # THEN all five answer, each with a short description and input summary, in at most 12 KB
    assert len(found["hits"]) == 5
    assert len(result["content"][0]["text"].encode()) <= ANSWER_BYTES
    assert all(len(hit["description"]) <= compact.DESCRIPTION_CHARS for hit in found["hits"])
    assert all(hit["input"].startswith("field_0*: string, field_3*: string") for hit in found["hits"])
    # AND only the first may carry a schema, without its prose (the whole one is a promote away)
    first = found["hits"][0]
    assert first.get("input_schema_note") == compact.LEAN_NOTE or "input_schema" not in first
    assert not any("input_schema" in hit for hit in found["hits"][1:])
    promoted = mcp.call("promote", {"vendor": first["vendor"], "name": first["name"]})["structuredContent"]
    assert promoted["tool"]["inputSchema"]["properties"]["field_0"]["description"].startswith("Field 0.")


def test_the_summary_visits_a_bounded_number_of_schema_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a schema whose every field refers to a definition of thousands of referring fields
    wide = {f"f{i}": {"$ref": "#/$defs/wide"} for i in range(3000)}
    schema = {"type": "object", "properties": wide, "$defs": {"wide": {"type": "object", "properties": wide}}}
    visits = []
    inner = compact._type

    def counted(*args: Any) -> str:
        visits.append(1)
        return inner(*args)

    monkeypatch.setattr(compact, "_type", counted)
    # WHEN it is summarised
    summary = compact.input_summary(schema)
    # THEN the work stops at the node budget, and the summary says how many fields it left out
    assert 0 < len(visits) <= compact.MAX_NODES + 1
    assert summary.endswith(" more") and len(summary) <= compact.SUMMARY_CHARS + 20
