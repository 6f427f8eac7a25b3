"""A real S3-compatible server for the tests: moto's S3 on a free loopback port, in this process, behind
a WSGI layer that injects faults (an error status such as 503 SlowDown, a delay, a stall).

moto is a test-only dependency (the ``dev`` extra). Its state is process-wide: :meth:`S3Server.reset`
empties every bucket. Credentials are accepted whatever they are, unless ``INITIAL_NO_AUTH_ACTION_COUNT``
is set before moto is imported (:func:`checking_credentials`, in a process of its own).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ERROR_XML = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by the test'
             '</Message><RequestId>fault</RequestId></Error>')

#: What the AWS SDKs read, set while the server runs: test credentials, a region, no instance metadata.
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@dataclass
class Fault:
    """Applies to requests whose path holds ``path`` (and of ``method``, where given), ``times`` times (None:
    every time): ``delay`` seconds of silence first, then the ``status`` (0: none, the request goes on)."""

    path: str
    status: int = 503
    code: str = "SlowDown"
    delay: float = 0.0
    times: int | None = 1
    method: str | None = None
    hits: int = 0


class _Injector:
    def __init__(self, app):
        self.app, self.faults, self.requests, self._lock = app, [], [], threading.Lock()

    def __call__(self, environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
        with self._lock:
            self.requests.append((method, path, environ.get("HTTP_RANGE")))
            fault = next((f for f in self.faults if f.path in path and f.method in (None, method)
                          and (f.times is None or f.hits < f.times)), None)
            if fault:
                fault.hits += 1
        if fault:
            time.sleep(fault.delay)
            if fault.status:
                body = ERROR_XML.format(code=fault.code).encode()
                start_response(f"{fault.status} Injected", [("Content-Type", "application/xml"),
                                                            ("Content-Length", str(len(body)))])
                return [body]
        return self.app(environ, start_response)


class S3Server:
    """moto's S3 on ``127.0.0.1`` (DALI's and obstore's clients resolve ``localhost`` slowly), in a thread."""

    def __init__(self):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        self.injector = _Injector(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, self.injector, threaded=True, request_handler=MotoRequestHandler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def client(self):
        """A boto3 client of this server: the tests write their buckets with another client than
        daliloader's."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def reset(self) -> None:
        """No bucket, no fault."""
        import requests

        requests.post(f"{self.endpoint}/moto-api/reset", timeout=10).raise_for_status()
        self.injector.faults.clear()
        self.injector.requests.clear()

    def fail(self, *faults: Fault) -> None:
        self.injector.faults.extend(faults)

    def requests(self, method: str | None = None, ranged: bool | None = None) -> list[tuple[str, str]]:
        """The (method, path) of the requests served (of ``method``; with or without a Range header)."""
        return [(m, p) for m, p, r in self.injector.requests
                if method in (None, m) and ranged in (None, r is not None)]


def upload(client, folder: Path, bucket: str, prefix: str) -> str:
    """Every file under ``folder`` into ``bucket`` under ``prefix`` (made where missing); its URL."""
    if bucket not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=bucket)
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder).as_posix()}")
    return f"s3://{bucket}/{prefix}"


class environment:
    """Within the block, the AWS variables of :data:`ENV` and ``AWS_ENDPOINT_URL=endpoint`` (and ``extra``)."""

    def __init__(self, endpoint: str, **extra: str):
        self.values = {**ENV, "AWS_ENDPOINT_URL": endpoint, **extra}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
