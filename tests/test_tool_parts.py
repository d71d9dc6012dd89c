"""Multi-part requests in the tool loadout: the splitter, the shared cap, and the stage itself
(real embedder, real Redis) on audit 10's support catalogue."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from agentmem import Hygiene
from agentmem.config import Settings
from agentmem.policy import policy_from_dict
from agentmem.stages.tool_parts import request_parts, with_parts

# The 44-tool support agent of audit 10: name | description | parameter names (a line that
# starts with spaces continues the one before).
SUPPORT = """
crm_search_customers | Search customers in the CRM by name, email or phone number. | query limit
crm_get_customer | Fetch a customer profile: contact details, tier, lifetime value and notes. |
    customer_id
crm_update_customer | Update a customer's contact details (email, phone, address). | customer_id
    email phone address
crm_add_note | Add an internal note to a customer's CRM record. | customer_id note
crm_merge_customers | Merge two duplicate customer records into one. | primary_id duplicate_id
orders_list | List a customer's recent orders with status and totals. | customer_id status
orders_get | Get one order: line items, prices, payment and fulfilment status. | order_id
orders_cancel | Cancel an order that has not shipped yet. | order_id reason
orders_modify_items | Change quantities or remove items on an unshipped order. | order_id
    changes
orders_change_address | Change the delivery address of an unshipped order. | order_id address
orders_reorder | Create a new order with the same items as a previous order. | order_id
refunds_create | Issue a refund for an order or specific items, to the original payment method
    or store credit. | order_id amount method reason
refunds_status | Check the status of a refund. | refund_id
refunds_eligibility | Check whether an order or item is eligible for a refund under the returns
    policy. | order_id sku
returns_create_rma | Create a return merchandise authorization (RMA) for items to be sent back.
    | order_id skus reason
returns_label | Generate a prepaid return shipping label for an RMA. | rma_id carrier
shipping_track | Track a shipment by tracking number: carrier events, location and ETA. |
    tracking_number
shipping_rates | Quote shipping rates for a destination and parcel weight. | destination
    weight_kg
shipping_file_claim | File a lost or damaged package claim with the carrier. | tracking_number
    type description
shipping_reroute | Ask the carrier to redirect an in-transit package to another address or
    pickup point. | tracking_number address
inventory_check | Check stock levels of a product SKU across warehouses. | sku
catalog_search_products | Search the product catalogue by keywords. | query category
catalog_get_product | Get product details: specs, price, compatibility and warranty. | sku
warranty_check | Check warranty coverage for a product serial number. | serial_number
warranty_open_repair | Open a warranty repair case for a defective product. | serial_number
    issue
billing_get_invoice | Retrieve an invoice PDF link and line items for an order. | order_id
billing_update_payment_method | Update the card on file for a customer. | customer_id token
billing_list_charges | List card charges for a customer in a date range. | customer_id since
loyalty_get_points | Get a customer's loyalty points balance and tier. | customer_id
loyalty_adjust_points | Add or deduct loyalty points as a goodwill gesture. | customer_id points
promo_create_coupon | Create a one-time discount coupon for a customer. | customer_id percent
promo_validate_code | Check whether a promo code is valid and what it gives. | code
subscriptions_get | Get a customer's subscription plan, renewal date and status. | customer_id
subscriptions_cancel | Cancel a customer's subscription at period end or immediately. |
    customer_id immediately
subscriptions_pause | Pause a subscription for a number of months. | customer_id months
tickets_create | Create a support ticket. | customer_id subject body priority
tickets_update | Update a ticket's status, priority or assignee. | ticket_id status priority
tickets_escalate | Escalate a ticket to tier-2 support or a supervisor. | ticket_id reason
tickets_search | Search past support tickets. | query customer_id
kb_search | Search the help-center knowledge base articles. | query
email_send_customer | Send an email to the customer from the support mailbox. | customer_id
    subject body
sms_send | Send an SMS text message to the customer's phone. | customer_id text
fraud_check_order | Run a fraud risk assessment on an order. | order_id
survey_send_csat | Send a customer satisfaction survey after resolution. | customer_id ticket_id
"""
TOOLS = [{"type": "function", "function": {
    "name": name, "description": description, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in parameters.split()},
        "required": parameters.split()[:1]}}}
    for name, description, parameters in (
        (field.strip() for field in row.split("|"))
        for row in SUPPORT.strip().replace("\n    ", " ").splitlines())]
SYSTEM = {"role": "system", "content": "You are Acme Store's customer support agent. Use the tools "
          "to look things up and act; never invent order data."}
CLAIM_AND_REPLACE = {"role": "user", "content": "It looks lost. Please file a claim with the carrier "
                     "and send me a replacement with the same items."}


def test_request_parts_are_the_clauses_that_ask_for_something():
    assert request_parts(CLAIM_AND_REPLACE["content"]) == [
        "Please file a claim with the carrier", "send me a replacement with the same items."]
    assert request_parts("Roll it back to the previous release and open a SEV2 incident; page the "
                         "payments team.") == ["Roll it back to the previous release",
                                               "open a SEV2 incident", "page the payments team."]
    assert request_parts("Good. Silence the latency alert for 2 hours, post a status page update "
                         "that we're monitoring, and tell #eng-incidents.") == [
        "Silence the latency alert for 2 hours", "post a status page update that we're monitoring",
        "tell #eng-incidents."]
    assert request_parts("Is latency back to normal now? Also check the 5xx error rate.") == [
        "Is latency back to normal now?", "Also check the 5xx error rate."]
    # A statement, a bare verb, a noun phrase after "and", a noun that is also a verb: one part.
    assert request_parts("We're getting paged: checkout-api p99 latency is over 2 seconds in "
                         "production. Investigate.") == []
    assert request_parts("Can you recommend any courses that teach both accounting principles and "
                         "investment strategies?") == []
    assert request_parts("Find the best thriller novels and book reviews from last year.") == []
    assert request_parts("Thanks.") == []


def test_request_parts_are_bounded():
    text = ("Cancel my subscription, update my phone number, email me the invoice and send a "
            "survey to my wife.")
    assert len(request_parts(text, most=4)) == 4
    assert request_parts(text) == [  # at most 3: the shortest neighbours merged
        "Cancel my subscription", "update my phone number; email me the invoice",
        "send a survey to my wife."]
    assert request_parts(text, most=1) == []


def test_with_parts_shares_the_cap_and_keeps_pins_on_top():
    whole = np.array([1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.1, 0.05, 0.0])
    keep = np.zeros(10, dtype=bool)
    keep[:7] = True  # the whole request's selection: a crowd of 7 within its margin
    pinned = np.zeros(10, dtype=bool)
    pinned[6] = True  # called in the last turn: on top of the cap
    part = np.zeros(10)
    part[[8, 9]] = [0.9, 0.6]  # the second clause's tools, both within 0.5 of its best
    added = with_parts(keep, pinned, whole, [part], [0.4], most=5, least=2)
    # the whole request's best 2, then turns: whole 3rd, part's best, whole 4th, part's 2nd
    assert np.flatnonzero(keep).tolist() == [0, 1, 2, 3, 6, 8]
    assert added == [[8]]
    # Room to spare: nothing the whole request kept is dropped, each part adds what is above
    # its floor.
    keep = np.zeros(10, dtype=bool)
    keep[:2] = True
    added = with_parts(keep, np.zeros(10, dtype=bool), whole, [part], [0.4], most=10, least=5)
    assert np.flatnonzero(keep).tolist() == [0, 1, 8, 9] and added == [[8, 9]]


@pytest.fixture
async def hygiene(data_dir):
    engine = Hygiene("off", settings=Settings(data_dir=data_dir))
    try:
        yield engine
    finally:
        await engine.aclose()
        engine.connector.close()


def _policy(parts: int = 3):
    return policy_from_dict({"name": f"tool-parts-{parts}", "stages": ["tools"], "embed": False,
                             "tools": {"max_tools": 10, "min_tools": 1, "min_offered": 8,
                                       "margin": 0.5, "parts": parts,
                                       "memory": {"enabled": False}}})


def _kept(result) -> list[str]:
    return [t["function"]["name"] for t in result.tools]


def _summary(result) -> dict:
    [run] = result.report.stages
    return next(d for d in run.decisions if d.action == "keep_tools").detail


async def test_each_part_of_a_request_keeps_its_tool(hygiene):
    """Audit 10: scored as one text, "file a claim" set the floor above every tool for "send me
    a replacement with the same items"; the stage kept 1 of 44 tools."""
    messages = [SYSTEM, CLAIM_AND_REPLACE]
    whole_only = await hygiene.apply(messages, tools=TOOLS, session_id=f"tp-{uuid.uuid4().hex}",
                                     policy=_policy(parts=0))
    assert "shipping_file_claim" in _kept(whole_only) and "orders_reorder" not in _kept(whole_only)

    result = await hygiene.apply(messages, tools=TOOLS, session_id=f"tp-{uuid.uuid4().hex}",
                                 policy=_policy())
    kept = _kept(result)
    assert {"shipping_file_claim", "orders_reorder"} <= set(kept) and len(kept) <= 10
    detail = _summary(result)
    assert list(detail["parts"]) == ["Please file a claim with the carrier",
                                     "send me a replacement with the same items."]
    assert "orders_reorder" in detail["parts"]["send me a replacement with the same items."]


async def test_a_steps_later_call_keeps_the_parts_tools_without_scoring_them_again(hygiene):
    session = f"tp-{uuid.uuid4().hex}"
    messages = [SYSTEM, CLAIM_AND_REPLACE]
    first = await hygiene.apply(messages, tools=TOOLS, session_id=session, policy=_policy())
    call = {"id": "call-1", "type": "function",
            "function": {"name": "shipping_file_claim", "arguments": '{"tracking_number": "1Z9"}'}}
    later = [*messages, {"role": "assistant", "content": None, "tool_calls": [call]},
             {"role": "tool", "tool_call_id": "call-1", "content": "Claim CL-7 filed with UPS."}]
    second = await hygiene.apply(later, tools=TOOLS, session_id=session, policy=_policy())
    # The step keeps what its first call offered (the parts' tools too), and the parts, the
    # same request, are not scored again: they would fill the place the pinned call left.
    assert set(_kept(first)) <= set(_kept(second)) and "orders_reorder" in _kept(second)
    assert "parts" not in _summary(second)
