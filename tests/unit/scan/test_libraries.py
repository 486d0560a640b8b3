"""Fail closed: a call the scan cannot see into is unknown; reads and writes it knows are judged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from airflow_crashsafe.scan.libraries import family_of_module
from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable

RUN = ["2031-07-14"]
S3 = boto3.client("s3", region_name="eu-west-1")


def _lambda_invoke() -> None:
    client = boto3.client("lambda", region_name="eu-west-1")
    client.invoke(FunctionName="refresh-cache", InvocationType="Event")


def _s3_reads(ds: str) -> list:
    paginator = S3.get_paginator("list_objects_v2")
    keys = [o["Key"] for page in paginator.paginate(Bucket="b", Prefix=ds) for o in page.get("Contents", [])]
    S3.head_object(Bucket="b", Key=keys[0])
    S3.download_file("b", keys[0], "/tmp/x")
    return keys


def _module_level_client() -> None:
    S3.restore_object(Bucket="b", Key="k", RestoreRequest={"Days": 1})


def _not_installed(ds: str) -> None:
    from acme_billing.client import BillingClient  # type: ignore[import-not-found]

    BillingClient.from_env().sync_invoices(day=ds)


def _installed_unknown() -> None:
    import grpc

    channel = grpc.insecure_channel("orders.internal:50051")
    channel.unary_unary("/orders.Orders/Create")(b"")


def _pure_frames(path: str) -> dict:
    import json
    import math
    from datetime import datetime

    import pandas as pd

    frame = pd.read_csv(path)
    frame = frame.assign(day=datetime.now().date(), root=frame.value.apply(math.sqrt))
    return json.loads(frame.to_json())


def _redis_counter() -> None:
    import redis

    r = redis.Redis(host="cache")
    r.incr("runs")


def _redis_cache(ds: str) -> None:
    import redis

    r = redis.Redis(host="cache")
    r.set(f"report:{ds}", "ok")
    r.expire(f"report:{ds}", 60)


def _es_index(doc: dict) -> None:
    from elasticsearch import Elasticsearch  # type: ignore[import-not-found]

    es = Elasticsearch("https://es:9200")
    es.index(index="orders", document=doc)


def _es_index_by_id(doc: dict) -> None:
    from elasticsearch import Elasticsearch  # type: ignore[import-not-found]

    es = Elasticsearch("https://es:9200")
    es.index(index="orders", id=doc["id"], document=doc)


def _mongo_inc() -> None:
    from pymongo import MongoClient  # type: ignore[import-not-found]

    MongoClient()["ops"]["stats"].update_one({"_id": "runs"}, {"$inc": {"n": 1}})


def _mongo_set(doc: dict) -> None:
    from pymongo import MongoClient  # type: ignore[import-not-found]

    MongoClient()["crm"]["profiles"].update_one({"_id": doc["id"]}, {"$set": doc}, upsert=True)


def _kafka_short_name() -> None:
    from confluent_kafka import Producer  # type: ignore[import-not-found]

    p = Producer({"bootstrap.servers": "kafka:9092"})
    p.produce("events", b"x")
    p.flush()


def _dynamo_add() -> None:
    table = boto3.resource("dynamodb", region_name="eu-west-1").Table("state")
    table.update_item(Key={"pk": "x"}, UpdateExpression="ADD n :one", ExpressionAttributeValues={":one": 1})


def _own_helper_posts() -> None:
    _helper_that_posts()


def _helper_that_posts() -> None:
    import requests

    requests.post("https://partner.example.com/orders", json={}, timeout=5)


CASES: list[tuple[Callable[..., Any], str, str]] = [
    (_lambda_invoke, "unknown", "opaque_library_call"),
    (_s3_reads, "safe", "read_only"),
    (_module_level_client, "unknown", "opaque_library_call"),
    (_not_installed, "unknown", "opaque_library_call"),
    (_installed_unknown, "unknown", "opaque_library_call"),
    (_pure_frames, "safe", "pure"),
    (_redis_counter, "risky", "increment"),
    (_redis_cache, "safe", "keyed_write"),
    (_es_index, "risky", "append"),
    (_es_index_by_id, "safe", "keyed_write"),
    (_mongo_inc, "risky", "increment"),
    (_mongo_set, "safe", "idempotent_update"),
    (_kafka_short_name, "risky", "queue_publish"),
    (_dynamo_add, "risky", "increment"),
    (_own_helper_posts, "risky", "http_mutating"),
]


@pytest.mark.parametrize(("fn", "verdict", "category"), CASES, ids=[c[0].__name__ for c in CASES])
def test_library_calls(fn: Callable[..., Any], verdict: str, category: str) -> None:
    """Each library call gets the verdict its family and verb give; what the scan cannot see is unknown."""
    found = combine(analyze_callable(fn, markers=RUN))
    assert (found.verdict, found.category) == (verdict, category), found.reasons


def test_opaque_call_names_the_library_and_a_fix() -> None:
    """The reason names the library and the call; the fix asks for replay_safe or effect()."""
    found = combine(analyze_callable(_lambda_invoke, markers=RUN))
    assert "boto3 (invoke)" in found.reasons[0].why
    assert "replay_safe" in found.fix
    assert "effect(" in found.fix


@pytest.mark.parametrize(
    ("module", "family"),
    [
        ("pandas.core.frame", "pure"),
        ("json", "pure"),
        ("airflow.models.variable", "pure"),
        ("airflow.providers.amazon.aws.hooks.s3", "hooks"),
        ("boto3", "cloud"),
        ("google.cloud.bigquery.client", "cloud"),
        ("snowflake.connector", "db"),
        ("requests.api", "http"),
        ("urllib.parse", "pure"),
        ("urllib.request", "http"),
        ("grpc", None),
        ("acme_billing.client", None),
        (__name__, "user"),
    ],
)
def test_family_of_module(module: str, family: str | None) -> None:
    """Modules map to families; an installed or missing library no rule knows has none (unknown)."""
    assert family_of_module(module) == family
