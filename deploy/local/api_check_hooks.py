"""The gateway's rules that an OpenAPI document cannot state, for
deploy/local/api-check.sh.

schemathesis' `positive_data_acceptance` check fails a request the document
calls valid that the gateway refuses. The document states every rule on
one value (crates/http/src/gateway/contract.rs writes those); the rules
below relate two values, or a value and the clock, which JSON Schema cannot
say. Each is stated in the parameter's or field's description, and a
refusal by one of them (a 422 naming that field, with that reason) is all
this hook lets through. Any other refusal of a valid request fails the run.
"""

import json
import re

import schemathesis

# (route, the field the 422 names (a regular expression), the start of its
# detail).
UNSTATABLE = [
    # since <= occurred_at < until: an empty or reversed range.
    ("/v1/history", "since", "must be before until"),
    ("/v1/report", "since", "must be before until"),
    ("/v1/report/locations", "since", "must be before until"),
    # Which of sku, order_id, basket_id and unit a history asks for together.
    ("/v1/history", "unit", "give unit with sku alone"),
    ("/v1/history", "basket_id", "give basket_id alone"),
    ("/v1/history", "sku", "give sku, order_id, both, or basket_id"),
    # A deadline after now and at most 7 days ahead: the clock's rule.
    ("/v1/skus/{sku}/orders/{order_id}/deduct", "expires_at", ""),
    ("/v1/baskets/{basket_id}/hold", "expires_at", ""),
    # A history cursor names a position in the gateway's own topic.
    ("/v1/history", "after", "the cursor is a position in topic"),
    # A report's rows: its range over its interval, at most 100,000.
    ("/v1/report", "max_rows", ""),
    ("/v1/report/locations", "max_rows", ""),
    # A basket names each SKU once (JSON Schema's uniqueItems compares whole
    # lines, not their SKUs).
    ("/v1/baskets/{basket_id}/hold", r"lines\[\d+\]\.sku", ""),
    # A transfer's two locations differ.
    ("/v1/skus/{sku}/transfers/{transfer_id}", "to", "is the location the stock comes from"),
    # A sale window's closing after its opening, both from 1970 and at most
    # a year ahead: two values, and the clock.
    ("/v1/skus/{sku}/windows/{change_id}", "opens_at|closes_at", ""),
]


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keeps every failure but a 422 for one of the rules above, and a 413
    for the body limit (16 KiB), which bounds a whole request where the
    document bounds each field (1,000 units, each up to 128 bytes)."""
    if response.status_code == 413:
        return False
    if response.status_code != 422:
        return True
    try:
        problem = json.loads(response.content)
    except ValueError:
        return True
    field = problem.get("field")
    detail = problem.get("detail", "")
    for route, named, starts in UNSTATABLE:
        # A refusal's detail may lead with its field's name.
        if case.operation.path != route or not re.fullmatch(named, field or ""):
            continue
        said = detail.removeprefix(f"{field}: ")
        if said.startswith(starts):
            return False
    return True
