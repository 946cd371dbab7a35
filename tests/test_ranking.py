"""find_tool's structure rules (chalicelib/search/structure.py) on small made-up toolboxes: a read
asked for ranks reads first, a shorter operation that covers the request ranks ahead of a longer
one adding words, a plural read ranks the collection first, path and operationId words count
when a name says nothing, and docs without structure rank exactly as before.

Each rule's test also ranks the same docs without their structure, and checks that the order
was the other one then: without the rule the test fails."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.search import index as search_index
from chalicelib.search import structure
from chalicelib.search.bm25 import Terms
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.search.text import name_words


def operation(name: str, description: str, method: str, path: str, label: str = "",
              tags: tuple[str, ...] = ()) -> Document:
    """A tool imported from an OpenAPI operation, with its stored vector; its summary is the
    description's first sentence."""
    return Document(f"acme/{name}", "acme", name, description, document_vector("acme", name, description),
                    structure.shaped(method, path, label, description.split(".")[0], tags))


# Other operations of the same made-up API, so each signal's spread is an API's, not two docs'
FILLER = [("list-labels", "List the labels of a repository.", "GET", "/repos/{owner}/{repo}/labels", "listLabels"),
          ("get-repo", "Get a repository.", "GET", "/repos/{owner}/{repo}", "getRepo"),
          ("delete-project", "Delete a project.", "DELETE", "/projects/{id}", "deleteProject"),
          ("update-user", "Update the signed-in user's profile.", "PATCH", "/user", "updateUser"),
          ("list-releases", "List releases.", "GET", "/repos/{owner}/{repo}/releases", "listReleases"),
          ("create-gist", "Create a gist.", "POST", "/gists", "createGist"),
          ("get-billing", "Billing usage for an organization.", "GET", "/orgs/{org}/billing", "getBilling"),
          ("star-repo", "Star a repository for the user.", "PUT", "/user/starred/{owner}/{repo}", "starRepo")]


@functools.cache
def filler() -> tuple[Document, ...]:
    return tuple(operation(*row) for row in FILLER)


def ranked(docs: list[Document], query: str, *, shaped: bool = True) -> list[str]:
    """Names best first among `docs` and FILLER, with their structure or without it (today's ranking)."""
    docs = [*docs, *filler()]
    built = SearchIndex.build(docs if shaped else [replace(doc, structure=None) for doc in docs])
    return [key.split("/", 1)[1] for key, _ in built.search(query, limit=10)]


def first_of(order: list[str], *names: str) -> str:
    return min(names, key=lambda name: order.index(name) if name in order else len(order))


def test_a_read_request_ranks_the_read_operation_first() -> None:
    # GIVEN a write whose prose says more about sales orders than the read's does
    docs = [operation("create-sales-order", "Create a sales order in Unleashed: the sales order's lines, customer "
                      "and warehouse.", "POST", "/salesorders", "createSalesOrder"),
            operation("list-sales-orders", "Orders placed so far.", "GET", "/salesorders", "listSalesOrders")]
    # WHEN a person asks to see the sales orders
    query = "show the unleashed sales orders"
    # THEN the read comes first, where without structure the write did
    assert first_of(ranked(docs, query), "create-sales-order", "list-sales-orders") == "list-sales-orders"
    assert first_of(ranked(docs, query, shaped=False), "create-sales-order", "list-sales-orders") == "create-sales-order"


def test_a_write_request_ranks_the_write_operation_first() -> None:
    # GIVEN a read whose prose mentions creating
    docs = [operation("get-webhooks", "Webhooks: every webhook created for the account, newest created first.",
                      "GET", "/webhooks", "getWebhooks"),
            operation("post-webhooks", "Subscribes a URL.", "POST", "/webhooks", "postWebhooks")]
    # WHEN a person asks to create one
    query = "create a webhook"
    # THEN the write comes first, where without structure the read did
    assert first_of(ranked(docs, query), "get-webhooks", "post-webhooks") == "post-webhooks"
    assert first_of(ranked(docs, query, shaped=False), "get-webhooks", "post-webhooks") == "get-webhooks"


def test_a_shorter_operation_covering_the_request_ranks_ahead_of_one_adding_words() -> None:
    # GIVEN create-issue and create-issue-type, the longer one with the closer prose (the shorter's
    # summary says what it does, as real ones do, but its prose goes on about other things)
    docs = [operation("create-issue", "Create an issue. Anyone with pull access to a repository can open one; it "
                      "notifies watchers, and may be rate limited.", "POST", "/repos/{owner}/{repo}/issues",
                      "createIssue"),
            operation("create-issue-type", "Create an issue type for an organization.", "POST",
                      "/orgs/{org}/issue-types", "createIssueType")]
    # WHEN a person asks to create an issue
    query = "create an issue"
    # THEN create-issue comes first, where without structure create-issue-type did
    assert first_of(ranked(docs, query), "create-issue", "create-issue-type") == "create-issue"
    assert first_of(ranked(docs, query, shaped=False), "create-issue", "create-issue-type") == "create-issue-type"


def test_a_plural_read_ranks_the_collection_ahead_of_one_item() -> None:
    # GIVEN the list of invoices and one invoice, the single one described at more length
    docs = [operation("get-invoices", "Paginated.", "GET", "/account/invoices", "getInvoices"),
            operation("get-invoice", "One of your invoices: the invoice's date, total and the invoices it "
                      "replaces.", "GET", "/account/invoices/{invoiceId}", "getInvoice")]
    # WHEN a person asks for their invoices
    query = "show my invoices"
    # THEN the collection comes first, where without structure the item did
    assert first_of(ranked(docs, query), "get-invoices", "get-invoice") == "get-invoices"
    assert first_of(ranked(docs, query, shaped=False), "get-invoices", "get-invoice") == "get-invoice"


def test_path_words_count_where_the_name_says_nothing() -> None:
    # GIVEN operations without an operationId, named by a hash, whose prose does not name the resource
    docs = [operation("get-repos-1b2c3d", "Returns them, paginated.", "GET", "/repos/{owner}/{repo}/labels"),
            operation("get-repos-9e8f7a", "Returns them, paginated.", "GET", "/repos/{owner}/{repo}/issues")]
    # WHEN a person asks for a repository's issues
    order = ranked(docs, "list issues in a repository")
    # THEN the path tells them apart: the issues come first
    assert order[0] == "get-repos-9e8f7a"
    assert ranked(docs, "list issues in a repository", shaped=False)[0] != "get-repos-9e8f7a"


def test_path_and_operation_id_words_join_the_name_field() -> None:
    # GIVEN an imported operation named by a hash
    doc = operation("get-repos-9e8f7a", "Returns them.", "GET", "/repos/{owner}/{repo}/pullrequests", "listPulls")
    # WHEN its keyword terms are taken
    terms = Terms.of(doc, name_words(doc.name, doc.description))
    # THEN its path and operationId words are in its name field; without structure they are not
    assert {"pullrequest", "pull", "repository"} <= terms.named
    bare = replace(doc, structure=None)
    assert not {"pullrequest", "pull"} & Terms.of(bare, name_words(bare.name, bare.description)).named


def test_glued_path_words_match_two_words_of_the_request() -> None:
    # GIVEN a collection whose path glues "pull" and "requests"
    shapes = structure.Shapes.build([structure.shaped("POST", "/repos/{owner}/{repo}/pullrequests"),
                                     structure.shaped("POST", "/repos/{owner}/{repo}/labels")])
    # WHEN a person asks to open a pull request
    scores = shapes.scores("open a pull request", ["open", "pull", "request"])
    # THEN the pull requests' operation covers the request
    assert scores[0] > scores[1]


@pytest.mark.parametrize(("query", "kind"), [("list the orders", structure.READ), ("what orders are open", structure.READ),
                                             ("add an order", structure.CREATE), ("rename a folder", structure.UPDATE),
                                             ("remove a user", structure.DELETE), ("orders of today", 0),
                                             ("comment on an issue", structure.CREATE),
                                             ("tag a release", structure.CREATE), ("list the tags", structure.READ),
                                             ("delete a comment", structure.DELETE)])
def test_a_request_s_intent_is_its_first_action_verb(query: str, kind: int) -> None:
    assert structure.intent(query) == kind


def test_an_operation_s_intent_comes_from_its_own_verb_before_its_method() -> None:
    # a POST that searches says so in its operationId; a POST without a verb is a create
    assert structure.shaped("POST", "/items/search", "getSearchResults").intent == structure.READ
    assert structure.shaped("POST", "/credentials/{id}/revoke", "deleteCredential").intent == structure.DELETE
    assert structure.shaped("POST", "/items").intent == structure.CREATE
    assert structure.shaped("DELETE", "/items/{id}").intent == structure.DELETE


def test_docs_without_structure_rank_exactly_as_without_the_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN authored tools (no structure), some of whose prose says list or create
    docs = [Document(f"acme/{n}", "acme", n, d, document_vector("acme", n, d)) for n, d in [
        ("list-sales-orders", "List sales orders."), ("create-sales-order", "Create a sales order."),
        ("sales-report", "A report of sales per month."), ("delete-order", "Delete an order.")]]
    built = SearchIndex.build(docs)
    queries = ["list sales orders", "create an order", "sales per month", "remove an order"]
    # WHEN they are ranked with the structure signal and with its weight at zero
    with_signal = [built.search(query) for query in queries]
    monkeypatch.setattr(search_index, "W_STRUCTURE", 0.0)
    # THEN every key and score is the same
    assert with_signal == [built.search(query) for query in queries]


@pytest.mark.parametrize("origin", [None, {"kind": "mcp", "key": "tools/list"}, {"kind": "openapi"},
                                    {"kind": "openapi", "key": 7}, {"kind": "openapi", "key": "GET"},
                                    "GET /x", {"kind": "openapi", "key": ["GET /x"]}])
def test_only_an_openapi_import_has_structure(origin: Any) -> None:
    # authored tools, an MCP server's tools and malformed origins are neutral, never an error
    assert structure.of({"description": "x"}, origin) is None


@pytest.mark.parametrize("definition", [{}, {"annotations": "x"}, {"annotations": {"title": 5}},
                                        {"annotations": {"title": "Zap " * 1000}}])
def test_odd_definitions_still_give_the_path_s_structure(definition: dict[str, Any]) -> None:
    found = structure.of(definition, {"kind": "openapi", "key": "GET /a/{b}/c%20d/{}", "label": 3})
    assert found is not None and found.intent == structure.READ and "c" in found.resources


def test_an_updated_index_ranks_as_a_fresh_build_of_the_same_docs() -> None:
    # GIVEN an index of two operations, then a third added in place
    first = [operation("get-invoices", "Invoices.", "GET", "/invoices", "getInvoices"),
             operation("create-invoice", "Invoices.", "POST", "/invoices", "createInvoice")]
    added = operation("delete-invoice", "Invoices.", "DELETE", "/invoices/{id}", "deleteInvoice")
    updated = SearchIndex.build(first).updated([added])
    # WHEN both are searched
    fresh = SearchIndex.build([*first, added])
    # THEN they answer the same (the structure side taken up in place too)
    for query in ("remove an invoice", "list invoices", "create an invoice"):
        assert updated.search(query) == fresh.search(query)


def test_an_authored_http_tool_has_the_structure_of_its_request() -> None:
    # GIVEN an authored tool calling GET /orders, and a tool with no request (an MCP server's)
    authored = structure.of({"name": "list-orders", "request": {"method": "GET", "url": "https://api.shop.test/v1/orders?x=1"}},
                            None)
    # THEN the first has its request's intent and resource, as an imported operation would; the second none
    assert authored is not None and authored.intent == structure.intent("list orders") and "order" in authored.resources
    assert structure.of({"name": "echo", "upstream": {"server": "s", "tool": "echo"}}, {"kind": "upstream"}) is None


def test_a_request_naming_a_vendor_ranks_its_authored_tool_above_another_vendors_import() -> None:
    # GIVEN a toolbox mixing an imported operation about orders and a shop's authored order tools
    imported = Document("orders9/list-customer-orders", "orders9", "list-customer-orders",
                        "List a customer's orders.", document_vector("orders9", "list-customer-orders", "List a customer's orders."),
                        structure.shaped("GET", "/customers/{id}/orders", "listCustomerOrders", "List a customer's orders"))

    def authored(name: str, description: str, method: str, url: str) -> Document:
        definition = {"name": name, "request": {"method": method, "url": url}}
        return Document(f"shop7/{name}", "shop7", name, description, document_vector("shop7", name, description),
                        structure.of(definition, None))

    shop = [authored("list-orders", "List shop7 sales orders for a customer.", "GET", "http://127.0.0.1:9/orders"),
            authored("create-order", "Create a shop7 sales order.", "POST", "http://127.0.0.1:9/customers/{customer}/orders")]
    # WHEN a request names the shop
    order = ranked([imported, *shop], "shop7 orders")
    # THEN the shop's tools come first, also with the authored tools left without structure (the
    # request names the shop: the import's structure is kept out)
    assert set(order[:2]) == {"list-orders", "create-order"}
    unshaped = [replace(doc, structure=None) for doc in shop]
    assert set(ranked([imported, *unshaped], "shop7 orders")[:2]) == {"list-orders", "create-order"}
    # AND without the vendor's name the import's structure counts, and the shop's own structure
    # keeps its list of orders ahead of it
    assert ranked([imported, *shop], "sales orders")[0] == "list-orders"


def test_a_request_naming_a_vendor_keeps_another_vendors_structure_out() -> None:
    # GIVEN two shops with the same authored order tools (the e2e tests' toolbox: many such shops)
    def authored(vendor: str, name: str, method: str) -> Document:
        description = f"{name.replace('-', ' ').capitalize()} in the shop."
        definition = {"name": name, "request": {"method": method, "url": f"http://127.0.0.1:9/{name}"}}
        return Document(f"{vendor}/{name}", vendor, name, description, document_vector(vendor, name, description),
                        structure.of(definition, None))

    docs = [authored(shop, name, method) for shop in ("shop1f931ee2", "shop8de1a36d", "shop-north")
            for name, method in (("list-orders", "GET"), ("create-order", "POST"))]
    index = SearchIndex.build(docs)
    # WHEN a verbless request names one shop (one word, or a hyphenated name's words)
    for shop in ("shop1f931ee2", "shop-north"):
        hits = [key for key, _ in index.search(f"{shop.replace('-', ' ')} orders", limit=3)]
        # THEN both of its tools come first: another shop's list-orders, lifted by the verbless
        # request's lean to reads, does not cut in
        assert set(hits[:2]) == {f"{shop}/list-orders", f"{shop}/create-order"}, hits
    # AND a request naming no vendor still gets the lean (a list first)
    assert index.search("orders", limit=1)[0][0].endswith("/list-orders")


@pytest.mark.parametrize("definition", [
    {"name": "x", "request": "GET /orders"}, {"name": "x", "request": {"method": 7, "url": "http://h/orders"}},
    {"name": "x", "request": {"method": "GET", "url": None}}, {"name": None, "request": {"method": "GET", "url": "/o"}},
    {"name": "x", "request": {"method": "GET", "url": "http://h" + "/{a}" * 5000 + "?" * 100}},
    {"name": "x", "request": {"method": "BREW", "url": "::::////\u0000\ud800"}},
])
def test_an_odd_authored_request_gives_no_structure_or_a_harmless_one(definition: dict[str, Any]) -> None:
    # GIVEN a stored definition whose request a hostile author shaped oddly  WHEN its structure is read
    found = structure.of(definition, None)
    # THEN it is none, or one the index can hold (no error; an unknown method gives no intent)
    assert found is None or (found.intent in range(5) and all(isinstance(word, str) for word in found.resources))
    if definition["request"] == {"method": "BREW", "url": "::::////\u0000\ud800"}:
        assert found is not None and found.intent == 0


# --- issue 25, goal 2: tags, verbs that are nouns, creates of a collection, context nouns, verbless
# plurals, the summary. Each rule's test ranks the same docs with the rule off too (its weight at
# zero, or the docs without their tags) and checks the order was the other one then.


def test_a_tag_names_what_the_path_does_not() -> None:
    # GIVEN two comment lists whose paths say "thread" and "review"; only the tags say "issue"
    def docs(tagged: bool) -> list[Document]:
        return [operation("list-thread-comments", "List comments.", "GET", "/threads/{id}/comments",
                          "listThreadComments", ("Issues",) if tagged else ()),
                operation("list-review-comments", "List comments on a review of an issue.", "GET",
                          "/reviews/{id}/comments", "listReviewComments", ("Reviews",) if tagged else ())]
    query = "list comments on an issue"
    names = ("list-thread-comments", "list-review-comments")
    # THEN with its tags the issue thread's comments come first, without them the review's did
    assert first_of(ranked(docs(True), query), *names) == "list-thread-comments"
    assert first_of(ranked(docs(False), query), *names) == "list-review-comments"


def test_a_verb_that_is_its_own_noun_asks_for_a_create(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a create and a read of an issue's comments
    docs = [operation("create-issue-comment", "Create a comment.", "POST", "/issues/{number}/comments",
                      "createIssueComment"),
            operation("get-issue-comment", "Get a comment on an issue.", "GET", "/issues/comments/{comment_id}",
                      "getIssueComment")]
    names = ("create-issue-comment", "get-issue-comment")
    # WHEN a person says "comment on an issue", THEN the create comes first ...
    assert first_of(ranked(docs, "comment on an issue"), *names) == "create-issue-comment"
    # ... and without the rule ("comment" no verb) the read did
    monkeypatch.setattr(structure, "NOUN_VERBS", frozenset())
    assert first_of(ranked(docs, "comment on an issue"), *names) == "get-issue-comment"


def test_a_create_ranks_the_create_of_a_collection_ahead_of_one_under_an_item(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN POST /snippets and POST /snippets/{workspace}, whose prose is the closer
    docs = [operation("post-snippets", "Creates a snippet, with its files, for the user.", "POST", "/snippets"),
            operation("post-snippets-workspace", "Create a snippet.", "POST", "/snippets/{workspace}")]
    names = ("post-snippets", "post-snippets-workspace")
    assert first_of(ranked(docs, "create a snippet"), *names) == "post-snippets"
    monkeypatch.setattr(structure, "W_CREATE_MANY", 0.0)
    assert first_of(ranked(docs, "create a snippet"), *names) == "post-snippets-workspace"


def test_nouns_after_the_first_preposition_say_where_not_what(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the users, and a user's latest media
    docs = [operation("get-users", "Gets users.", "GET", "/Users", "GetUsers"),
            operation("get-latest-media", "Gets latest media.", "GET", "/Users/{userId}/Items/Latest",
                      "GetLatestMedia")]
    query, names = "list all users on the media server", ("get-users", "get-latest-media")
    # THEN the users come first: "media server" says where
    assert first_of(ranked(docs, query), *names) == "get-users"
    monkeypatch.setattr(structure, "CONTEXT_ASK", 1.0)
    assert first_of(ranked(docs, query), *names) == "get-latest-media"


def test_a_verbless_plural_request_leans_to_a_read_of_a_collection_it_covers(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a create whose prose says more about unleashed sales orders than the list's does
    docs = [operation("list-sales-orders", "Pages of sales orders.", "GET", "/SalesOrders", "listSalesOrders"),
            operation("create-sales-order", "Unleashed sales order: create one.", "POST", "/SalesOrders",
                      "createSalesOrder")]
    names = ("list-sales-orders", "create-sales-order")
    # WHEN a request names sales orders in the plural with no verb, THEN the list comes first
    assert first_of(ranked(docs, "unleashed sales orders"), *names) == "list-sales-orders"
    monkeypatch.setattr(structure, "W_NO_VERB", 0.0)
    assert first_of(ranked(docs, "unleashed sales orders"), *names) == "create-sales-order"


def test_a_verbless_request_does_not_lean_where_no_operation_clearly_covers_it() -> None:
    # the lean needs the request's nouns covered: here nothing covers "weather", so no doc moves
    shapes = structure.Shapes.build([structure.shaped("GET", "/SalesOrders"), structure.shaped("POST", "/SalesOrders")])
    assert list(shapes.scores("weather forecasts", ["weather", "forecasts"])) == [0.0, 0.0]


def test_a_summary_that_is_the_request_ranks_ahead_of_one_adding_words(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two creates whose paths say nothing; one's summary is "Create an issue", the other's
    # "Create an issue for a project", and the longer one's prose is the closer
    docs = [operation("new-issue", "Create an issue. Anyone with access to a project may.", "POST", "/v1/call"),
            operation("new-issue-type", "Create an issue for a project.", "POST", "/v1/invoke")]
    names = ("new-issue", "new-issue-type")
    assert first_of(ranked(docs, "create an issue"), *names) == "new-issue"
    monkeypatch.setattr(structure, "W_SUMMARY", 0.0)
    assert first_of(ranked(docs, "create an issue"), *names) == "new-issue-type"


# --- tags from a hostile document: bounded, strings only, one line each, never an error


def _tagged(tags: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "servers": [{"url": "https://api.example.com"}],
            "paths": {"/things": {"get": {"operationId": "listThings", "tags": tags,
                                          "responses": {"200": {"description": "ok"}}}}}}


@pytest.mark.parametrize(("tags", "kept"), [
    (["Issue tracker", "Issue tracker", "  LiveTv "], ("Issue tracker", "LiveTv")),
    (["x" * 100_000], ("x" * 60,)),  # huge: cut
    ([f"tag{i}" for i in range(10_000)], ("tag0", "tag1", "tag2", "tag3")),  # many: the first four
    ([7, None, "ok", {"a": 1}, ["b"], True], ("ok",)),  # non-strings: left out
    ([7, None, {"a": 1}, ["b"], "late"], ()),  # ... and they count among the four read
    (["Issue\x00 tracker\n\u2028x\x1b[31m", "\t\r\n", ""], ("Issue tracker x [31m",)),  # control characters
    ("pets", ()), ({"name": "pets"}, ()), (None, ()), (12, ()),  # not a list
])
def test_an_import_keeps_a_few_short_one_line_tags(tags: Any, kept: tuple[str, ...]) -> None:
    from chalicelib import openapi

    (found,) = openapi.candidates(_tagged(tags), vendor="acme")
    assert found.definition is not None and found.tags == kept


def test_an_imported_tool_s_origin_holds_its_tags_and_search_reads_them(admin: Any) -> None:
    # GIVEN a document whose operation has tags, one of them hostile
    document = _tagged(["Issue tracker", "Evil\u0000\n" + "y" * 5000])
    # WHEN it is imported
    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "acme", "document": document})
    assert answer.status_code == 200, answer.body
    # THEN the tool's origin keeps them cleaned and cut, and its structure has their words
    origin = admin.call("GET", "/v1/tools/acme/list-things").json_body["versions"][-1]["origin"]
    assert origin["tags"] == ["Issue tracker", "Evil " + "y" * 55]
    found = structure.of({}, origin)
    assert found is not None and {"issu", "tracker"} <= set(found.resources)


@pytest.mark.parametrize("tags", [["z" * 1_000_000] * 10_000, "Issue tracker", [None, 3, {"a": "b"}], {"x": 1}])
def test_stored_tags_search_reads_are_bounded_whatever_the_origin_holds(tags: Any) -> None:
    # an origin written some other way (or by an older import) is read with the same bounds
    found = structure.of({}, {"kind": "openapi", "key": "GET /things", "tags": tags})
    assert found is not None and len(found.resources) <= 2 + structure.TAGS_READ
    assert all(len(word) <= structure.TAG_CHARS for word in found.resources)
