"""Structured logs carry the request id (the same one as in the LLM call log)."""

import json
import logging

import pytest

from amaris.logs import configure_logging
from amaris.request_context import request_id_var


def test_json_lines_with_request_id(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    token = request_id_var.set("req-42")
    try:
        logging.getLogger("amaris.test").warning("unscored rollout %s", "r1")
    finally:
        request_id_var.reset(token)
    logging.getLogger("amaris.test").info("no request")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(x["level"], x["logger"], x["request_id"], x["message"]) for x in lines] == [
        ("WARNING", "amaris.test", "req-42", "unscored rollout r1"),
        ("INFO", "amaris.test", "-", "no request"),
    ]
    configure_logging("INFO", "text")


def test_text_lines_with_request_id(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "text")
    token = request_id_var.set("abc")
    try:
        logging.getLogger("amaris.test").error("judge down")
    finally:
        request_id_var.reset(token)
    assert capsys.readouterr().err.rstrip().endswith("ERROR amaris.test [abc] judge down")
