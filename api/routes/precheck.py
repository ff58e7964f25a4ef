"""``GET /precheck/rules``: the pre-check rules judge canaries learned;
``DELETE /precheck/rules/{rule_id}``: take one out of force (docs/judge-canaries.md)."""

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from amaris.logs import loggable
from amaris.models import ErrorDetail, ErrorResponse
from amaris.trust.rule_store import LearnedRule, PrecheckRuleStore, RuleSet, UnknownRuleError
from api.deps import ServicesDep
from api.errors import AUTH_ERRORS, INPUT_ERRORS, Responses, error_response

router = APIRouter(tags=["precheck"])
log = logging.getLogger("amaris.api")

_REMOVE_ERRORS: Responses = {
    **AUTH_ERRORS,
    404: {"model": ErrorResponse, "description": "No learned rule in force has that id."},
    422: INPUT_ERRORS[422],
}


def _store(services: ServicesDep) -> PrecheckRuleStore:
    if services.precheck_rules is None:  # every service built by amaris.app has one
        raise RuntimeError("this service has no learned pre-check rules")
    return services.precheck_rules


@router.get(
    "/precheck/rules", response_model=RuleSet, responses={**AUTH_ERRORS, 422: INPUT_ERRORS[422]}
)
async def learned_rules(
    services: ServicesDep,
    removed: Annotated[
        bool, Query(description="Also list the rules taken out of force (removed_in set).")
    ] = False,
) -> RuleSet:
    """The learned pre-check rules in force (oldest first) and the rule-set version: a
    reply equal to a rule's text (normalised; as a reply to its prompt unless
    `any_prompt`) gets `scoring.precheck.floor` without a judge call."""
    store = _store(services)
    await asyncio.to_thread(store.refresh)
    return store.rule_set(removed=removed)


@router.delete("/precheck/rules/{rule_id}", response_model=LearnedRule, responses=_REMOVE_ERRORS)
async def remove_rule(
    services: ServicesDep,
    rule_id: Annotated[str, Path(min_length=1, max_length=64, description="The rule's id.")],
) -> LearnedRule | JSONResponse:
    """Take a learned rule out of force (a new rule-set version); it stays listed with
    `removed=true`, and no alarm brings it back."""
    store = _store(services)
    try:
        removed = await asyncio.to_thread(store.remove, rule_id)
    except UnknownRuleError:
        message = f"no learned rule in force has id {loggable(rule_id)}"
        detail = ErrorDetail(field="rule_id", message=message)
        log.warning("404 DELETE /precheck/rules/{rule_id}: %s", message)
        return error_response(404, "not_found", [detail])
    log.info("learned pre-check rule %s removed (rule set v%d)", rule_id, store.version)
    return removed
