"""find_tool's action rule (chalicelib/search/structure.py): an operation that performs an action on
one item (POST /servers/{id}/actions/poweron, /instances/{id}/boot) is found by the words people say
for that action ("turn on", "restart", "make it bigger"), ahead of the item's plain read or create.

Each ranking test also ranks the same docs with the rule's tables emptied, and checks that the order
was the other one then: without the rule the test fails."""

from __future__ import annotations

import pytest

from chalicelib.search import structure
from tests.test_ranking import first_of, operation, ranked


def _servers() -> list:
    return [operation("get-server", "Get a Server. Returns a server by its ID, with its status and power state.",
                      "GET", "/servers/{id}"),
            operation("create-server", "Create a Server. Starts a new server; it is powered on when ready.",
                      "POST", "/servers"),
            operation("poweron", "Power on a Server. Starts a server.", "POST", "/servers/{id}/actions/poweron"),
            operation("reboot", "Soft-reboot a Server.", "POST", "/servers/{id}/actions/reboot"),
            operation("resize-volume", "Resize Volume. Changes the size of a volume.", "POST",
                      "/volumes/{id}/actions/resize"),
            operation("create-volume", "Create a Volume. A bigger volume costs more.", "POST", "/volumes")]


def _without_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(structure, "ACTIONS", {})
    monkeypatch.setattr(structure, "_ACTION_VERBS", frozenset())
    monkeypatch.setattr(structure, "_SIZES", frozenset())


@pytest.mark.parametrize(("query", "gold", "other"), [
    ("turn on a server", "poweron", "get-server"),
    ("restart a server", "reboot", "create-server"),
    ("make a volume bigger", "resize-volume", "create-volume"),
])
def test_a_request_for_an_action_ranks_the_operation_performing_it_first(
        monkeypatch: pytest.MonkeyPatch, query: str, gold: str, other: str) -> None:
    # GIVEN a server's and a volume's operations, some of them actions on one item
    # WHEN a person asks for the action in their own words, THEN the action comes first ...
    assert first_of(ranked(_servers(), query), gold, other) == gold
    # ... and without the rule (no table of action words) the item's read or create did
    _without_actions(monkeypatch)
    assert first_of(ranked(_servers(), query), gold, other) == other


@pytest.mark.parametrize(("query", "actions", "kind"), [
    ("turn on a server", {"start", "enable"}, structure.UPDATE),
    ("hard power off a machine", {"stop"}, structure.UPDATE),
    ("power on a stopped linode", {"start"}, structure.UPDATE),  # the first verb phrase, not "stopped"
    ("make a volume bigger", {"resize"}, structure.UPDATE),  # a comparative of size anywhere
    ("detach a volume", {"detach"}, structure.DELETE),  # the verb's own intent
    ("approve a pull request", {"approve"}, 0),  # as said, the request's own intent kept
    ("list the servers", set(), 0),  # a read: no action
    ("create a server", set(), 0),
])
def test_a_request_s_action_is_its_first_verb_phrase(query: str, actions: set[str], kind: int) -> None:
    assert structure.asked_actions(query) == (frozenset(actions), kind)


@pytest.mark.parametrize(("method", "path", "actions", "kind", "item"), [
    ("POST", "/servers/{id}/actions/poweron", {"start", "poweron"}, structure.UPDATE, "server"),
    ("POST", "/linode/instances/{linodeId}/boot", {"start", "boot"}, structure.UPDATE, "instanc"),
    ("POST", "/servers/{id}/actions/attach_iso", {"attach", "attach_iso"}, structure.UPDATE, "iso"),
    ("POST", "/repos/{r}/pullrequests/{id}/merge", {"merge"}, structure.CREATE, "pullrequest"),  # its method's
    ("DELETE", "/repos/{r}/pullrequests/{id}/approve", {"approve"}, structure.DELETE, "pullrequest"),
    ("POST", "/volumes/{id}/actions/detach", {"detach"}, structure.DELETE, "volum"),
])
def test_an_operation_s_action_is_its_last_segment_after_an_item_or_actions(
        method: str, path: str, actions: set[str], kind: int, item: str) -> None:
    found = structure.shaped(method, path, tags=("Server Actions",))
    assert set(found.actions) >= actions and found.intent == kind
    assert found.resources[item] == structure.HEAD_WEIGHT  # what it acts on weighs as a head
    assert "action" not in found.resources  # the "actions" segment and tag say nothing of what


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/domains/{id}/records"),  # a sub-collection: a noun, no action
    ("GET", "/servers/{id}/actions/poweron"),  # a read is no action
    ("POST", "/servers/{id}/actions"),  # no last segment after "actions"
    ("POST", "/servers/{id}"),
])
def test_a_sub_collection_or_a_read_is_no_action(method: str, path: str) -> None:
    assert structure.shaped(method, path).actions == frozenset()


# --- a plural that names no resource asks for no collection


def test_a_plural_naming_no_resource_does_not_ask_for_a_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the servers and one server
    docs = [operation("get-servers", "Get all Servers. Returns all existing server objects.", "GET", "/servers"),
            operation("get-server", "Get a Server. Returns a specific server object.", "GET", "/servers/{id}")]
    query, names = "get details of a server", ("get-server", "get-servers")
    # WHEN a request says "details" (plural, but no operation's resource) of one server
    # THEN the one server comes first ...
    assert first_of(ranked(docs, query), *names) == "get-server"

    # ... and had every plural asked for many, the collection did
    def any_plural(query: str, content: list[str], resources: object) -> bool:
        return any(w.endswith("s") and structure.stem(w) != w for w in content)

    monkeypatch.setattr(structure, "_asks_many", any_plural)
    assert first_of(ranked(docs, query), *names) == "get-servers"


# --- a request about its asker


def test_who_am_i_finds_the_operation_about_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the current user, a user by name, and a user's emails
    docs = [operation("get-user", "Get current user. Returns the currently logged in user.", "GET", "/user"),
            operation("get-users-name", "Get a user. Gets the public profile for a user.", "GET", "/users/{name}"),
            operation("list-emails", "List email addresses for current user.", "GET", "/user/emails")]
    # WHEN a request of stop words only asks who its asker is, THEN the current user comes first ...
    assert ranked(docs, "who am I")[:1] == ["get-user"]
    # ... politeness alone still finds nothing ...
    assert ranked(docs, "can you please help me") == []
    # ... and without the rule "who am I" found nothing either
    monkeypatch.setattr(structure, "_QUESTIONS", frozenset())
    assert ranked(docs, "who am I") == []


@pytest.mark.parametrize(("path", "summary", "asker"), [
    ("/user", "Get current user", True), ("/Users/Me", "Gets the user based on auth token.", True),
    ("/user", "Get the authenticated user", True), ("/accounts/self", "", True),
    ("/user/emails", "List email addresses for current user", False), ("/users/{id}", "Get a user", False),
    ("/status", "Get the current status", False)])
def test_an_operation_is_about_its_caller_by_its_path_or_summary(path: str, summary: str, asker: bool) -> None:
    assert (structure.ASKER in structure.shaped("GET", path, "", summary).resources) is asker


# --- a filter "by" an attribute reads the collection


@pytest.mark.parametrize(("query", "many"), [("find an ISO by name", True), ("find an ISO by its id", False), ("find an ISO by the name", True),
                                             ("find an ISO", False), ("get a user by email", True)])
def test_a_read_by_an_attribute_asks_for_the_collection(query: str, many: bool) -> None:
    # the ISOs and one ISO; a read "by name" filters the collection, one "by its id" names one
    shapes = structure.Shapes.build([structure.shaped("GET", "/isos"), structure.shaped("GET", "/isos/{id}")])
    collection, item = shapes.scores(query, structure.content_words(query))
    assert bool(collection > item) == many



def test_search_reads_at_most_label_chars_of_a_stored_label(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an imported tool stored before the import cut operationIds: a label of 50,000 words,
    # and every text the structure reading splits into words recorded
    label = "list-widgets-" + "-".join(f"word{index}" for index in range(50_000))
    origin = {"kind": "openapi", "key": "GET /widgets", "label": label}
    split, seen = structure._split, []
    monkeypatch.setattr(structure, "_split", lambda text: seen.append(text) or split(text))
    # WHEN the search reads its structure (at every index build)
    read = structure.of({"name": "list-widgets"}, origin)
    # THEN only the label's first LABEL_CHARS characters were split, and they give its structure
    assert max(map(len, seen)) <= structure.LABEL_CHARS
    assert read == structure.of({"name": "list-widgets"}, {**origin, "label": label[:structure.LABEL_CHARS]})
