"""An imported multipart upload called through to a local vendor: the file's bytes arrive as the
vendor expects them (read back with the standard library's MIME parser, not Workset's code),
bad base64 is refused before anything is sent, and a hostile field name cannot add a header."""

from __future__ import annotations

import base64
import json
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from tests.conftest import Admin, Mcp, Vendor

CANVAS = Path(__file__).resolve().parent / "openapi_documents" / "canvas.yaml"
FILE = bytes(range(256)) * 3 + b"\r\n--not-a-boundary--\r\n"  # every byte value, and text that looks like a boundary


def _import(admin: Admin, vendor: Vendor) -> None:
    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "canvas", "document": CANVAS.read_text(),
                                                        "server": vendor.url})
    assert answer.status_code == 200, answer.body
    lines = {line["key"]: line for line in answer.json_body["tools"]}
    assert lines["PUT /layers/{layer}/texture"]["outcome"] == "published", lines


def _parts(sent: dict[str, Any]) -> list[tuple[str | None, str | None, str, bytes]]:
    """The multipart body the vendor received: (name, filename, content type, bytes) per part."""
    head = f"Content-Type: {sent['headers']['Content-Type']}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + sent["body"])
    assert message.is_multipart()
    return [(part.get_param("name", header="content-disposition"), part.get_filename(), part.get_content_type(),
             part.get_payload(decode=True)) for part in message.iter_parts()]


def test_an_imported_upload_sends_the_file_as_multipart_after_approval(admin: Admin, mcp: Mcp,
                                                                        vendor: Vendor) -> None:
    # GIVEN uploadTexture imported, and a file of every byte value
    _import(admin, vendor)
    arguments = {"layer": "sky", "file": base64.b64encode(FILE).decode(), "caption": "Clouds"}

    # WHEN a dry run previews it THEN the preview names the parts and the file's size, not its bytes
    preview = mcp.call("run_tool", {"vendor": "canvas", "name": "upload-texture", "dryRun": True,
                                    "input": arguments})["structuredContent"]["preview"]
    assert preview["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")
    assert preview["body"] == [
        {"name": "file", "filename": "file", "content_type": "application/octet-stream", "bytes": len(FILE)},
        {"name": "caption", "value": "Clouds"}]
    assert vendor.received == []

    # WHEN it is called and approved
    waiting = mcp.call("run_tool", {"vendor": "canvas", "name": "upload-texture", "input": arguments})
    run_id = waiting["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"

    # THEN the vendor got one multipart body: the file's exact bytes, and the caption as text
    sent = vendor.received[-1]
    assert (sent["method"], sent["path"]) == ("PUT", "/layers/sky/texture")
    assert _parts(sent) == [("file", "file", "application/octet-stream", FILE), ("caption", None, "text/plain",
                                                                               b"Clouds")]


def test_a_file_that_is_not_base64_is_refused_and_nothing_is_sent(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN uploadTexture imported
    _import(admin, vendor)

    # WHEN it is called with a file that is not base64
    result = mcp.call("run_tool", {"vendor": "canvas", "name": "upload-texture", "dryRun": True,
                                   "input": {"layer": "sky", "file": "not base64!"}})

    # THEN the call is refused naming the field, and nothing reached the vendor
    assert result["isError"] is True
    assert "input.file: a file's content is base64" in json.dumps(result)
    assert vendor.received == []


def test_a_hostile_field_name_cannot_add_a_header_or_a_part(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN a multipart tool whose field name carries a quote, CR LF and a header
    hostile = 'note"\r\nX-Injected: 1\r\n\r\nfake'
    schema = {"type": "object", "properties": {hostile: {"type": "string"},
                                               "file": {"type": "string", "contentEncoding": "base64"}}}
    admin.publish(name="upload", description="Upload a file.", input_schema=schema, annotations={},
                  request={"method": "POST", "url": f"{vendor.url}/upload", "body_format": "multipart"})

    # WHEN it is called and approved
    waiting = mcp.call("run_tool", {"vendor": "unleashed", "name": "upload",
                                    "input": {hostile: "hello", "file": base64.b64encode(b"abc").decode()}})
    run_id = waiting["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"

    # THEN the vendor got exactly two parts, the name percent-encoded, and no injected header
    sent = vendor.received[-1]
    assert _parts(sent) == [('note%22%0D%0AX-Injected: 1%0D%0A%0D%0Afake', None, "text/plain", b"hello"),
                            ("file", "file", "application/octet-stream", b"abc")]
    assert b"\r\nX-Injected" not in sent["body"]


def test_an_imported_raw_byte_body_sends_the_bytes_with_their_media_type(admin: Admin, mcp: Mcp,
                                                                         vendor: Vendor) -> None:
    # GIVEN replaceImage imported (its `*/*` body is a file of any type)
    _import(admin, vendor)
    arguments = {"layer": "sky", "body": base64.b64encode(FILE).decode(), "content_type": "image/png"}

    # WHEN a dry run previews it THEN the preview gives the type and the size, not the bytes
    preview = mcp.call("run_tool", {"vendor": "canvas", "name": "replace-image", "dryRun": True,
                                    "input": arguments})["structuredContent"]["preview"]
    assert preview["body"] == {"content_type": "image/png", "bytes": len(FILE)}

    # WHEN it is called and approved
    waiting = mcp.call("run_tool", {"vendor": "canvas", "name": "replace-image", "input": arguments})
    run_id = waiting["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"

    # THEN the vendor got the file's exact bytes as the body, typed as the caller said
    sent = vendor.received[-1]
    assert (sent["method"], sent["path"], sent["body"]) == ("PUT", "/layers/sky/image", FILE)
    assert sent["headers"]["Content-Type"] == "image/png"


def test_a_raw_byte_body_that_is_not_base64_is_refused(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN replaceImage imported WHEN its body is not base64
    _import(admin, vendor)
    result = mcp.call("run_tool", {"vendor": "canvas", "name": "replace-image", "dryRun": True,
                                   "input": {"layer": "sky", "body": "AAA", "content_type": "image/png"}})

    # THEN the call is refused naming the field, and nothing reached the vendor
    assert result["isError"] is True
    assert "input.body: a file's content is base64" in json.dumps(result)
    assert vendor.received == []
