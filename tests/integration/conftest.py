"""Fixtures for the `dsv4 serve` integration tests.

Each fixture starts a real `dsv4 serve` process on an ephemeral 127.0.0.1
port (the server prints the port it bound), waits until /health answers, and
stops it (SIGTERM, then SIGKILL) afterwards. The binary is $DSV4_BIN (set by
`make test`), else build/release/dsv4.

Models: stories260K (bundled, by name; plain prompt format) and the
test-only scripted echo model over the DeepSeek-V4 tokenizer
(`--test-echo-model`, see src/engine/echo_model.h), which makes reasoning
and DSML tool-call output deterministic.
"""
import os
import pathlib
import select
import signal
import subprocess
import time

import httpx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
V4_TOKENIZER = ROOT / "tests/data/tokenizer/deepseek_v4_tokenizer.json.gz"
STARTUP_SECONDS = 60


def _binary():
    path = os.environ.get("DSV4_BIN") or str(ROOT / "build/release/dsv4")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"dsv4 binary not found at {path}; build it or set DSV4_BIN")
    return path


class Server:
    """A running `dsv4 serve`; `url` is http://127.0.0.1:PORT."""

    def __init__(self, *args, env=None):
        if not any(a in ("--model", "-m", "--test-echo-model") for a in args):
            args = ("--model", "stories260K", *args)  # the bundled llama2.c model, by name
        self.args = [_binary(), "serve", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        self.port = None
        deadline = time.monotonic() + STARTUP_SECONDS
        line = ""
        while time.monotonic() < deadline and self.port is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    break
                if "listening on http://127.0.0.1:" in line:
                    self.port = int(line.split("127.0.0.1:")[1].split()[0])
            if self.proc.poll() is not None:
                break
        if self.port is None:
            self.stop()
            raise RuntimeError(f"dsv4 serve did not start: {line!r} {self.proc.stderr.read()!r}")
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)

    def metrics(self, headers=None):
        """The /metrics page as {name or name{labels}: value}."""
        text = httpx.get(self.url + "/metrics", headers=headers, timeout=5).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                # A graceful stop closes idle connections at once and gives
                # responses in flight --shutdown-grace (10 s by default).
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture(scope="session")
def llama_server():
    """stories260K, 16 slots: batching and queueing."""
    server = Server("--max-sequences", "16", "--max-queue", "64", "--threads", "1")
    yield server
    server.stop()
    assert server.proc.returncode == 0


@pytest.fixture(scope="session")
def echo_server():
    """The scripted echo model with the DeepSeek-V4 tokenizer and chat format."""
    server = Server("--test-echo-model", "--tokenizer", str(V4_TOKENIZER), "--max-sequences", "4")
    yield server
    server.stop()
    assert server.proc.returncode == 0


@pytest.fixture(scope="module")
def slow_server():
    """One slot, no queue, 20 ms per step: requests stay running long enough to
    be observed, and a second one is refused."""
    server = Server("--max-sequences", "1", "--max-queue", "0", "--test-step-delay-ms", "20",
                    "--threads", "1")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def key_server():
    """--api-key and a small body limit."""
    server = Server("--api-key", "sekret", "--max-body-bytes", "4096", "--threads", "1")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def page_server():
    """The echo model for the chat page: one slot, no queue (a request that
    is not cancelled keeps the next one out), 15 ms per step (a long answer
    streams for seconds)."""
    server = Server("--test-echo-model", "--tokenizer", str(V4_TOKENIZER), "--max-sequences", "1",
                    "--max-queue", "0", "--test-step-delay-ms", "15")
    yield server
    server.stop()
    assert server.proc.returncode == 0


@pytest.fixture(scope="module")
def page_key_server():
    """The echo model behind --api-key."""
    server = Server("--test-echo-model", "--tokenizer", str(V4_TOKENIZER), "--api-key", "sekret")
    yield server
    server.stop()
    assert server.proc.returncode == 0


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Selenium. Missing browser or driver
    is a failure (scripts/install-deps.sh installs both), never a skip."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            pytest.fail(f"{path} not found: the chat page tests need the Debian package "
                        f"'{package}' (run scripts/install-deps.sh)", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=900,700", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--no-default-browser-check"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
