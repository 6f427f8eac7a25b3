"""A real S3-compatible server for the tests: moto's S3 on a free loopback port, in a process of its own,
behind a WSGI layer that injects faults (an error status such as 503 SlowDown, a delay, a stall).

moto is a test-only dependency (the ``dev`` extra). :meth:`S3Server.reset` empties every bucket. Credentials
are accepted whatever they are, unless the server checks them (``S3Server(credentials=True)``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
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
    """The WSGI layer in front of moto: injects the faults, logs the requests, and answers the test's
    control requests under ``/_faults`` and ``/_requests`` (the server runs in a process of its own)."""

    def __init__(self, app):
        self.app, self.faults, self.requests, self._lock = app, [], [], threading.Lock()

    def __call__(self, environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
        if path in ("/_faults", "/_requests"):
            return self._control(environ, path, method, start_response)
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

    def _control(self, environ, path, method, start_response):
        """POST /_faults: add the JSON list of Fault fields; DELETE /_faults: none; GET /_requests: the log;
        DELETE /_requests: empty it."""
        with self._lock:
            if path == "/_faults" and method == "POST":
                size = int(environ.get("CONTENT_LENGTH") or 0)
                self.faults += [Fault(**f) for f in json.loads(environ["wsgi.input"].read(size))]
            elif method == "DELETE":
                (self.faults if path == "/_faults" else self.requests).clear()
            body = json.dumps(self.requests if path == "/_requests" else []).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]


class S3Server:
    """moto's S3 on ``127.0.0.1`` (DALI's and obstore's clients resolve ``localhost`` slowly), in a process of
    its own: DALI's S3 reader holds Python's lock while it builds a pipeline, and a server in a thread of the
    same process would never answer it."""

    def __init__(self, credentials: bool = False):
        """``credentials``: moto checks every request's signature (after the few that make a user, whose
        keys are then ``self.keys``); otherwise any credentials pass."""
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "4"} if credentials else None
        with tempfile.TemporaryDirectory() as tmp:
            found = Path(tmp) / "endpoint"
            self._process = subprocess.Popen([sys.executable, __file__, str(found)], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True, env=env)
            deadline = time.monotonic() + 120
            while not found.is_file():
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self._process.kill()
                    raise RuntimeError(f"the S3 test server did not start: {self._process.communicate()[1][-2000:]}")
                time.sleep(0.05)
            self.endpoint = found.read_text()
        self.keys = self._user() if credentials else ("testing", "testing")

    def _user(self) -> tuple[str, str]:
        """A user allowed everything in S3, made with the requests moto takes unsigned: its keys."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x")
        iam.create_user(UserName="tests")
        iam.put_user_policy(UserName="tests", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="tests")["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)

    def client(self):
        """A boto3 client of this server: the tests write their buckets with another client than
        daliloader's."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=self.keys[0], aws_secret_access_key=self.keys[1])

    def _call(self, method: str, path: str, body=None):
        import requests

        answer = requests.request(method, f"{self.endpoint}{path}", json=body, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def reset(self) -> None:
        """No bucket, no fault."""
        import requests

        requests.post(f"{self.endpoint}/moto-api/reset", timeout=30).raise_for_status()
        self.clear_faults()
        self.clear_requests()

    def fail(self, *faults: Fault) -> None:
        self._call("POST", "/_faults", [{k: v for k, v in vars(f).items() if k != "hits"} for f in faults])

    def clear_faults(self) -> None:
        self._call("DELETE", "/_faults")

    def clear_requests(self) -> None:
        self._call("DELETE", "/_requests")

    def ranges(self, path: str) -> list[str | None]:
        """The Range header of each GET of ``path`` (None: the whole object)."""
        return [r for m, p, r in self._call("GET", "/_requests") if m == "GET" and p == path]

    def requests(self, method: str | None = None, ranged: bool | None = None) -> list[tuple[str, str]]:
        """The (method, path) of the requests served (of ``method``; with or without a Range header)."""
        return [(m, p) for m, p, r in self._call("GET", "/_requests")
                if method in (None, m) and ranged in (None, r is not None)]


def _serve(endpoint_file: str) -> None:
    """Serve until ended, the endpoint written (whole) into ``endpoint_file`` once listening."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = make_server("127.0.0.1", 0, _Injector(DomainDispatcherApplication(create_backend_app)), threaded=True,
                         request_handler=MotoRequestHandler)
    partial = Path(f"{endpoint_file}.tmp")
    partial.write_text(f"http://127.0.0.1:{server.server_address[1]}")
    os.replace(partial, endpoint_file)
    server.serve_forever()


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


if __name__ == "__main__":
    _serve(sys.argv[1])
