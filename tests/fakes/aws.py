"""Local stand-ins for the AWS APIs the catalog refresh calls.

EC2 is moto running as a real HTTP server on 127.0.0.1. The Price List API, which moto does
not implement, is a small HTTP server answering ``AWSPriceListService.GetProducts`` in the
API's own JSON shape (each ``PriceList`` item a JSON string with ``product.attributes`` and
``terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD``), paginated with ``NextToken``.
Faults and latency are injected per call through botocore's ``before-send`` event.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.fakes.http import FakeHandler, LocalServer

PAGE_SIZE = 2
FILTER_VALUE_MAX = 1024


def matches(attributes: dict[str, str], term: dict[str, str]) -> bool:
    """A GetProducts filter: ``TERM_MATCH`` one value, ``ANY_OF`` a comma-separated list."""
    values = term["Value"].split(",") if term["Type"] == "ANY_OF" else [term["Value"]]
    return attributes.get(term["Field"]) in {v.strip() for v in values}


def attributes(instance_type: str, region: str, os: str = "Linux") -> dict[str, str]:
    return {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": os,
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "servicecode": "AmazonEC2",
    }


def product(instance_type: str, region: str, usd: float, os: str = "Linux") -> str:
    sku = f"SKU{abs(hash((instance_type, region, os))) % 10**8:08d}"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": attributes(instance_type, region, os),
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": f"{usd:.10f}"},
                                "description": f"${usd} per On Demand {os} {instance_type} Instance Hour",
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "termAttributes": {},
                    }
                }
            },
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


class PricingServer(LocalServer):
    """``prices[(instance_type, region)] = usd`` for Linux (Windows at twice that, so a query
    without the operating-system filter shows); answers GetProducts with every filter applied."""

    def __init__(
        self, prices: dict[tuple[str, str], float], latency_s: float = 0.0, page_size: int = 100
    ) -> None:
        self.prices = prices
        self.page_size = page_size
        self.latency_s = latency_s
        self.requests = 0
        self.queries: list[list[dict[str, str]]] = []  # each request's Filters
        outer = self

        class Handler(FakeHandler):
            def do_POST(self) -> None:
                outer.requests += 1
                time.sleep(outer.latency_s)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                target = self.headers.get("X-Amz-Target", "")
                if not target.endswith("GetProducts"):
                    self._send(400, {"__type": "InvalidParameterException", "Message": target})
                    return
                filters = body.get("Filters", [])
                outer.queries.append(filters)
                too_long = [f["Field"] for f in filters if len(f["Value"]) > FILTER_VALUE_MAX]
                if too_long:  # the real API's model caps Filter.Value at 1024 characters
                    message = f"Value of filter {too_long[0]} is longer than {FILTER_VALUE_MAX}"
                    self._send(400, {"__type": "ValidationException", "Message": message})
                    return
                items = [
                    product(t, r, price, os)
                    for (t, r), usd in sorted(outer.prices.items())
                    for os, price in (("Linux", usd), ("Windows", usd * 2))
                    if all(matches(attributes(t, r, os), f) for f in filters)
                ]
                size = min(int(body.get("MaxResults") or PAGE_SIZE), outer.page_size)
                start = int(body.get("NextToken") or 0)
                page = items[start : start + size]
                answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
                if start + size < len(items):
                    answer["NextToken"] = str(start + size)
                self._send(200, answer)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                self.send_body(status, json.dumps(payload).encode(), "application/x-amz-json-1.1")

        super().__init__(Handler, "fake-pricing")


@contextmanager
def moto_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def aws_env(ec2_url: str, pricing_url: str) -> dict[str, str]:
    """Standard AWS configuration pointing at the local servers, with dummy credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_EC2": ec2_url,
        "AWS_ENDPOINT_URL_AUTO_SCALING": ec2_url,  # the same moto server answers Auto Scaling
        "AWS_ENDPOINT_URL_IAM": ec2_url,  # and IAM (the sweep reads instance profiles' tags)
        "AWS_ENDPOINT_URL_STS": ec2_url,  # and STS (the sweep's own identity, its default deployer)
        "AWS_ENDPOINT_URL_PRICING": pricing_url,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


def error_response(request: Any, status: int, code: str, message: str = "injected") -> Any:
    """A botocore HTTP response carrying an AWS error, in the service's own protocol."""
    from botocore.awsrequest import AWSResponse

    if "x-amz-json" in str(request.headers.get("Content-Type", "")):
        body = json.dumps({"__type": code, "message": message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1"}
    else:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>1</RequestID></Response>"
        ).encode()
        headers = {"Content-Type": "text/xml"}

    class Raw:
        def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
            yield body

    response = AWSResponse(request.url, status, headers, Raw())
    response._content = body
    return response


class Faults:
    """A ``before-send`` hook: latency on every call, and scripted failures by operation/region."""

    def __init__(self, latency_s: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.latency_s = latency_s
        self.sleep = sleep
        self.rules: list[tuple[Callable[[Any], bool], Callable[[Any], Any], list[int]]] = []
        self.lock = threading.Lock()

    def fail(self, when: Callable[[Any], bool], then: Callable[[Any], Any], times: int = 10**9) -> None:
        self.rules.append((when, then, [times]))

    def __call__(self, request: Any, **_: Any) -> Any:
        if self.latency_s:
            self.sleep(self.latency_s)
        with self.lock:
            for when, then, left in self.rules:
                if left[0] > 0 and when(request):
                    left[0] -= 1
                    return then(request)
        return None


def operation(request: Any) -> str:
    """The API operation of a prepared botocore request (Query ``Action=`` or JSON target)."""
    target = request.headers.get("X-Amz-Target")
    if target:
        return str(target.decode() if isinstance(target, bytes) else target).split(".")[-1]
    body = request.body.decode() if isinstance(request.body, bytes) else str(request.body or "")
    for part in body.split("&"):
        if part.startswith("Action="):
            return part.removeprefix("Action=")
    return ""


def region_of(request: Any) -> str:
    """The region a signed request is for, from its SigV4 credential scope."""
    auth = request.headers.get("Authorization", b"")
    text = auth.decode() if isinstance(auth, bytes) else str(auth)
    scope = text.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
    return scope[2] if len(scope) > 2 else ""


class ReplayServer(LocalServer):
    """Replays recorded EC2 answers by (region, request body), after ``latency_s``.

    moto spends far more CPU per call than EC2 does; for timing the refresh's concurrency,
    calls are recorded from moto once and replayed by this server, so the fake's own work
    does not drown the latency being measured."""

    def __init__(self, recorded: dict[tuple[str, str], bytes], latency_s: float) -> None:
        self.recorded = recorded
        self.latency_s = latency_s
        outer = self

        class Handler(FakeHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                auth = self.headers.get("Authorization", "")
                scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
                region = scope[2] if len(scope) > 2 else ""
                time.sleep(outer.latency_s)
                answer = outer.recorded.get((region, body))
                status = 200 if answer is not None else 400
                data = (
                    answer or b"<Response><Errors><Error><Code>NotRecorded</Code></Error></Errors></Response>"
                )
                self.send_body(status, data, "text/xml")

        super().__init__(Handler, "fake-ec2-replay")


class Recorder:
    """A ``before-send`` hook that makes each EC2 call itself and keeps the answer by
    (region, request body), for ``ReplayServer``."""

    def __init__(self) -> None:
        self.recorded: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> Any:
        import urllib.request

        body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        forward = urllib.request.Request(request.url, data=body, headers=headers, method=request.method)
        with urllib.request.urlopen(forward) as answer:
            content = answer.read()
        with self._lock:
            self.recorded[(region_of(request), body.decode())] = content
        return ok_response(request, content)


def ok_response(request: Any, body: bytes) -> Any:
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, *_: Any, **__: Any) -> Iterator[bytes]:
            yield body

    response = AWSResponse(request.url, 200, {"Content-Type": "text/xml"}, Raw())
    response._content = body
    return response


def serve_forever(recorded_file: str, latency_s: float) -> None:
    """Serve recorded EC2 answers and snapshot prices from a separate process (for the
    benchmark: a real API does not share the client's CPU). Prints the two URLs, one a line."""
    import base64
    import sys

    with open(recorded_file, encoding="utf-8") as handle:
        raw = json.load(handle)
    recorded = {(r, b): base64.b64decode(v) for r, b, v in raw["ec2"]}
    prices = {(t, r): float(p) for t, r, p in raw["prices"]}
    with ReplayServer(recorded, latency_s) as ec2, PricingServer(prices, latency_s) as pricing:
        print(ec2.url, flush=True)
        print(pricing.url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    import sys

    serve_forever(sys.argv[1], float(sys.argv[2]))
